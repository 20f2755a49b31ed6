// The log fused form's resident pass (runtime/chain_fused_steps.cpp takes it where every tile of a position can have a
// block of its own, with the tile's table side in shared memory): each block owns one tile of kFusedRows sequences ×
// kFusedCols states for the whole pass. A position's time is mostly waiting, at the barrier and on what other blocks
// wrote, so this pass waits once after each barrier: a block reads its rows' previous messages whole, sixteen threads
// a row, and takes each row's largest message (the shift) from what it read, not from the tiles' maxima; what is kept
// of the previous position (fused_keep's relative messages, offsets and the score's parts) is made from the outputs
// each thread still holds and the running offset it keeps; and a position's emissions are read before the barrier
// that precedes it. The arithmetic and every value written are the streamed pass's (fused_steps.cuh); the product is
// formed on tensor cores where the GPU has TF32 mma.sync (fused_mma.cuh), else in FMA (fused_sweep.cuh).
#pragma once

#include "chain/fused_mma.cuh"
#include "chain/fused_steps.cuh"
#include "core/cluster.cuh"

namespace jb {
namespace fused {

// Sixteen threads read a row's messages; each thread owns one row of the tile's outputs (owner: its group's).
enum ResidentLayout : int { kResidentRowThreads = 16 };
static_assert(kResidentRowThreads * kFusedRows == 512 && fused_groups(true, true) == 4,
              "a resident log block's 512 threads: sixteen a row when reading, one owned row each when writing");
// The fours of a row's messages a thread reads: of all the sources a resident block takes, or of the paired
// entries' (kFusedPairedSources), whose fewer registers let two blocks share an SM.
template <bool PAIRED> __device__ constexpr int resident_quads() {
  return (PAIRED ? kFusedPairedSources : kFusedResidentSources) / 4 / kResidentRowThreads;
}

// The block's rows: their lengths (read once a pass; 0 past B, 1 where bad) and, at a position, what each does there,
// its previous messages' largest value (−inf where it had none) and how clean they are (TileRows::clean).
struct ResidentRows {
  long long length[kFusedRows];
  double offset[kFusedRows];  // the running offset (fused_keep's) of the last position kept
  long long part[kFusedRows]; // where the row's part of the score's sum lies in row_sums
  int bad[kFusedRows];        // a length outside [1, T]: NaN messages
  float top[kFusedRows];
  int kind[kFusedRows], clean[kFusedRows];
  float col_max[kFusedCols]; // the tile's columns' maxima of the table (read once a pass)
};

// What a thread carries from a position to the next for its owned row: its outputs there (unshifted) and the next
// position's emissions.
struct Carried {
  float out[4];
  float emission[4];
};

// The row of the tile a thread owns the outputs of (with four groups, group g owns row ty·4 + g of every thread).
__device__ __forceinline__ int owned_row(const Position& q) { return q.ty * 4 + q.g; }

// What a pass reads of its rows and columns once: the lengths and, where there is a product, the column maxima.
__device__ __forceinline__ void resident_rows(const ChainParams& p, ResidentRows& rows, long long r0, long long c0) {
  if (threadIdx.x < kFusedRows) {
    const long long b = r0 + threadIdx.x;
    bool bad = false;
    rows.length[threadIdx.x] = b < p.B ? chain_length(p, b, bad) : 0;
    rows.bad[threadIdx.x] = bad;
    rows.offset[threadIdx.x] = 0.0;
    const int tiles_n = int((p.states + kFusedCols - 1) / kFusedCols);
    rows.part[threadIdx.x] = b * tiles_n + c0 / kFusedCols;
  }
  if (threadIdx.x < kFusedCols) {
    const long long n = c0 + threadIdx.x;
    rows.col_max[threadIdx.x] = p.T > 1 && n < p.states ? static_cast<const float*>(p.col_max)[n] : 0.f;
  }
  __syncthreads();
}

// The thread's emissions of its owned row at position t (0 outside B × C).
template <class S>
__device__ __forceinline__ void load_emissions(const ChainParams& p, const Position& q, long long r0, long long c0,
                                               long long t, float (&e)[4]) {
  const long long b = r0 + owned_row(q);
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const long long n = c0 + q.tx * 4 + j;
    e[j] = b < q.B && n < q.C ? emission<S>(p, b, t, n) : 0.f;
  }
}

// Reads each row's messages of the previous position t_prev (where `has_prev` and the row was alive there; −inf
// otherwise) whole, and stages the factors of this position t's product (`has_next`; none past the last):
// message_factor(v, shift) in a row that forms a product from clean messages, else 0 (such a row's outputs are NaN,
// −inf or repaired term by term from the messages in global memory: none reads a factor). Sets `rows` for t; returns
// whether any row forms a product, once every thread has staged its part. QUADS: resident_quads.
template <int QUADS>
__device__ __forceinline__ bool stage_previous(const Position& q, ResidentRows& rows, const Resident& res, long long r0,
                                               long long t, long long t_prev, bool has_prev, bool has_next, bool beta) {
  const int row = int(threadIdx.x) / kResidentRowThreads, lane = int(threadIdx.x) % kResidentRowThreads;
  const long long length = rows.length[row];
  const bool had = has_prev && row_kind(length, t_prev, beta) != kNone;
  const int kind = has_next ? row_kind(length, t, beta) : int(kNone);
  const bool vec = (q.C & 3) == 0;
  const float* const from = q.prev + (r0 + row) * q.C;
  float v[QUADS][4];
#pragma unroll
  for (int u = 0; u < QUADS; ++u) {
    const int k = (lane + u * kResidentRowThreads) * 4;
    if (k < res.sources) load_message_quad(v[u], from, k, q.C, vec, had);
  }
  float top = Num<float>::neg_inf();
#pragma unroll
  for (int u = 0; u < QUADS; ++u)
    if ((lane + u * kResidentRowThreads) * 4 < res.sources)
#pragma unroll
      for (int x = 0; x < 4; ++x) top = Num<float>::max(top, v[u][x]);
#pragma unroll
  for (int o = 1; o < kResidentRowThreads; o <<= 1) top = Num<float>::max(top, __shfl_xor_sync(0xffffffffu, top, o));
  const int clean = kind == kProduct ? cleanness(top) : 0;
  const bool use = kind == kProduct && clean == 1;
  const float shift = finite_or_zero(top);
  float* const at = res.msg + row * res.pitch;
#pragma unroll
  for (int u = 0; u < QUADS; ++u) {
    const int k = (lane + u * kResidentRowThreads) * 4;
    if (k >= res.sources) continue;
    float f[4];
#pragma unroll
    for (int x = 0; x < 4; ++x) f[x] = use ? message_factor(v[u][x], shift) : 0.f;
    *reinterpret_cast<float4*>(at + k) = make_float4(f[0], f[1], f[2], f[3]);
  }
  if (lane == 0) rows.top[row] = top, rows.kind[row] = kind, rows.clean[row] = clean;
  return __syncthreads_or(kind == kProduct);
}

// What is kept of position t (fused_keep's values) for the thread's owned row, once stage_previous has read the
// row's messages there: the relative messages and offset (saved, alpha), and at a sequence's last position (forward)
// its largest message, offset and the tile's part of the score's sum.
template <bool BETA>
__device__ __forceinline__ void keep_resident(const ChainParams& p, const Position& q, ResidentRows& rows, long long r0,
                                              long long c0, long long t, const Carried& c) {
  const long long Tn = p.T;
  const int row = owned_row(q);
  const long long b = r0 + row;
  const int kind = row_kind(rows.length[row], t, BETA);
  const bool live = kind != kNone;
  const float m = rows.top[row], shift = finite_or_zero(m);
  const double offset = live ? (kind == kStart ? 0.0 : rows.offset[row]) + double(shift) : 0.0;
  const bool last = !BETA && live && t == rows.length[row] - 1;
  float* const rel_out = static_cast<float*>(BETA ? p.beta_rel : p.rel);
  float* const alpha = BETA ? nullptr : static_cast<float*>(p.alpha);
  float sum = 0.f;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const long long n = c0 + q.tx * 4 + j;
    if (b >= q.B || n >= q.C) continue;
    const float rel = live ? c.out[j] - shift : Num<float>::neg_inf();
    const long long at = (b * Tn + t) * q.C + n;
    if (rel_out) rel_out[at] = rel;
    if (alpha) alpha[at] = float(offset + double(rel));
    if (last) sum += Num<float>::exp2(rel * Num<float>::log2e());
  }
#pragma unroll
  for (int o = 1; o < 16; o <<= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  __syncwarp(); // every lane of the row has read the offset before its first lane writes the next
  if (q.tx != 0) return;
  rows.offset[row] = offset;
  if (b >= q.B) return;
  if (last) static_cast<float*>(p.row_sums)[rows.part[row]] = sum;
  if (c0 != 0) return; // the row's first tile writes what is the whole row's
  double* const offset_out = BETA ? p.beta_offset : p.offset;
  if (offset_out) offset_out[b * Tn + t] = offset;
  if (last) {
    static_cast<float*>(p.ends)[b] = m;
    p.end_offsets[b] = offset;
  }
}

// The thread's outputs of its owned row at position t, written to q.cur and carried: the product's log (or its
// exact repair) ⊗ the emission, the first messages at a sequence's start, −inf past its length.
template <class S, bool BETA>
__device__ __forceinline__ void store_resident(const ChainParams& p, const Position& q, const ResidentRows& rows,
                                               long long r0, long long c0, long long t, const float (&sum)[4],
                                               Carried& c) {
  const int row = owned_row(q), kind = rows.kind[row];
  const long long b = r0 + row;
  const float guard = sum_guard(q.C), shift = finite_or_zero(rows.top[row]);
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const long long n = c0 + q.tx * 4 + j;
    if (b >= q.B || n >= q.C) continue;
    float v = Num<float>::neg_inf();
    if (kind == kStart) v = first_message<S, BETA>(p, b, n, c.emission[j], rows.bad[row]);
    if (kind == kProduct)
      v = log_output(rows.clean[row], rows.col_max[q.tx * 4 + j], sum[j], guard, shift, q.prev + b * q.C,
                     static_cast<const float*>(p.table), n, q.C) +
          c.emission[j];
    q.cur[b * q.C + n] = v;
    c.out[j] = v;
  }
}

// The product of position i's tile, each thread's sums of its owned row's four outputs.
__device__ __forceinline__ void resident_product(const Position& q, const Resident& res, float (&own)[4]) {
  constexpr int SPLIT = fused_groups(true, true);
  if constexpr (JB_HAS_MMA_TF32_BF16) {
    mma_product<SPLIT>(q, res, own);
  } else {
    float acc[4][4] = {};
    meet_sums<SPLIT>(q, resident_sweep<SPLIT>(q, res, FmaTerms{acc}), acc);
#pragma unroll
    for (int r = 0; r < 4; ++r)
      if (owner<SPLIT>(r) == q.g)
#pragma unroll
        for (int j = 0; j < 4; ++j) own[j] = acc[r][j];
  }
}

// Where the blocks of a row of tiles meet between positions: the cluster's barrier where each row is a cluster
// (p.cluster_rows), else their barrier in global memory (position_barrier).
__device__ __forceinline__ void row_barrier(const ChainParams& p) {
#if JB_HAS_CLUSTERS
  if (p.cluster_rows) {
    cluster_sync();
    return;
  }
#endif
  position_barrier<true>(p);
}

} // namespace fused

// Every position of every sequence in one direction, as fused_steps (fused_steps.cuh) computes them, each block
// owning one tile (the grid has a block a tile) and its table side in fused_resident_floats of dynamic shared memory;
// p.msg, p.row_sums, p.ends, p.end_offsets and p.barrier as there (p.row_maxima and p.offsets are not read). With
// p.cluster_rows each row of tiles is a cluster, which meets at its own barrier and adds its sequences' scores: no
// block waits on another cluster, so the grid need not be resident at once. PAIRED: the entries for at most
// kFusedPairedSources sources, compiled for two blocks an SM.
template <class S, bool BETA, bool PAIRED> __device__ __forceinline__ void fused_resident_steps(const ChainParams& p) {
  using namespace fused;
  constexpr int QUADS = resident_quads<PAIRED>();
  __shared__ ResidentRows rows;
  const long long Tn = p.T;
  stage_resident_table(p, static_cast<const float*>(p.factors), 0.f);
  const Position first = position(p, 0);
  const long long r0 = blockIdx.x / first.tiles_n * kFusedRows, c0 = blockIdx.x % first.tiles_n * kFusedCols;
  resident_rows(p, rows, r0, c0);
  Carried c{};
  if (Tn > 0) load_emissions<S>(p, first, r0, c0, BETA ? Tn - 1 : 0, c.emission);
  for (long long i = 0; i < Tn; ++i) {
    const Position q = position(p, i);
    const Resident res = resident(q.C);
    const long long t = BETA ? Tn - 1 - i : i, t_prev = BETA ? t + 1 : t - 1;
    const bool product = stage_previous<QUADS>(q, rows, res, r0, t, t_prev, i > 0, true, BETA);
    if (i > 0) keep_resident<BETA>(p, q, rows, r0, c0, t_prev, c);
    float sum[4] = {};
    if (product) resident_product(q, res, sum);
    store_resident<S, BETA>(p, q, rows, r0, c0, t, sum, c);
    if (i + 1 < Tn) load_emissions<S>(p, q, r0, c0, BETA ? t - 1 : t + 1, c.emission);
    row_barrier(p);
  }
  if (Tn > 0) { // what is kept of the last position, once every tile of it is written
    const Position q = position(p, Tn);
    const long long last = BETA ? 0 : Tn - 1;
    stage_previous<QUADS>(q, rows, resident(q.C), r0, 0, last, true, false, BETA);
    keep_resident<BETA>(p, q, rows, r0, c0, last, c);
  }
  if (BETA) return;
#if JB_HAS_CLUSTERS
  if (p.cluster_rows) {
    cluster_sync(); // every tile of the row kept its part of the scores
    if (c0 == 0) fused_scores(p, r0, r0 + kFusedRows < p.B ? r0 + kFusedRows : p.B, threadIdx.x, blockDim.x);
    return;
  }
#endif
  grid_barrier(p.barrier, p.barrier + 32, gridDim.x);
  fused_scores(p, 0, p.B, blockIdx.x * (long long)blockDim.x + threadIdx.x, (long long)gridDim.x * blockDim.x);
}

} // namespace jb
