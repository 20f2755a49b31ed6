// What the stepped strategy's fused forms share (templates/chain/fused_steps.cuh and fused_resident.cuh for log,
// fused_viterbi.cuh for max_plus; runtime/chain_fused_steps.cpp): a persistent kernel per pass whose blocks own fixed
// tiles of kFusedRows sequences × kFusedCols states of every position and meet at a barrier between positions, the
// table's column maxima, what a row of a tile does at a position, its outputs, and what is kept of a position once all
// its tiles are written (how a block forms a tile's product: fused_sweep.cuh). Every step writes its messages unshifted
// with each tile's row maxima; after the barrier every block takes a row's largest value from those maxima, so the next
// product shifts as it stages and the tile's owner writes what is kept (the sequential kernels' relative messages
// and offsets in double: templates/chain/params.cuh). (The log resident pass, fused_resident.cuh, takes a row's
// largest value from its messages themselves.)
#pragma once

#include "chain/lengths.cuh"
#include "chain/params.cuh"
#include "chain/reductions.cuh"
#include "chain/shift.cuh"
#include "core/dtypes.cuh"
#include "core/numbers.cuh"

namespace jb {

// Every one of `arrivals` blocks arrives before any leaves; what a block wrote before it is visible to every block
// after it (read with ld.global.cg: L1 is not coherent across blocks). The blocks must be co-resident (a cooperative
// launch). count starts at 0 and returns to 0; generation, a line apart so that the polls do not queue behind the
// arrivals, only grows. Release and acquire at the GPU's scope order the blocks' writes; no sequentially consistent
// fence.
__device__ __forceinline__ void grid_barrier(unsigned* count, unsigned* generation, unsigned arrivals) {
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned before, old, now;
    asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(before) : "l"(generation) : "memory");
    asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;" : "=r"(old) : "l"(count) : "memory");
    if (old == arrivals - 1) {
      asm volatile("st.relaxed.gpu.global.u32 [%0], 0;" ::"l"(count) : "memory");
      asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(generation) : "memory");
    } else {
      do {
        asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(now) : "l"(generation) : "memory");
      } while (now == before);
    }
  }
  __syncthreads();
}

// A direction's table's columns: tab[k][n] (the widened table, contiguous, row stride p.states) gives col_max[n]
// (NaN wins, +inf next) and, with FACTORS (log), factors[k][n] = 2^((tab − col_max)·log2 e), 0 where col_max is not
// finite. A block per 32 columns, 8 rows of threads walking k.
template <bool FACTORS> __device__ __forceinline__ void fused_factors(const ChainParams& p) {
  __shared__ float part[8][33];
  const long long C = p.states, n = blockIdx.x * 32LL + threadIdx.x % 32;
  const int y = threadIdx.x / 32;
  const float* const tab = static_cast<const float*>(p.table);
  float m = Num<float>::neg_inf();
  if (n < C)
    for (long long k = y; k < C; k += 8) m = Num<float>::max(m, tab[k * C + n]);
  part[y][threadIdx.x % 32] = m;
  __syncthreads();
  m = part[0][threadIdx.x % 32];
#pragma unroll
  for (int i = 1; i < 8; ++i) m = Num<float>::max(m, part[i][threadIdx.x % 32]);
  if (n >= C) return;
  if (y == 0) static_cast<float*>(p.col_max)[n] = m;
  if (!FACTORS) return;
  const bool finite = m > Num<float>::neg_inf() && m < Num<float>::inf();
  float* const f = static_cast<float*>(p.factors);
  for (long long k = y; k < C; k += 8)
    f[k * C + n] = finite ? Num<float>::exp2((tab[k * C + n] - m) * Num<float>::log2e()) : 0.f;
}

// The index maps below (a thread's 4 × 4 outputs, its loads of a chunk, the sums' exchange through one staged
// table) are written for these tiles.
static_assert(kFusedRows == 32 && kFusedCols == 64 && kFusedK == 32 && kFusedThreads == 128 && kFusedSplit == 2 &&
                  kFusedResidentSplit == 4,
              "the fused steps' index maps assume 32 × 64 tiles, chunks of 32 and two or four groups of 128 threads");

namespace fused {

// A block of SPLIT groups (fused_groups): once the groups' results meet, group g owns the rows r of every thread's
// four (ty·4 + r) with r / (4 / SPLIT) = g; each thread writes its tile's outputs of those rows, and keeps them. A
// thread's results of a row group h owns go to h through its slot for the writer: the other groups in increasing
// order.
template <int SPLIT> __device__ __forceinline__ int owner(int r) {
  static_assert(4 % SPLIT == 0, "a thread's four rows split evenly between the groups");
  return r / (4 / SPLIT);
}
__device__ __forceinline__ int meet_slot(int writer, int owner) { return writer < owner ? writer : writer - 1; }

// What a row of a tile does at a position.
enum Row { kNone = 0, kStart = 1, kProduct = 2 };

struct RowState {
  int kind;         // Row
  bool bad;         // a length outside [1, T]: NaN messages
  long long length; // the sequence's (1 when bad)
};

// What a row of a sequence of `length` positions does at position t of a direction.
__device__ __forceinline__ int row_kind(long long length, long long t, bool beta) {
  return t >= length ? kNone : (beta ? t == length - 1 : t == 0) ? kStart : kProduct;
}

__device__ __forceinline__ RowState row_state(const ChainParams& p, long long b, long long t, bool beta) {
  RowState r{kNone, false, 0};
  if (b >= p.B) return r;
  r.length = chain_length(p, b, r.bad);
  r.kind = row_kind(r.length, t, beta);
  return r;
}

// The largest of a row's messages at a position from its tiles' maxima (NaN wins, then +inf).
__device__ __forceinline__ float row_max(const float* maxima, long long b, int tiles_n) {
  float m = Num<float>::neg_inf();
#pragma unroll 8
  for (int j = 0; j < tiles_n; ++j) m = Num<float>::max(m, __ldcg(maxima + b * tiles_n + j));
  return m;
}

// A tile's rows at a position, as its first kFusedRows threads stage them: what each does, the shift of its
// previous messages (their largest value where finite, else 0) and how clean they are: 1 finite values (and −inf),
// 2 −inf alone, 3 NaN somewhere, 0 +inf (no NaN).
struct TileRows {
  float shift[kFusedRows];
  int kind[kFusedRows], clean[kFusedRows];
};

// How clean a row's messages are from their largest value m (NaN wins, then +inf), as TileRows::clean says.
__device__ __forceinline__ int cleanness(float m) {
  return m != m ? 3 : m == Num<float>::neg_inf() ? 2 : m < Num<float>::inf() ? 1 : 0;
}

// Stages the rows r0 … of position t (`prev_max` the previous position's tile maxima); whether any row forms a
// product. Every thread of the block calls it, after the previous tile's last read of `rows`.
__device__ __forceinline__ bool stage_rows(const ChainParams& p, TileRows& rows, long long r0, long long t, bool beta,
                                           const float* prev_max, int tiles_n) {
  if (threadIdx.x < kFusedRows) {
    const RowState r = row_state(p, r0 + threadIdx.x, t, beta);
    float shift = 0.f;
    int clean = 0;
    if (r.kind == kProduct) {
      const float m = row_max(prev_max, r0 + threadIdx.x, tiles_n);
      shift = finite_or_zero(m);
      clean = cleanness(m);
    }
    rows.shift[threadIdx.x] = shift;
    rows.kind[threadIdx.x] = r.kind;
    rows.clean[threadIdx.x] = clean;
  }
  return __syncthreads_or(threadIdx.x < kFusedRows && rows.kind[threadIdx.x] == kProduct);
}

// Where a thread of a pass stands at the pass's position i (whose parity picks the message and maxima buffers):
// its group g of the split, its place l in it, its outputs' rows ty·4 + r and columns tx·4 + j of a tile.
struct Position {
  long long C, B, tiles;
  int tiles_n, g, l, tx, ty;
  const float* prev;
  float* cur;
  const float* prev_max;
  float* cur_max;
};

__device__ __forceinline__ Position position(const ChainParams& p, long long i) {
  Position q;
  q.C = p.states, q.B = p.B;
  q.tiles_n = int((q.C + kFusedCols - 1) / kFusedCols);
  q.tiles = (q.B + kFusedRows - 1) / kFusedRows * q.tiles_n;
  q.g = threadIdx.x / kFusedThreads, q.l = threadIdx.x % kFusedThreads, q.tx = q.l % 16, q.ty = q.l / 16;
  q.prev = static_cast<const float*>(p.msg) + ((i + 1) & 1) * q.B * q.C;
  q.cur = static_cast<float*>(p.msg) + (i & 1) * q.B * q.C;
  q.prev_max = static_cast<const float*>(p.row_maxima) + ((i + 1) & 1) * q.B * q.tiles_n;
  q.cur_max = static_cast<float*>(p.row_maxima) + (i & 1) * q.B * q.tiles_n;
  return q;
}

// The first messages of a direction at (b, n) given the position's emission e: initial ⊗ e forward, e backward;
// NaN for a bad length.
template <class S, bool BETA>
__device__ __forceinline__ float first_message(const ChainParams& p, long long b, long long n, float e, bool bad) {
  const float v = BETA ? e : to_acc(static_cast<const S*>(p.initial)[b * p.i_b + n * p.i_c]) + e;
  return bad ? Num<float>::nan() : v;
}

template <class S, bool BETA>
__device__ __forceinline__ float first_message(const ChainParams& p, long long b, long long n, float e) {
  bool bad;
  chain_length(p, b, bad);
  return first_message<S, BETA>(p, b, n, e, bad);
}

template <class S>
__device__ __forceinline__ float emission(const ChainParams& p, long long b, long long t, long long n) {
  return to_acc(static_cast<const S*>(p.emissions)[b * p.e_b + t * p.e_t + n * p.e_c]);
}

// A tile row's maximum over the 16 threads that hold it (half a warp), written to `maxima` by the first.
__device__ __forceinline__ void tile_row_max(float top, float* maxima, long long b, long long Bn, int tiles_n,
                                             long long tile, int tx) {
#pragma unroll
  for (int o = 1; o < 16; o <<= 1) top = Num<float>::max(top, __shfl_xor_sync(0xffffffffu, top, o));
  if (tx == 0 && b < Bn) maxima[b * tiles_n + tile % tiles_n] = top;
}

// A thread's outputs of a tile at position t (those inside B × C, of the rows its group owns) written to q.cur with
// the tile's row maxima: the first messages at a sequence's start, product(r, j, row, b, n) ⊗ the emission after
// it, −inf past its length.
template <class S, bool BETA, int SPLIT, class Product>
__device__ __forceinline__ void store_tile(const ChainParams& p, const Position& q, const TileRows& rows, long long r0,
                                           long long c0, long long t, long long tile, Product product) {
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    if (owner<SPLIT>(r) != q.g) continue;
    const int row = q.ty * 4 + r;
    const long long b = r0 + row;
    const int kind = rows.kind[row];
    float top = Num<float>::neg_inf();
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const long long n = c0 + q.tx * 4 + j;
      if (b >= q.B || n >= q.C) continue;
      float v = Num<float>::neg_inf();
      if (kind != kNone) {
        const float e = emission<S>(p, b, t, n);
        v = kind == kStart ? first_message<S, BETA>(p, b, n, e) : product(r, j, row, b, n) + e;
      }
      q.cur[b * q.C + n] = v;
      top = Num<float>::max(top, v);
    }
    tile_row_max(top, q.cur_max, b, q.B, q.tiles_n, tile, q.tx);
  }
}

} // namespace fused

// Where a pass's blocks meet between positions: RESIDENT, the blocks of one row of tiles (the same sequences, whose
// messages no other block reads) at the barrier of their own (p.barrier's slot 1 + the row's); otherwise the whole
// grid (slot 0). A slot is 64 words.
template <bool RESIDENT> __device__ __forceinline__ void position_barrier(const ChainParams& p) {
  const unsigned tiles_n = unsigned((p.states + kFusedCols - 1) / kFusedCols);
  unsigned* const slot = p.barrier + (RESIDENT ? 64 * (1 + blockIdx.x / tiles_n) : 0);
  grid_barrier(slot, slot + 32, RESIDENT ? tiles_n : gridDim.x);
}

// What is kept of position i once every tile of it is written: its relative messages and offset (saved, alpha),
// the offsets the next position adds to, and at a sequence's last position (forward) its largest message, offset
// and for the score each tile's part in row_sums: LOG its sum of exp(rel), max_plus its best rel, with the smallest
// state holding it in row_args (ChainMax's order). max_plus's path is −1 past a sequence's length. Each block for the
// tiles it wrote, each thread for its outputs.
template <bool LOG, bool BETA, int SPLIT>
__device__ __forceinline__ void fused_keep(const ChainParams& p, long long i) {
  using namespace fused;
  const long long C = p.states, Bn = p.B, Tn = p.T, t = BETA ? Tn - 1 - i : i;
  const int tiles_n = int((C + kFusedCols - 1) / kFusedCols);
  const long long tiles = (Bn + kFusedRows - 1) / kFusedRows * tiles_n;
  const int g = threadIdx.x / kFusedThreads, tx = threadIdx.x % kFusedThreads % 16,
            ty = threadIdx.x % kFusedThreads / 16;
  const float* const cur = static_cast<const float*>(p.msg) + (i & 1) * Bn * C;
  const float* const cur_max = static_cast<const float*>(p.row_maxima) + (i & 1) * Bn * tiles_n;
  const double* const off_prev = p.offsets + ((i + 1) & 1) * Bn;
  double* const off_cur = p.offsets + (i & 1) * Bn;
  float* const rel_out = static_cast<float*>(BETA ? p.beta_rel : p.rel);
  double* const offset_out = BETA ? p.beta_offset : p.offset;
  float* const alpha = BETA ? nullptr : static_cast<float*>(p.alpha);
  for (long long tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const long long r0 = tile / tiles_n * kFusedRows, c0 = tile % tiles_n * kFusedCols;
    const int tn = int(tile % tiles_n);
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      if (owner<SPLIT>(r) != g) continue; // each keeps what it wrote
      const long long b = r0 + ty * 4 + r;
      const RowState rs = row_state(p, b, t, BETA);
      const bool live = rs.kind != kNone;
      const float m = b < Bn ? row_max(cur_max, b, tiles_n) : 0.f, shift = finite_or_zero(m);
      const double offset = live ? (rs.kind == kStart ? 0.0 : __ldcg(off_prev + b)) + double(shift) : 0.0;
      const bool last = !BETA && live && t == rs.length - 1;
      float sum = 0.f;                    // LOG
      float best = Num<float>::neg_inf(); // max_plus
      int arg = -1;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const long long n = c0 + tx * 4 + j;
        if (b >= Bn || n >= C) continue;
        const float rel = live ? __ldcg(cur + b * C + n) - shift : Num<float>::neg_inf();
        const long long at = (b * Tn + t) * C + n;
        if (rel_out) rel_out[at] = rel;
        if (alpha) alpha[at] = float(offset + double(rel));
        if (LOG && last) sum += Num<float>::exp2(rel * Num<float>::log2e());
        if (!LOG && last && ChainMax<float>::beats(rel, int(n), best, arg)) best = rel, arg = int(n);
      }
#pragma unroll
      for (int o = 1; o < 16; o <<= 1) {
        if (LOG) {
          sum += __shfl_xor_sync(0xffffffffu, sum, o);
        } else {
          const float w = __shfl_xor_sync(0xffffffffu, best, o);
          const int j = __shfl_xor_sync(0xffffffffu, arg, o);
          if (ChainMax<float>::beats(w, j, best, arg)) best = w, arg = j;
        }
      }
      if (tx != 0 || b >= Bn) continue;
      if (last) static_cast<float*>(p.row_sums)[b * tiles_n + tn] = LOG ? sum : best;
      if (!LOG && last) p.row_args[b * tiles_n + tn] = arg;
      if (tn != 0) continue;
      if (!LOG && !live && p.path) p.path[b * Tn + t] = -1;
      off_cur[b] = offset;
      if (offset_out) offset_out[b * Tn + t] = offset;
      if (last) {
        static_cast<float*>(p.ends)[b] = m;
        p.end_offsets[b] = offset;
      }
    }
  }
}

} // namespace jb
