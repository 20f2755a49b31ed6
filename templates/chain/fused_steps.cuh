// The stepped strategy's fused form for the log HMM with one shared transition table (runtime/chain_stepped.cpp):
// one persistent kernel runs every position of every sequence, each step's [B × C] · [C × C] product in tiles of
// kFusedRows × kFusedCols outputs, the blocks meeting at a grid-wide barrier between positions, instead of a
// product's launches per position. Its product is exp_matmul's with FMA arithmetic (docs/exp_matmul.md): the
// relative messages' factors 2^((msg − shift)·log2 e) ≤ 1, made as a block stages them, times the table's column
// factors 2^((tab − colmax)·log2 e) ≤ 1 made once per call ("_factors"), so a sum of C terms of at most 1 that
// cannot overflow. A term lost to flushing is below 2^-126, so a sum of at least C·2^-94 has lost less than 2^-31 of
// itself; any other output, and every output whose row or column holds +inf, is recomputed term by term from the
// log values (LogSemiring, core/semirings.cuh). NaN on either side gives NaN, and a row or column of −inf alone (no
// +inf on the other side) −inf.
//
// The messages keep the sequential kernels' form (templates/chain/params.cuh): each position's values relative to
// their largest, an offset in double, saved and written as step_position writes them (templates/chain/steps.cuh).
// A position's largest value is known only once every column tile has been written, so a step writes its messages
// unshifted with each tile's row maxima, and after the barrier every block takes the row's largest from those
// maxima: the next product shifts as it stages, and the tile's owner writes what is saved of the position (rel,
// offset, alpha, the last position's sums). The score of each sequence follows a last barrier. T is float: the
// storage types whose accumulator is f32.
#pragma once

#include "chain/lengths.cuh"
#include "chain/params.cuh"
#include "chain/shift.cuh"
#include "core/dtypes.cuh"
#include "core/numbers.cuh"
#include "core/semirings.cuh"

namespace jb {

// Every block of the grid arrives before any leaves; what a block wrote before it is visible to every block after
// it (read with ld.global.cg: L1 is not coherent across blocks). The grid must be co-resident (a cooperative launch).
// count starts at 0 and returns to 0; generation, a line apart so that the polls do not queue behind the arrivals,
// only grows. Release and acquire at the GPU's scope order the blocks' writes; no sequentially consistent fence.
__device__ __forceinline__ void grid_barrier(unsigned* count, unsigned* generation) {
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned before, old, now;
    asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(before) : "l"(generation) : "memory");
    asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;" : "=r"(old) : "l"(count) : "memory");
    if (old == gridDim.x - 1) {
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

// The factors of a table for one direction: tab[k][n] (the widened table, contiguous, row stride p.states) gives
// col_max[n] (NaN wins, +inf next) and factors[k][n] = 2^((tab − col_max)·log2 e), 0 where col_max is not finite.
// A block per 32 columns, 8 rows of threads walking k.
__device__ __forceinline__ void fused_factors(const ChainParams& p) {
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
  const bool finite = m > Num<float>::neg_inf() && m < Num<float>::inf();
  float* const f = static_cast<float*>(p.factors);
  for (long long k = y; k < C; k += 8)
    f[k * C + n] = finite ? Num<float>::exp2((tab[k * C + n] - m) * Num<float>::log2e()) : 0.f;
}

// The index maps below (a thread's 4 × 4 outputs, its loads of a chunk, the sums' exchange through one staged
// table) are written for these tiles.
static_assert(kFusedRows == 32 && kFusedCols == 64 && kFusedK == 32 && kFusedThreads == 128,
              "fused_steps.cuh's index maps assume 32 × 64 tiles, chunks of 32 and 128 threads a group");

namespace fused {

// What a row of a tile does at a position.
enum Row { kNone = 0, kStart = 1, kProduct = 2 };

struct RowState {
  int kind;         // Row
  bool bad;         // a length outside [1, T]: NaN messages
  long long length; // the sequence's (1 when bad)
};

__device__ __forceinline__ RowState row_state(const ChainParams& p, long long b, long long t, bool beta) {
  RowState r{kNone, false, 0};
  if (b >= p.B) return r;
  r.length = chain_length(p, b, r.bad);
  if (t >= r.length) return r;
  r.kind = (beta ? t == r.length - 1 : t == 0) ? kStart : kProduct;
  return r;
}

// The largest of a row's messages at a position from its tiles' maxima (NaN wins, then +inf).
__device__ __forceinline__ float row_max(const float* maxima, long long b, int tiles_n) {
  float m = Num<float>::neg_inf();
#pragma unroll 8
  for (int j = 0; j < tiles_n; ++j) m = Num<float>::max(m, __ldcg(maxima + b * tiles_n + j));
  return m;
}

} // namespace fused

// Position i's messages of every tile the block owns, unshifted (position t of the direction), with the tiles' row
// maxima: the product's log (or its exact repair) ⊗ the position's emission, the first position's messages, −inf
// past a sequence's length.
template <class S, bool BETA> __device__ __forceinline__ void fused_position(const ChainParams& p, long long i) {
  using namespace fused;
  __shared__ __align__(16) float a_s[kFusedSplit][kFusedRows][kFusedK + 4];
  __shared__ __align__(16) float b_s[kFusedSplit][kFusedK][kFusedCols];
  __shared__ float shift_s[kFusedRows];
  __shared__ int kind_s[kFusedRows], clean_s[kFusedRows];
  const long long C = p.states, Bn = p.B, t = BETA ? p.T - 1 - i : i;
  const int tiles_n = int((C + kFusedCols - 1) / kFusedCols);
  const long long tiles = (Bn + kFusedRows - 1) / kFusedRows * tiles_n;
  // The thread's outputs: rows ty·4 + r, columns tx·4 + j, of the sources of its group's chunks (g: kFusedSplit
  // groups of kFusedThreads threads, each summing every kFusedSplit-th chunk, their sums added at the end).
  const int g = threadIdx.x / kFusedThreads, l = threadIdx.x % kFusedThreads, tx = l % 16, ty = l / 16;
  const float* const prev = static_cast<const float*>(p.msg) + ((i + 1) & 1) * Bn * C;
  float* const cur = static_cast<float*>(p.msg) + (i & 1) * Bn * C;
  const float* const prev_max = static_cast<const float*>(p.row_maxima) + ((i + 1) & 1) * Bn * tiles_n;
  float* const cur_max = static_cast<float*>(p.row_maxima) + (i & 1) * Bn * tiles_n;
  const float* const factors = static_cast<const float*>(p.factors);
  const float* const col_max = static_cast<const float*>(p.col_max);
  const float* const table = static_cast<const float*>(p.table);
  const float guard = float(C) * Num<float>::pow2(-94);
  for (long long tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const long long r0 = tile / tiles_n * kFusedRows, c0 = tile % tiles_n * kFusedCols;
    __syncthreads(); // the previous tile's reads of the rows' states are done
    if (threadIdx.x < kFusedRows) {
      const RowState r = row_state(p, r0 + threadIdx.x, t, BETA);
      float shift = 0.f;
      int clean = 0; // 1: finite values (and −inf); 2: −inf alone; 3: NaN; 0: +inf
      if (r.kind == kProduct) {
        const float m = row_max(prev_max, r0 + threadIdx.x, tiles_n);
        shift = finite_or_zero(m);
        clean = m != m ? 3 : m == Num<float>::neg_inf() ? 2 : m < Num<float>::inf() ? 1 : 0;
      }
      shift_s[threadIdx.x] = shift;
      kind_s[threadIdx.x] = r.kind;
      clean_s[threadIdx.x] = clean;
    }
    const bool product = __syncthreads_or(threadIdx.x < kFusedRows && kind_s[threadIdx.x] == kProduct);
    float acc[4][4] = {};
    if (product) {
      // A chunk of kFusedK sources: the messages' (a row's 32 values, four a thread, two rows) and the table's
      // factors (32 rows of 64 columns, four a thread, four rows), read into registers one chunk ahead of the
      // products, so that their latency passes while the previous chunk's are formed. 16-byte loads where the rows
      // allow them.
      const bool vec = (C & 3) == 0;
      float ra[2][4], rb[4][4];
      auto fetch = [&](long long k0) {
#pragma unroll
        for (int q = 0; q < 2; ++q) {
          const int e = l + q * kFusedThreads, row = e / 8, kq = e % 8;
          const long long k = k0 + kq * 4;
          const float* const at = prev + (r0 + row) * C + k;
          if (kind_s[row] == kProduct && clean_s[row] == 1 && vec && k < C) {
            const float4 v = __ldcg(reinterpret_cast<const float4*>(at));
            ra[q][0] = v.x, ra[q][1] = v.y, ra[q][2] = v.z, ra[q][3] = v.w;
          } else {
#pragma unroll
            for (int u = 0; u < 4; ++u)
              ra[q][u] =
                  kind_s[row] == kProduct && clean_s[row] == 1 && k + u < C ? __ldcg(at + u) : Num<float>::neg_inf();
          }
        }
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const int e = l + q * kFusedThreads, kk = e / 16, nq = e % 16;
          const long long k = k0 + kk, n = c0 + nq * 4;
          const float* const at = factors + k * C + n;
          if (vec && k < C && n < C) {
            const float4 v = *reinterpret_cast<const float4*>(at);
            rb[q][0] = v.x, rb[q][1] = v.y, rb[q][2] = v.z, rb[q][3] = v.w;
          } else {
#pragma unroll
            for (int u = 0; u < 4; ++u) rb[q][u] = k < C && n + u < C ? at[u] : 0.f;
          }
        }
      };
      constexpr int step = kFusedSplit * kFusedK; // the sources of one round: a chunk a group
      fetch(g * kFusedK);
      for (long long k0 = 0; k0 < C; k0 += step) {
#pragma unroll
        for (int q = 0; q < 2; ++q) {
          const int e = l + q * kFusedThreads, row = e / 8, kq = e % 8;
          const float shift = shift_s[row];
          float v[4];
#pragma unroll
          for (int u = 0; u < 4; ++u) v[u] = Num<float>::exp2((ra[q][u] - shift) * Num<float>::log2e());
          *reinterpret_cast<float4*>(&a_s[g][row][kq * 4]) = make_float4(v[0], v[1], v[2], v[3]);
        }
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const int e = l + q * kFusedThreads, kk = e / 16, nq = e % 16;
          *reinterpret_cast<float4*>(&b_s[g][kk][nq * 4]) = make_float4(rb[q][0], rb[q][1], rb[q][2], rb[q][3]);
        }
        __syncthreads();
        if (k0 + step < C) fetch(k0 + step + g * kFusedK);
#pragma unroll
        for (int kk = 0; kk < kFusedK; kk += 4) {
          float4 a[4], bv[4];
#pragma unroll
          for (int r = 0; r < 4; ++r) a[r] = *reinterpret_cast<const float4*>(&a_s[g][ty * 4 + r][kk]);
#pragma unroll
          for (int u = 0; u < 4; ++u) bv[u] = *reinterpret_cast<const float4*>(&b_s[g][kk + u][tx * 4]);
#pragma unroll
          for (int r = 0; r < 4; ++r) {
            const float ar[4] = {a[r].x, a[r].y, a[r].z, a[r].w};
#pragma unroll
            for (int u = 0; u < 4; ++u) {
              acc[r][0] = fmaf(ar[u], bv[u].x, acc[r][0]);
              acc[r][1] = fmaf(ar[u], bv[u].y, acc[r][1]);
              acc[r][2] = fmaf(ar[u], bv[u].z, acc[r][2]);
              acc[r][3] = fmaf(ar[u], bv[u].w, acc[r][3]);
            }
          }
        }
        __syncthreads();
      }
      // The groups' sums into group 0's, through the (now free) staged table of group 0.
#pragma unroll
      for (int h = 1; h < kFusedSplit; ++h) {
        float(*const red)[kFusedCols] = b_s[0];
        if (g == h)
#pragma unroll
          for (int r = 0; r < 4; ++r)
#pragma unroll
            for (int j = 0; j < 4; ++j) red[ty * 4 + r][tx * 4 + j] = acc[r][j];
        __syncthreads();
        if (g == 0)
#pragma unroll
          for (int r = 0; r < 4; ++r)
#pragma unroll
            for (int j = 0; j < 4; ++j) acc[r][j] += red[ty * 4 + r][tx * 4 + j];
        __syncthreads();
      }
    }
    if (g != 0) continue; // the outputs are group 0's
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int row = ty * 4 + r;
      const long long b = r0 + row;
      const int kind = kind_s[row], clean = clean_s[row];
      float top = Num<float>::neg_inf();
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const long long n = c0 + tx * 4 + j;
        if (b >= Bn || n >= C) continue;
        float v = Num<float>::neg_inf();
        if (kind != kNone) {
          const float e = to_acc(static_cast<const S*>(p.emissions)[b * p.e_b + t * p.e_t + n * p.e_c]);
          if (kind == kStart) {
            bool bad;
            chain_length(p, b, bad);
            v = BETA ? e : to_acc(static_cast<const S*>(p.initial)[b * p.i_b + n * p.i_c]) + e;
            if (bad) v = Num<float>::nan();
          } else {
            const float cm = col_max[n], s = acc[r][j];
            float prod;
            if (clean == 3 || cm != cm) { // a NaN term makes the sum NaN, whatever meets it
              prod = Num<float>::nan();
            } else if (clean != 0 && cm < Num<float>::inf() &&
                       (clean == 2 || cm == Num<float>::neg_inf())) { // no +inf: nothing reaches but −inf
              prod = Num<float>::neg_inf();
            } else if (clean == 1 && cm < Num<float>::inf() && s >= guard) {
              prod = cm + Num<float>::log2(s) * Num<float>::ln2();
            } else { // +inf on either side (meeting −inf it is NaN), or a sum below the guard
              // Term by term from the log values: the relative message ⊗ the table's entry.
              typename LogSemiring<float>::State st = LogSemiring<float>::init();
              const float shift = shift_s[row];
              for (long long k = 0; k < C; ++k)
                LogSemiring<float>::add_term(st, __ldcg(prev + b * C + k) - shift, table[k * C + n], k);
              prod = LogSemiring<float>::finalize(st);
            }
            v = prod + e;
          }
        }
        cur[b * C + n] = v;
        top = Num<float>::max(top, v);
      }
      // The tile's row maximum over the row's 16 threads (half a warp).
#pragma unroll
      for (int o = 1; o < 16; o <<= 1) top = Num<float>::max(top, __shfl_xor_sync(0xffffffffu, top, o));
      if (tx == 0 && b < Bn) cur_max[b * tiles_n + tile % tiles_n] = top;
    }
  }
}

// What is kept of position i once every tile of it is written: its relative messages and offset (saved, alpha),
// the offsets the next position adds to, and at a sequence's last position (forward) its largest message, offset
// and the tiles' sums of exp(rel) for the score. Each block for the tiles it wrote, each thread for its outputs.
template <bool BETA> __device__ __forceinline__ void fused_keep(const ChainParams& p, long long i) {
  using namespace fused;
  const long long C = p.states, Bn = p.B, Tn = p.T, t = BETA ? Tn - 1 - i : i;
  const int tiles_n = int((C + kFusedCols - 1) / kFusedCols);
  const long long tiles = (Bn + kFusedRows - 1) / kFusedRows * tiles_n;
  if (threadIdx.x >= kFusedThreads) return; // a group of the split sums keeps what it wrote: group 0
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
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
      const long long b = r0 + ty * 4 + r;
      const RowState rs = row_state(p, b, t, BETA);
      const bool live = rs.kind != kNone;
      const float m = b < Bn ? row_max(cur_max, b, tiles_n) : 0.f, shift = finite_or_zero(m);
      const double offset = live ? (rs.kind == kStart ? 0.0 : __ldcg(off_prev + b)) + double(shift) : 0.0;
      const bool last = !BETA && live && t == rs.length - 1;
      float sum = 0.f;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const long long n = c0 + tx * 4 + j;
        if (b >= Bn || n >= C) continue;
        const float rel = live ? __ldcg(cur + b * C + n) - shift : Num<float>::neg_inf();
        const long long at = (b * Tn + t) * C + n;
        if (rel_out) rel_out[at] = rel;
        if (alpha) alpha[at] = float(offset + double(rel));
        if (last) sum += Num<float>::exp2(rel * Num<float>::log2e());
      }
#pragma unroll
      for (int o = 1; o < 16; o <<= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
      if (tx != 0 || b >= Bn) continue;
      if (last) static_cast<float*>(p.row_sums)[b * tiles_n + tn] = sum;
      if (tn != 0) continue;
      off_cur[b] = offset;
      if (offset_out) offset_out[b * Tn + t] = offset;
      if (last) {
        static_cast<float*>(p.ends)[b] = m;
        p.end_offsets[b] = offset;
      }
    }
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
// forward half of saved; the backward messages' pass (BETA true) the other half. p.factors and p.col_max are this
// direction's ("_factors"), p.table its widened table [k][n] (k the source state, n the target); scratch: p.msg
// [2][B][C] (unshifted messages), p.row_maxima [2][B][tiles_n], p.row_sums [B][tiles_n], p.ends [B] (the last
// position's largest message), p.offsets [2][B] and p.end_offsets [B] in double, p.barrier 64 words, zeroed.
template <class S, bool BETA> __device__ __forceinline__ void fused_steps(const ChainParams& p) {
  for (long long i = 0; i < p.T; ++i) {
    fused_position<S, BETA>(p, i);
    grid_barrier(p.barrier, p.barrier + 32);
    fused_keep<BETA>(p, i);
  }
  if (BETA) return;
  grid_barrier(p.barrier, p.barrier + 32);
  fused_scores(p);
}

} // namespace jb
