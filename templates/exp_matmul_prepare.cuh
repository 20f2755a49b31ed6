// exp_matmul's first pass (the overview is in exp_matmul.cuh): per row of a and column of b, the max (natural units)
// and where it holds values other than −inf; the exponentiated operands, padded, into the workspace.
#pragma once

namespace jb {

// x rounded to TF32 (10 mantissa bits, to nearest), as the tensor cores read it.
__device__ __forceinline__ unsigned to_tf32(float x) {
  unsigned r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return r;
}

template <class T> struct EmReal;
template <> struct EmReal<float> {
  static __device__ __forceinline__ float exp2(float x) { return ex2_approx(x); }
  static __device__ __forceinline__ float log2(float x) { return log2f(x); }
  static __device__ __forceinline__ float pow2(int e) { return ldexpf(1.f, e); }
  static __device__ __forceinline__ float max(float x, float y) { return max_nan(x, y); }
};
template <> struct EmReal<double> {
  static __device__ __forceinline__ double exp2(double x) { return ::exp2(x); }
  static __device__ __forceinline__ double log2(double x) { return ::log2(x); }
  static __device__ __forceinline__ double pow2(int e) { return ldexp(1.0, e); }
  static __device__ __forceinline__ double max(double x, double y) { return x != x ? x : y != y ? y : fmax(x, y); }
};

// The workspace, typed (exp_matmul_bounds.cuh: em_workspace).
template <class T> struct EmView {
  T *row_max, *col_max, *ea, *eb;
  EmLine *row_line, *col_line;
  unsigned long long* repaired;
  unsigned* flags;
  long long Mp, Np, Kp;
  long long a_batches, b_batches; // 1 for an operand broadcast over the batch
  long long tiles_m, tiles_n;     // repair tiles
  int repair_shift;               // log2 of their size (em_repair_tile)
  int headroom, guard;            // h and log2 of the guard threshold
};
// FORM: how the factors are stored (em_store_form), which sets their size.
template <class T, int FORM = 0> __device__ __forceinline__ EmView<T> em_view(const BmmParams& p) {
  const bool wide = sizeof(T) == 8;
  EmView<T> v;
  v.a_batches = p.a_batch == 0 ? 1 : p.B;
  v.b_batches = p.b_batch == 0 ? 1 : p.B;
  const EmWorkspace w =
      em_workspace(p.B, p.M, p.N, p.K, v.a_batches, v.b_batches, wide, em_factor_bytes(FORM, wide));
  char* base = static_cast<char*>(p.workspace);
  v.row_max = reinterpret_cast<T*>(base + w.row_max);
  v.col_max = reinterpret_cast<T*>(base + w.col_max);
  v.ea = reinterpret_cast<T*>(base + w.ea);
  v.eb = reinterpret_cast<T*>(base + w.eb);
  v.row_line = reinterpret_cast<EmLine*>(base + w.row_line);
  v.col_line = reinterpret_cast<EmLine*>(base + w.col_line);
  v.repaired = reinterpret_cast<unsigned long long*>(base + w.repaired);
  v.flags = reinterpret_cast<unsigned*>(base + w.flags);
  v.Mp = w.Mp, v.Np = w.Np, v.Kp = w.Kp;
  const int rt = em_repair_tile(p.B, p.M, p.N);
  v.repair_shift = em_log2_ceil(rt);
  v.tiles_m = (p.M + rt - 1) / rt;
  v.tiles_n = (p.N + rt - 1) / rt;
  v.headroom = em_headroom(p.K, wide);
  v.guard = em_guard_log2(p.K, wide);
  return v;
}

// A line's EmLine as one lane sees it, and the merge of two lanes' views.
struct EmLineAcc {
  unsigned long long chunks = 0ull;
  int first = 0x7fffffff, last = -1;
  template <class I> __device__ __forceinline__ void add(I k, int chunk_shift) {
    chunks |= 1ull << (int)(k >> chunk_shift);
    const int kk = k < (I)0x7fffffff ? (int)k : 0x7fffffff;
    first = min(first, kk), last = max(last, kk);
  }
  __device__ __forceinline__ void merge(const EmLine& o) {
    chunks |= o.chunks, first = min(first, o.first), last = max(last, o.last);
  }
  __device__ __forceinline__ void merge_xor(int lane_mask) {
    EmLine o;
    o.chunks = __shfl_xor_sync(0xffffffffu, chunks, lane_mask);
    o.first = __shfl_xor_sync(0xffffffffu, first, lane_mask);
    o.last = __shfl_xor_sync(0xffffffffu, last, lane_mask);
    merge(o);
  }
  __device__ __forceinline__ EmLine line() const {
    EmLine l;
    l.chunks = chunks, l.first = first, l.last = last;
    return l;
  }
};

// One operand element's factor 2^((x − max)·log2 e + h), 0 for −inf. The shift is taken in natural units and only
// the difference is scaled: rounded to log2 units first, x and max would each carry an error of |x|·2^-24 (10^-3 at
// ±1e4), which rows and columns whose offsets cancel in a + b would keep in their outputs. The headroom is added
// after the shift: for a huge max, max − h would round back to max and silently drop h. A row or column whose max
// is not finite gets factors of 0: its outputs are NaN, −inf or repaired, and never read its products.
template <class T> __device__ __forceinline__ T em_exponent(T x, T line_max, int headroom) {
  return fabs(line_max) < Num<T>::inf() ? (x - line_max) * Num<T>::log2e() + (T)headroom : Num<T>::neg_inf();
}
template <class T> __device__ __forceinline__ T em_factor(T x, T line_max, int headroom) {
  return EmReal<T>::exp2(em_exponent(x, line_max, headroom));
}

// How the product reads the exponentiated operands. FORM 0 (math=fma): a as [Mp][Kp], b as [Kp][Np], fp32/fp64.
// FORM 1 (tf32), 2 (tf32x3) and 5 (bf16): b transposed to [Np][Kp], so both operands reach the tensor cores
// k-contiguous; FORM 3 (wgmma_tf32x3), 4 (wgmma_tf32) and 6 (wgmma_bf16): both in the swizzled panels a bulk copy
// moves as they lie (em_panel_at, 64 k a line for FORM 6). FORM 1 and 4 store the values rounded to TF32 (the
// product then converts nothing), FORM 5 and 6 rounded to BF16 (to nearest even) in 2-byte slots.
template <int FORM> __device__ __forceinline__ float em_store_form(float x) {
  return FORM == 1 || FORM == 4 ? __uint_as_float(to_tf32(x)) : x;
}
template <int FORM> __device__ __forceinline__ double em_store_form(double x) { return x; }
template <int FORM> struct EmStore {
  template <class T, class I> static __device__ __forceinline__ void put(T* base, I at, T x) {
    base[at] = em_store_form<FORM>(x);
  }
};
template <> struct EmStore<5> {
  template <class I> static __device__ __forceinline__ void put(float* base, I at, float x) {
    reinterpret_cast<unsigned short*>(base)[at] = from_acc<bf16>(x).bits;
  }
};
template <> struct EmStore<6> : EmStore<5> {};
// Element k of line `line` (a row of a or a column of b, counted across the batch) of a tensor-core form.
template <int FORM, class T, class I> __device__ __forceinline__ void em_put(T* base, I line, I k, I Kp, T x) {
  EmStore<FORM>::put(base,
                     FORM == 3 || FORM == 4 ? (I)em_panel_at(line, k, Kp)
                     : FORM == 6            ? (I)em_panel_at<64>(line, k, Kp)
                                            : line * Kp + k,
                     x);
}

// Pass 1. Blocks [0, row_blocks): a warp per padded row of a (lanes along k): max and mask, then the row's factors.
// Blocks after: 32 padded columns of b per block (lanes along n), its 8 warps splitting K. Padding gets 0.
template <class In, class I, class T, int FORM> __device__ __forceinline__ void em_prepare_kernel(const BmmParams p) {
  typedef EmReal<T> R;
  const EmView<T> v = em_view<T, FORM>(p);
  const EmStatsGrid g = em_stats_grid(p.M, p.N, v.a_batches, v.b_batches);
  const In* A0 = static_cast<const In*>(p.a);
  const In* B0 = static_cast<const In*>(p.b);
  const T kNegInf = Num<T>::neg_inf();
  const I K = (I)p.K, Kp = (I)v.Kp, Mp = (I)v.Mp, Np = (I)v.Np;
  int chunk = 0; // chunks of 2^chunk k, at most 64 of them
  while (((I)64 << chunk) < K) ++chunk;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  {
    const I total = (I)v.tiles_m * (I)v.tiles_n * (I)p.B;
    for (I f = (I)blockIdx.x * blockDim.x + threadIdx.x; f < total; f += (I)gridDim.x * blockDim.x) v.flags[f] = 0u;
    if (blockIdx.x == 0 && threadIdx.x == 0) *v.repaired = 0ull;
  }
  if ((long long)blockIdx.x < g.row_blocks) {
    for (I r = (I)blockIdx.x * 8 + warp; r < (I)v.a_batches * Mp; r += (I)g.row_blocks * 8) {
      const I batch = r / Mp, i = r % Mp;
      if (i >= (I)p.M) {
        for (I k = lane; k < Kp; k += 32) em_put<FORM>(v.ea, r, k, Kp, (T)0);
        continue;
      }
      const In* A = A0 + batch * (I)p.a_batch + i * (I)p.a_row;
      T mx = kNegInf;
      EmLineAcc line;
      // The first 32·kCache elements stay in registers between the two sweeps: all their loads in flight at once,
      // and read once. Longer rows read the rest twice.
      constexpr int kCache = 64 / sizeof(T); // 16 floats or 8 doubles: 64 registers a thread in all
      T cache[kCache];
#pragma unroll
      for (int c = 0; c < kCache; ++c) {
        const I k = lane + 32 * c;
        cache[c] = k < K ? to_acc(A[k * (I)p.a_col]) : kNegInf;
      }
#pragma unroll
      for (int c = 0; c < kCache; ++c) {
        mx = R::max(mx, cache[c]);
        if (cache[c] != kNegInf) line.add(lane + 32 * c, chunk);
      }
#pragma unroll 8
      for (I k = lane + 32 * kCache; k < K; k += 32) {
        const T x = to_acc(A[k * (I)p.a_col]);
        mx = R::max(mx, x);
        if (x != kNegInf) line.add(k, chunk);
      }
#pragma unroll
      for (int o = 16; o > 0; o /= 2) {
        mx = R::max(mx, __shfl_xor_sync(0xffffffffu, mx, o));
        line.merge_xor(o);
      }
      if (lane == 0) v.row_max[batch * (I)p.M + i] = mx, v.row_line[batch * (I)p.M + i] = line.line();
        // The factors, as em_factor computes them, from the cached values.
#pragma unroll
      for (int c = 0; c < kCache; ++c) {
        const I k = lane + 32 * c;
        if (k < Kp) em_put<FORM>(v.ea, r, k, Kp, k < K ? R::exp2(em_exponent(cache[c], mx, v.headroom)) : (T)0);
      }
#pragma unroll 8
      for (I k = lane + 32 * kCache; k < Kp; k += 32)
        em_put<FORM>(v.ea, r, k, Kp, k < K ? em_factor<T>(to_acc(A[k * (I)p.a_col]), mx, v.headroom) : (T)0);
    }
    return;
  }
  __shared__ T part_max[8][32];
  __shared__ EmLine part_line[8][32];
  __shared__ T tile[64][33]; // FORM 1–6: [k][column] → written out as [column][k]
  const I first = ((I)blockIdx.x - (I)g.row_blocks) * 32;
  for (I c0 = first; c0 < (I)v.b_batches * Np; c0 += (I)g.col_blocks * 32) {
    const I c = c0 + lane, batch = c / Np, j = c % Np;
    const bool real = c < (I)v.b_batches * Np && j < (I)p.N;
    const In* B = B0 + batch * (I)p.b_batch + j * (I)p.b_col;
    T mx = kNegInf;
    EmLineAcc line;
    if (real)
#pragma unroll 8
      for (I k = warp; k < K; k += 8) {
        const T x = to_acc(B[k * (I)p.b_row]);
        mx = R::max(mx, x);
        if (x != kNegInf) line.add(k, chunk);
      }
    part_max[warp][lane] = mx;
    part_line[warp][lane] = line.line();
    __syncthreads();
    mx = part_max[0][lane];
    for (int w = 1; w < 8; ++w) mx = R::max(mx, part_max[w][lane]), line.merge(part_line[w][lane]);
    if (real && warp == 0) v.col_max[batch * (I)p.N + j] = mx, v.col_line[batch * (I)p.N + j] = line.line();
    if (FORM == 0) {
      if (c < (I)v.b_batches * Np)
        for (I k = warp; k < Kp; k += 8)
          v.eb[(batch * Kp + k) * Np + j] =
              real && k < K ? em_factor<T>(to_acc(B[k * (I)p.b_row]), mx, v.headroom) : (T)0;
    } else if (c0 < (I)v.b_batches * Np) { // uniform: Np is a multiple of 32, so the block's columns are all real
      // Through shared memory, so both the reads and the writes coalesce; 64 k a step, each thread's 8 loads in
      // flight before any is used. Kp is a multiple of 32: the last step may have only its first half.
      for (I k0 = 0; k0 < Kp; k0 += 64) {
        T x[8];
#pragma unroll
        for (int u = 0; u < 8; ++u) {
          const I k = k0 + warp + 8 * u;
          x[u] = real && k < K ? to_acc(B[k * (I)p.b_row]) : (T)0;
        }
#pragma unroll
        for (int u = 0; u < 8; ++u) {
          const I k = k0 + warp + 8 * u;
          tile[warp + 8 * u][lane] = real && k < K ? em_factor<T>(x[u], mx, v.headroom) : (T)0;
        }
        __syncthreads();
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          const int r = warp + 8 * u; // column c0 + r, k0 + lane and k0 + 32 + lane
          em_put<FORM>(v.eb, c0 + r, k0 + lane, Kp, tile[lane][r]);
          if (k0 + 32 < Kp) em_put<FORM>(v.eb, c0 + r, k0 + 32 + lane, Kp, tile[32 + lane][r]);
        }
        __syncthreads();
      }
    }
    __syncthreads();
  }
}

} // namespace jb
