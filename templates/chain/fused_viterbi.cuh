// The stepped strategy's fused form for the max_plus HMM with one shared transition table (runtime/chain_fused_steps.cpp):
// one persistent kernel runs every position of every sequence, each step's [B × C] · [C × C] max-plus product in
// tiles of kFusedRows × kFusedCols outputs with the source that won each (the back-pointers), the blocks meeting at
// a barrier between positions (position_barrier, templates/chain/fused_tiles.cuh), then the best path from them.
//
// The arithmetic is step_position's and its products' (templates/chain/steps.cuh): a term is the relative message
// (the position's value minus its row's shift, as the products read it) plus the table's entry in f32, the winner the
// largest with ties to the smallest source and NaN winning (ChainMax), the emission added after; so the scores and
// paths are the sequential kernels' bit for bit. The fast loop keeps the largest term and the first four sources
// reaching it, and the first of those four is found at the end: ChainMax's order where no term is NaN. Where a row's
// messages or a table's column hold NaN or +inf (+inf meeting −inf is NaN), the output is formed term by term with
// ChainMax instead. S is a storage type whose accumulator is f32.
#pragma once

#include "chain/fused_sweep.cuh"
#include "core/dtypes.cuh"
#include "core/numbers.cuh"

namespace jb {

// Position t's messages of every tile the block owns, unshifted, with the tiles' row maxima and (with p.argmax)
// each output's winning source: the product's best ⊗ the emission, the first messages at 0, −inf past a length.
template <class S, bool RESIDENT>
__device__ __forceinline__ void fused_viterbi_position(const ChainParams& p, long long t) {
  using namespace fused;
  constexpr int SPLIT = fused_groups(false, RESIDENT);
  __shared__ TileRows rows;
  const Position q = position(p, t);
  const long long C = q.C;
  const float* const col_max = static_cast<const float*>(p.col_max);
  const float* const table = static_cast<const float*>(p.table);
  for (long long tile = blockIdx.x; tile < q.tiles; tile += gridDim.x) {
    const long long r0 = tile / q.tiles_n * kFusedRows, c0 = tile % q.tiles_n * kFusedCols;
    __syncthreads(); // the previous tile's reads of the rows' states are done
    const bool product = stage_rows(p, rows, r0, t, false, q.prev_max, q.tiles_n);
    // Each group's best term of its chunks and where it first reached it: the first source of a four, −1 while
    // every term is −inf.
    float best[4][4];
    int arg[4][4];
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
      for (int j = 0; j < 4; ++j) best[r][j] = Num<float>::neg_inf(), arg[r][j] = -1;
    if (product) {
      // Four sources at a time: their best term, and the four's first source where it beats the best so far (the
      // fours in increasing order, so that a tie keeps the earlier). Which of the four won is found once, for the
      // final winner; a max of the four takes one instruction a term where a running argmax takes three.
      float* const meet = sweep<RESIDENT, SPLIT>(
          q, rows, r0, c0, table, Num<float>::neg_inf(), [&](int row, float v) { return v - rows.shift[row]; },
          [&](const float4(&a)[4], const float4(&b)[4], int four) {
#pragma unroll
            for (int r = 0; r < 4; ++r) {
              const float ar[4] = {a[r].x, a[r].y, a[r].z, a[r].w};
#pragma unroll
              for (int j = 0; j < 4; ++j) {
                const float s0 = ar[0] + (&b[0].x)[j], s1 = ar[1] + (&b[1].x)[j];
                const float s2 = ar[2] + (&b[2].x)[j], s3 = ar[3] + (&b[3].x)[j];
                const float m = fmaxf(fmaxf(s0, s1), fmaxf(s2, s3));
                if (m > best[r][j]) best[r][j] = m, arg[r][j] = four;
              }
            }
          });
      // Each thread's winners of the rows other groups own go to them through `meet`: values in its first half,
      // sources in its second. Each group's chunks interleave the others', so a tie goes to the smaller source,
      // whichever group found it.
      float(*const value)[kFusedRows][kFusedCols] = reinterpret_cast<float(*)[kFusedRows][kFusedCols]>(meet);
      float(*const source)[kFusedRows][kFusedCols] = value + (SPLIT - 1);
#pragma unroll
      for (int r = 0; r < 4; ++r)
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int o = owner<SPLIT>(r);
          if (o == q.g) continue;
          value[meet_slot(q.g, o)][q.ty * 4 + r][q.tx * 4 + j] = best[r][j];
          source[meet_slot(q.g, o)][q.ty * 4 + r][q.tx * 4 + j] = __int_as_float(arg[r][j]);
        }
      __syncthreads();
#pragma unroll
      for (int r = 0; r < 4; ++r)
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          if (owner<SPLIT>(r) != q.g) continue;
#pragma unroll
          for (int h = 0; h < SPLIT - 1; ++h) {
            const float v = value[h][q.ty * 4 + r][q.tx * 4 + j];
            const int k = __float_as_int(source[h][q.ty * 4 + r][q.tx * 4 + j]);
            if (v > best[r][j] || (v == best[r][j] && k >= 0 && (arg[r][j] < 0 || k < arg[r][j])))
              best[r][j] = v, arg[r][j] = k;
          }
        }
    }
    store_tile<S, false, SPLIT>(p, q, rows, r0, c0, t, tile, [&](int r, int j, int row, long long b, long long n) {
      const int clean = rows.clean[row];
      const float cm = col_max[n], shift = rows.shift[row];
      float prod = best[r][j];
      int from = 0; // every term −inf: the first source, as ChainMax keeps it
      if (!(clean == 1 || clean == 2) || !(cm < Num<float>::inf())) {
        // NaN or +inf in the row or the column (cm NaN fails the test too): term by term,
        // ChainMax's order.
        prod = (__ldcg(q.prev + b * C) - shift) + table[n];
        for (long long k = 1; k < C; ++k) {
          const float s = (__ldcg(q.prev + b * C + k) - shift) + table[k * C + n];
          if (ChainMax<float>::beats(s, int(k), prod, from)) prod = s, from = int(k);
        }
      } else if (arg[r][j] >= 0) {
        // The first of the winning four whose term, formed as the loop formed it, is the best (the
        // last where none of the others is: a source past C is −inf and never the best).
        from = arg[r][j] + 3;
        for (int u = 2; u >= 0; --u) {
          const long long k = arg[r][j] + u;
          if (k >= C) continue;
          const float s = (__ldcg(q.prev + b * C + k) - shift) + table[k * C + n];
          if (s == best[r][j]) prod = s, from = int(k);
        }
      }
      if (p.argmax) p.argmax[(t * q.B + b) * C + n] = from;
      return prod;
    });
  }
}

// The scores and best paths once every position is kept, a thread per sequence: the tiles' winners of the last
// position (ChainMax's order) give the score (the offset added where it is finite) and the path's last state (−1
// for a score of −inf or a bad length), and the back-pointers the states before it (step_path's walk).
__device__ __forceinline__ void fused_best_path(const ChainParams& p) {
  const long long C = p.states;
  const int tiles_n = int((C + kFusedCols - 1) / kFusedCols);
  for (long long b = blockIdx.x * (long long)blockDim.x + threadIdx.x; b < p.B;
       b += (long long)gridDim.x * blockDim.x) {
    float v = Num<float>::neg_inf();
    int arg = -1;
    for (int j = 0; j < tiles_n; ++j) {
      const float w = __ldcg(static_cast<const float*>(p.row_sums) + b * tiles_n + j);
      const int i = __ldcg(p.row_args + b * tiles_n + j);
      if (ChainMax<float>::beats(w, i, v, arg)) v = w, arg = i;
    }
    const double z =
        v > Num<float>::neg_inf() && v < Num<float>::inf() ? __ldcg(p.end_offsets + b) + double(v) : double(v);
    static_cast<float*>(p.score)[b] = float(z);
    if (p.logz) p.logz[b] = z;
    if (!p.path) continue;
    bool bad;
    const long long L = chain_length(p, b, bad);
    int state = v == Num<float>::neg_inf() || bad ? -1 : arg;
    p.path[b * p.T + L - 1] = state;
    for (long long t = L - 1; t > 0; --t) {
      if (state >= 0) state = __ldcg(p.argmax + (t * p.B + b) * C + state);
      p.path[b * p.T + t - 1] = state;
    }
  }
}

// The forward pass over every position (max_plus has no backward messages: its backward reads the path). p.col_max
// is the forward table's ("_factors"), p.table the widened table [k][n] (k the source state, n the target); scratch
// as the log form's (fused_steps), with row_args [B][tiles], and with a path argmax [T][B][C]. RESIDENT as there.
template <class S, bool RESIDENT> __device__ __forceinline__ void fused_viterbi(const ChainParams& p) {
  if (RESIDENT) fused::stage_resident_table(p, static_cast<const float*>(p.table), Num<float>::neg_inf());
  for (long long t = 0; t < p.T; ++t) {
    fused_viterbi_position<S, RESIDENT>(p, t);
    position_barrier<RESIDENT>(p);
    fused_keep<false, false, fused_groups(false, RESIDENT)>(p, t);
  }
  grid_barrier(p.barrier, p.barrier + 32, gridDim.x);
  fused_best_path(p);
}

} // namespace jb
