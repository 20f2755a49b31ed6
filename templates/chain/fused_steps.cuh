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
// This file holds that arithmetic and the streamed pass, whose blocks take the tiles in turn; the resident pass, a
// block a tile, is fused_resident.cuh. The tiles, the barrier and what is kept of each position are the fused forms'
// own (templates/chain/fused_tiles.cuh): saved, alpha and the score mean what step_position writes
// (templates/chain/steps.cuh). The score of each sequence follows a last barrier. S is a storage type whose
// accumulator is f32.
#pragma once

#include "chain/fused_sweep.cuh"
#include "core/dtypes.cuh"
#include "core/numbers.cuh"
#include "core/semirings.cuh"

namespace jb {
namespace fused {

// The FMA sweep's body (fused_sweep.cuh): four sources' terms of each of a thread's 4 × 4 outputs added into acc.
struct FmaTerms {
  float (&acc)[4][4];
  __device__ __forceinline__ void operator()(const float4 (&a)[4], const float4 (&b)[4], int) const {
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
  }
};

// Once an FMA sweep's groups have their sums: each thread's sums of the rows other groups own go to them through
// `meet` (what the sweep returned); an owner adds them in the writers' order.
template <int SPLIT> __device__ __forceinline__ void meet_sums(const Position& q, float* meet, float (&acc)[4][4]) {
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

// Output (b, n) of a product from its sum s of the factors' terms: `clean` its row's previous messages as
// TileRows::clean says, `shift` theirs, `prev_row` them (unshifted, b's row of the previous position), cm the
// column's maximum, `table` the widened table.
__device__ __forceinline__ float log_output(int clean, float cm, float s, float guard, float shift,
                                            const float* prev_row, const float* table, long long n, long long C) {
  if (clean == 3 || cm != cm) return Num<float>::nan(); // a NaN term makes the sum NaN, whatever meets it
  if (clean != 0 && cm < Num<float>::inf() && (clean == 2 || cm == Num<float>::neg_inf()))
    return Num<float>::neg_inf(); // no +inf: nothing reaches but −inf
  if (clean == 1 && cm < Num<float>::inf() && s >= guard) return cm + Num<float>::log2(s) * Num<float>::ln2();
  // +inf on either side (meeting −inf it is NaN), or a sum below the guard: term by term from the log values, the
  // relative message ⊗ the table's entry.
  typename LogSemiring<float>::State st = LogSemiring<float>::init();
  for (long long k = 0; k < C; ++k) LogSemiring<float>::add_term(st, __ldcg(prev_row + k) - shift, table[k * C + n], k);
  return LogSemiring<float>::finalize(st);
}

// The smallest sum of C factors' terms taken as it is: a term lost to flushing is below 2^-126 (four times that on
// tensor cores, fused_mma.cuh), so such a sum has lost less than 2^-29 of itself.
__device__ __forceinline__ float sum_guard(long long C) { return float(C) * Num<float>::pow2(-94); }

// A message's factor as a block stages it: 2^((v − shift)·log2 e) ≤ 1.
__device__ __forceinline__ float message_factor(float v, float shift) {
  return Num<float>::exp2((v - shift) * Num<float>::log2e());
}

} // namespace fused

// Position i's messages of every tile the block owns, unshifted (position t of the direction), with the tiles' row
// maxima: the product's log (or its exact repair) ⊗ the position's emission, the first position's messages, −inf
// past a sequence's length. The table's side is staged a chunk at a time (fused_sweep.cuh), the product in FMA.
template <class S, bool BETA> __device__ __forceinline__ void fused_position(const ChainParams& p, long long i) {
  using namespace fused;
  constexpr int SPLIT = fused_groups(true, false);
  __shared__ TileRows rows;
  const Position q = position(p, i);
  const long long C = q.C, t = BETA ? p.T - 1 - i : i;
  const float* const col_max = static_cast<const float*>(p.col_max);
  const float* const table = static_cast<const float*>(p.table);
  const float guard = sum_guard(C);
  for (long long tile = blockIdx.x; tile < q.tiles; tile += gridDim.x) {
    const long long r0 = tile / q.tiles_n * kFusedRows, c0 = tile % q.tiles_n * kFusedCols;
    __syncthreads(); // the previous tile's reads of the rows' states are done
    const bool product = stage_rows(p, rows, r0, t, BETA, q.prev_max, q.tiles_n);
    // Each group's sums of its chunks' terms: the messages' factors, made as they are staged, times the table's.
    float acc[4][4] = {};
    if (product) {
      float* const meet = sweep<false, SPLIT>(
          q, rows, r0, c0, static_cast<const float*>(p.factors), 0.f,
          [&](int row, float v) { return message_factor(v, rows.shift[row]); }, FmaTerms{acc});
      meet_sums<SPLIT>(q, meet, acc);
    }
    store_tile<S, BETA, SPLIT>(p, q, rows, r0, c0, t, tile, [&](int r, int j, int row, long long b, long long n) {
      return log_output(rows.clean[row], col_max[n], acc[r][j], guard, rows.shift[row], q.prev + b * C, table, n, C);
    });
  }
}

// The scores of sequences [first, end) from their last positions' sums, the threads taking them from `index` on,
// `stride` apart; a sequence whose score is +inf or NaN has its saved messages made −inf (as step_position does: its
// backward reads none of them).
__device__ __forceinline__ void fused_scores(const ChainParams& p, long long first, long long end, long long index,
                                             long long stride) {
  const long long C = p.states;
  const int tiles_n = int((C + kFusedCols - 1) / kFusedCols);
  for (long long b = first + index; b < end; b += stride) {
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

// Every position of every sequence in one direction, the blocks taking the tiles in turn (the resident pass,
// templates/chain/fused_resident.cuh, is the form where each block owns one): the forward (BETA false) writes the
// scores, alpha and the forward half of saved; the backward messages' pass (BETA true) the other half. p.factors and
// p.col_max are this direction's ("_factors"), p.table its widened table [k][n] (k the source state, n the target);
// scratch: p.msg [2][B][C] (unshifted messages), p.row_maxima [2][B][tiles_n], p.row_sums [B][tiles_n], p.ends [B] (the
// last position's largest message), p.offsets [2][B] and p.end_offsets [B] in double, p.barrier a slot of 64 words for
// the grid and one for each row of tiles, zeroed.
template <class S, bool BETA> __device__ __forceinline__ void fused_steps(const ChainParams& p) {
  for (long long i = 0; i < p.T; ++i) {
    fused_position<S, BETA>(p, i);
    position_barrier<false>(p);
    fused_keep<true, BETA, fused_groups(true, false)>(p, i);
  }
  if (BETA) return;
  grid_barrier(p.barrier, p.barrier + 32, gridDim.x);
  fused_scores(p, 0, p.B, blockIdx.x * (long long)blockDim.x + threadIdx.x, (long long)gridDim.x * blockDim.x);
}

} // namespace jb
