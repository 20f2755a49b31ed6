// The stepped strategy's fused form for the log HMM with one shared transition table (runtime/chain_fused_steps.cpp):
// one persistent kernel runs every position of every sequence, each step's [B × C] · [C × C] product in tiles of
// kFusedRows × kFusedCols outputs, the blocks meeting at a barrier between positions (position_barrier), instead of a
// product's launches per position. Its product is exp_matmul's (docs/exp_matmul.md): the relative messages' factors
// 2^((msg − shift)·log2 e) ≤ 1, made as a block stages them, times the table's column factors
// 2^((tab − colmax)·log2 e) ≤ 1 made once per call ("_factors"), so a sum of C terms of at most 1 that cannot
// overflow; with FMA arithmetic, or where a block keeps its tile's table side resident on a GPU with TF32 tensor
// cores, three TF32 products a term (fused_mma.cuh). A term lost to flushing is below 2^-126 (four times that on
// tensor cores, fused_mma.cuh), so a sum of at least C·2^-94 has lost less than 2^-29 of itself; any other output, and
// every output whose row or column holds +inf, is recomputed term by term from the log values (LogSemiring,
// core/semirings.cuh). NaN on either side gives NaN, and a row or column of −inf alone (no +inf on the other side)
// −inf.
//
// The tiles, the barrier and what is kept of each position are the fused forms' own (templates/chain/
// fused_tiles.cuh): saved, alpha and the score mean what step_position writes (templates/chain/steps.cuh). The
// score of each sequence follows a last barrier. S is a storage type whose accumulator is f32.
#pragma once

#include "chain/fused_mma.cuh"
#include "chain/fused_sweep.cuh"
#include "core/dtypes.cuh"
#include "core/numbers.cuh"
#include "core/semirings.cuh"

namespace jb {

// A tile's product with FMA arithmetic (fused_sweep.cuh): each thread's sums of its owned rows' outputs in acc.
template <bool RESIDENT, int SPLIT, class F>
__device__ __forceinline__ void fma_product(const ChainParams& p, const fused::Position& q, const fused::TileRows& rows,
                                            long long r0, long long c0, F factor, float (&acc)[4][4]) {
  using namespace fused;
  float* const meet = sweep<RESIDENT, SPLIT>(q, rows, r0, c0, static_cast<const float*>(p.factors), 0.f, factor,
                                             [&](const float4(&a)[4], const float4(&b)[4], int) {
#pragma unroll
                                               for (int r = 0; r < 4; ++r) {
                                                 const float ar[4] = {a[r].x, a[r].y, a[r].z, a[r].w};
#pragma unroll
                                                 for (int u = 0; u < 4; ++u) {
                                                   acc[r][0] = fmaf(ar[u], b[u].x, acc[r][0]);
                                                   acc[r][1] = fmaf(ar[u], b[u].y, acc[r][1]);
                                                   acc[r][2] = fmaf(ar[u], b[u].z, acc[r][2]);
                                                   acc[r][3] = fmaf(ar[u], b[u].w, acc[r][3]);
                                                 }
                                               }
                                             });
  // Each thread's sums of the rows other groups own go to them through `meet`; an owner adds them in the writers'
  // order.
  float(*const red)[kFusedRows][kFusedCols] = reinterpret_cast<float(*)[kFusedRows][kFusedCols]>(meet);
#pragma unroll
  for (int r = 0; r < 4; ++r)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int o = owner<SPLIT>(r);
      if (o != q.g) red[meet_slot(q.g, o)][q.ty * 4 + r][q.tx * 4 + j] = acc[r][j];
    }
  __syncthreads();
#pragma unroll
  for (int r = 0; r < 4; ++r)
#pragma unroll
    for (int j = 0; j < 4; ++j)
      if (owner<SPLIT>(r) == q.g)
#pragma unroll
        for (int h = 0; h < SPLIT - 1; ++h) acc[r][j] += red[h][q.ty * 4 + r][q.tx * 4 + j];
}

// Position i's messages of every tile the block owns, unshifted (position t of the direction), with the tiles' row
// maxima: the product's log (or its exact repair) ⊗ the position's emission, the first position's messages, −inf
// past a sequence's length.
template <class S, bool BETA, bool RESIDENT>
__device__ __forceinline__ void fused_position(const ChainParams& p, long long i) {
  using namespace fused;
  constexpr int SPLIT = fused_groups(true, RESIDENT);
  constexpr bool kTensorCores = RESIDENT && JB_HAS_MMA_TF32_BF16;
  __shared__ TileRows rows;
  const Position q = position(p, i);
  const long long C = q.C, t = BETA ? p.T - 1 - i : i;
  const float* const col_max = static_cast<const float*>(p.col_max);
  const float* const table = static_cast<const float*>(p.table);
  const float guard = float(C) * Num<float>::pow2(-94);
  for (long long tile = blockIdx.x; tile < q.tiles; tile += gridDim.x) {
    const long long r0 = tile / q.tiles_n * kFusedRows, c0 = tile % q.tiles_n * kFusedCols;
    __syncthreads(); // the previous tile's reads of the rows' states are done
    const bool product = stage_rows(p, rows, r0, t, BETA, q.prev_max, q.tiles_n);
    // Each group's sums of its chunks' terms: the messages' factors 2^((msg − shift)·log2 e), made as they are
    // staged, times the table's factors.
    float acc[4][4] = {};
    const auto factor = [&](int row, float v) { return Num<float>::exp2((v - rows.shift[row]) * Num<float>::log2e()); };
    if (product) {
      if constexpr (kTensorCores)
        mma_product<SPLIT>(q, rows, r0, factor, acc);
      else
        fma_product<RESIDENT, SPLIT>(p, q, rows, r0, c0, factor, acc);
    }
    store_tile<S, BETA, SPLIT>(p, q, rows, r0, c0, t, tile, [&](int r, int j, int row, long long b, long long n) {
      const int clean = rows.clean[row];
      const float cm = col_max[n], s = acc[r][j];
      if (clean == 3 || cm != cm) return Num<float>::nan(); // a NaN term makes the sum NaN, whatever meets it
      if (clean != 0 && cm < Num<float>::inf() && (clean == 2 || cm == Num<float>::neg_inf()))
        return Num<float>::neg_inf(); // no +inf: nothing reaches but −inf
      if (clean == 1 && cm < Num<float>::inf() && s >= guard) return cm + Num<float>::log2(s) * Num<float>::ln2();
      // +inf on either side (meeting −inf it is NaN), or a sum below the guard: term by term from
      // the log values, the relative message ⊗ the table's entry.
      typename LogSemiring<float>::State st = LogSemiring<float>::init();
      const float shift = rows.shift[row];
      for (long long k = 0; k < C; ++k)
        LogSemiring<float>::add_term(st, __ldcg(q.prev + b * C + k) - shift, table[k * C + n], k);
      return LogSemiring<float>::finalize(st);
    });
  }
}

// The scores from the last positions' sums, a thread per sequence; a sequence whose score is +inf or NaN has its
// saved messages made −inf (as step_position does: its backward reads none of them).
__device__ __forceinline__ void fused_scores(const ChainParams& p) {
  const long long C = p.states;
  const int tiles_n = int((C + kFusedCols - 1) / kFusedCols);
  for (long long b = blockIdx.x * (long long)blockDim.x + threadIdx.x; b < p.B;
       b += (long long)gridDim.x * blockDim.x) {
    const float m = __ldcg(static_cast<const float*>(p.ends) + b);
    float v = m;
    double z = double(m);
    if (m > Num<float>::neg_inf() && m < Num<float>::inf()) {
      float s = 0.f;
      for (int j = 0; j < tiles_n; ++j) s += __ldcg(static_cast<const float*>(p.row_sums) + b * tiles_n + j);
      v = Num<float>::log2(s) * Num<float>::ln2();
      z = __ldcg(p.end_offsets + b) + double(v);
    }
    static_cast<float*>(p.score)[b] = float(z);
    if (p.logz) p.logz[b] = z;
    if (p.rel && !(v < Num<float>::inf())) {
      bool bad;
      const long long L = chain_length(p, b, bad);
      for (long long k = 0; k < L * C; ++k) static_cast<float*>(p.rel)[b * p.T * C + k] = Num<float>::neg_inf();
    }
  }
}

// Every position of every sequence in one direction: the forward (BETA false) writes the scores, alpha and the
// forward half of saved; the backward messages' pass (BETA true) the other half. RESIDENT: each block owns at most
// one tile and keeps its factors in shared memory (fused_resident_floats of dynamic shared memory). p.factors and
// p.col_max are this direction's ("_factors"), p.table its widened table [k][n] (k the source state, n the target);
// scratch: p.msg [2][B][C] (unshifted messages), p.row_maxima [2][B][tiles_n], p.row_sums [B][tiles_n], p.ends [B] (the
// last position's largest message), p.offsets [2][B] and p.end_offsets [B] in double, p.barrier a slot of 64 words for
// the grid and one for each row of tiles, zeroed.
template <class S, bool BETA, bool RESIDENT> __device__ __forceinline__ void fused_steps(const ChainParams& p) {
  if (RESIDENT) fused::stage_resident_table(p, static_cast<const float*>(p.factors), 0.f);
  for (long long i = 0; i < p.T; ++i) {
    fused_position<S, BETA, RESIDENT>(p, i);
    position_barrier<RESIDENT>(p);
    fused_keep<true, BETA, fused_groups(true, RESIDENT)>(p, i);
  }
  if (BETA) return;
  grid_barrier(p.barrier, p.barrier + 32, gridDim.x);
  fused_scores(p);
}

} // namespace jb
