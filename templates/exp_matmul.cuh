// Strategy "exp_matmul" (log semiring): one exp per operand element and one FMA per term, exact on every input.
// The method, the headroom and the guard's bound are derived in exp_matmul_bounds.cuh. Three launches:
//   1. em_stats_kernel: per row of a and column of b its max (log2 units) and which 1/64 chunks of K hold a value
//      other than −inf; clears the repair flags and counter.
//   2. the product: operands are exponentiated as they enter shared memory (2^(x' − max + h)), multiplied by a
//      register-tiled FP32/FP64 FMA kernel (math=fma) or by tensor cores (math=tf32x3: three TF32 products per
//      term for fp32 accuracy; math=tf32: one, the opt-in fast precision), and each output either written
//      (log2 s + shifts) or, when the guard fires, its tile flagged.
//   3. the repair: the direct tiled log kernel on the flagged tiles only (tiled.cuh: tile_wanted).
#pragma once

namespace jb {

template <class T> struct EmReal;
template <> struct EmReal<float> {
  static __device__ __forceinline__ float inf() { return __int_as_float(0x7f800000); }
  static __device__ __forceinline__ float nan() { return __int_as_float(0x7fffffff); }
  static __device__ __forceinline__ float log2_units(float x) { return to_log2_units(x); }
  static __device__ __forceinline__ float exp2(float x) { return ex2_approx(x); }
  static __device__ __forceinline__ float log2(float x) { return log2f(x); }
  static __device__ __forceinline__ float pow2(int e) { return ldexpf(1.f, e); }
  static __device__ __forceinline__ float max(float x, float y) { return max_nan(x, y); }
};
template <> struct EmReal<double> {
  static __device__ __forceinline__ double inf() { return __longlong_as_double(0x7ff0000000000000LL); }
  static __device__ __forceinline__ double nan() { return __longlong_as_double(0x7fffffffffffffffLL); }
  // As the float version: a finite value too large to scale becomes +inf, which sends its outputs to repair.
  static __device__ __forceinline__ double log2_units(double x) {
    const double kLog2e = 1.4426950408889634;
    return fabs(x) < 1.2e308 ? x * kLog2e : (fabs(x) < inf() ? inf() : x * kLog2e);
  }
  static __device__ __forceinline__ double exp2(double x) { return ::exp2(x); }
  static __device__ __forceinline__ double log2(double x) { return ::log2(x); }
  static __device__ __forceinline__ double pow2(int e) { return ldexp(1.0, e); }
  static __device__ __forceinline__ double max(double x, double y) { return x != x ? x : y != y ? y : fmax(x, y); }
};

// The workspace, typed.
template <class T> struct EmView {
  T *row_max, *col_max;
  unsigned long long *row_mask, *col_mask, *repaired;
  unsigned* flags;
  long long tiles_m, tiles_n; // repair tiles
  int headroom, guard;        // h and log2 of the guard threshold
};
template <class T> __device__ __forceinline__ EmView<T> em_view(const BmmParams& p) {
  const bool wide = sizeof(T) == 8;
  const EmWorkspace w = em_workspace(p.B, p.M, p.N, wide);
  char* base = static_cast<char*>(p.workspace);
  EmView<T> v;
  v.row_max = reinterpret_cast<T*>(base + w.row_max);
  v.col_max = reinterpret_cast<T*>(base + w.col_max);
  v.row_mask = reinterpret_cast<unsigned long long*>(base + w.row_mask);
  v.col_mask = reinterpret_cast<unsigned long long*>(base + w.col_mask);
  v.repaired = reinterpret_cast<unsigned long long*>(base + w.repaired);
  v.flags = reinterpret_cast<unsigned*>(base + w.flags);
  const int rt = em_repair_tile(wide);
  v.tiles_m = (p.M + rt - 1) / rt;
  v.tiles_n = (p.N + rt - 1) / rt;
  v.headroom = em_headroom(p.K, wide);
  v.guard = em_guard_log2(p.K, wide);
  return v;
}

// Which of the 64 chunks of K the index k falls in.
template <class I> __device__ __forceinline__ unsigned long long em_chunk_bit(I k, I chunk) {
  return 1ull << (int)(k / chunk);
}

// Pass 1. Blocks [0, row_blocks): a warp per row of a (lanes along k). Blocks after: 32 columns of b per block
// (lanes along n), its 8 warps splitting K. Every thread also clears part of the flags.
template <class In, class I, class T> __device__ __forceinline__ void em_stats_kernel(const BmmParams p) {
  typedef EmReal<T> R;
  const EmView<T> v = em_view<T>(p);
  const EmStatsGrid g = em_stats_grid(p.B, p.M, p.N);
  const In* A0 = static_cast<const In*>(p.a);
  const In* B0 = static_cast<const In*>(p.b);
  const T kNegInf = -R::inf();
  const I K = (I)p.K, chunk = K > 64 ? (K + 63) / 64 : 1;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  {
    const I total = (I)v.tiles_m * (I)v.tiles_n * (I)p.B;
    for (I f = (I)blockIdx.x * blockDim.x + threadIdx.x; f < total; f += (I)gridDim.x * blockDim.x) v.flags[f] = 0u;
    if (blockIdx.x == 0 && threadIdx.x == 0) *v.repaired = 0ull;
  }
  if ((long long)blockIdx.x < g.row_blocks) {
    for (I r = (I)blockIdx.x * 8 + warp; r < (I)p.B * (I)p.M; r += (I)g.row_blocks * 8) {
      const I batch = r / (I)p.M, i = r % (I)p.M;
      const In* A = A0 + batch * (I)p.a_batch + i * (I)p.a_row;
      T mx = kNegInf;
      unsigned long long mask = 0ull;
      for (I k = lane; k < K; k += 32) {
        const T x = R::log2_units(to_acc(A[k * (I)p.a_col]));
        mx = R::max(mx, x);
        if (x != kNegInf) mask |= em_chunk_bit(k, chunk);
      }
#pragma unroll
      for (int o = 16; o > 0; o /= 2) {
        mx = R::max(mx, __shfl_xor_sync(0xffffffffu, mx, o));
        mask |= __shfl_xor_sync(0xffffffffu, mask, o);
      }
      if (lane == 0) v.row_max[r] = mx, v.row_mask[r] = mask;
    }
    return;
  }
  __shared__ T part_max[8][32];
  __shared__ unsigned long long part_mask[8][32];
  const I first = ((I)blockIdx.x - (I)g.row_blocks) * 32;
  for (I c0 = first; c0 < (I)p.B * (I)p.N; c0 += (I)g.col_blocks * 32) {
    const I c = c0 + lane;
    T mx = kNegInf;
    unsigned long long mask = 0ull;
    if (c < (I)p.B * (I)p.N) {
      const I batch = c / (I)p.N, j = c % (I)p.N;
      const In* B = B0 + batch * (I)p.b_batch + j * (I)p.b_col;
      for (I k = warp; k < K; k += 8) {
        const T x = R::log2_units(to_acc(B[k * (I)p.b_row]));
        mx = R::max(mx, x);
        if (x != kNegInf) mask |= em_chunk_bit(k, chunk);
      }
    }
    part_max[warp][lane] = mx;
    part_mask[warp][lane] = mask;
    __syncthreads();
    if (warp == 0 && c < (I)p.B * (I)p.N) {
      for (int w = 1; w < 8; ++w) mx = R::max(mx, part_max[w][lane]), mask |= part_mask[w][lane];
      v.col_max[c] = mx, v.col_mask[c] = mask;
    }
    __syncthreads();
  }
}

// One operand element on its way into shared memory: 2^(x' − max + h), 0 for −inf. A row or column whose max is
// not finite is shifted by 0 (its outputs are NaN or repaired; its products are never used).
template <class T> __device__ __forceinline__ T em_factor(T x, T line_max, int headroom) {
  typedef EmReal<T> R;
  const T shift = fabs(line_max) < R::inf() ? line_max - (T)headroom : (T)0;
  return R::exp2(R::log2_units(x) - shift);
}

// Exponentiates fetched slices (Tile::fetch order: a's element l at row idx / BK, b's at column idx % BN).
template <class T, int BM, int BN, int BK, int THREADS, int NA, int NB>
__device__ __forceinline__ void em_exponentiate(T (&ra)[NA], T (&rb)[NB], const T* sh_a, const T* sh_b, int h) {
#pragma unroll
  for (int l = 0; l < NA; ++l) {
    const int idx = threadIdx.x + l * THREADS;
    ra[l] = em_factor(ra[l], sh_a[idx < BM * BK ? idx / BK : 0], h);
  }
#pragma unroll
  for (int l = 0; l < NB; ++l) {
    const int idx = threadIdx.x + l * THREADS;
    rb[l] = em_factor(rb[l], sh_b[idx % BN], h);
  }
}

// The block's row and column maxima and masks, staged in shared memory for the exponentiation and the epilogue.
template <class T, class I, int BM, int BN, int THREADS>
__device__ __forceinline__ void em_stage_lines(const BmmParams& p, const EmView<T>& v, I batch, I m0, I n0, T* sh_a,
                                               T* sh_b, unsigned long long* mask_a, unsigned long long* mask_b) {
  for (int l = threadIdx.x; l < BM + BN; l += THREADS) {
    if (l < BM) {
      const I i = m0 + l;
      sh_a[l] = i < (I)p.M ? v.row_max[batch * (I)p.M + i] : (T)0;
      mask_a[l] = i < (I)p.M ? v.row_mask[batch * (I)p.M + i] : 0ull;
    } else {
      const I j = n0 + (l - BM);
      sh_b[l - BM] = j < (I)p.N ? v.col_max[batch * (I)p.N + j] : (T)0;
      mask_b[l - BM] = j < (I)p.N ? v.col_mask[batch * (I)p.N + j] : 0ull;
    }
  }
}

// One output: written when exact, else reported for repair (returns true; nothing is written).
template <class T, class Out, class I>
__device__ __forceinline__ bool em_finish(const BmmParams& p, const TileCoords<I>& t, I i, I j, T s, T am, T bm,
                                          unsigned long long shared_chunks, const EmView<T>& v, T threshold) {
  typedef EmReal<T> R;
  const T kLn2 = (T)0.6931471805599453;
  T value;
  if (am != am || bm != bm)
    value = R::nan(); // a NaN in the row of a or the column of b
  else if (am == R::inf() || bm == R::inf())
    return true; // +inf in the row or column: the shift says nothing
  else if (shared_chunks == 0ull)
    value = -R::inf(); // every term is −inf
  else if (s >= threshold)
    value = ((am + bm) - (T)(2 * v.headroom) + R::log2(s)) * kLn2;
  else
    return true; // the guard: too much of s may have underflowed
  emit<T, Out, I>(p, t, i, j, value, -1);
  return false;
}

// After the epilogue: this thread's flagged outputs (all in one repair tile) flag it and join the count.
template <class T, class I>
__device__ __forceinline__ void em_report(const EmView<T>& v, I batch, I i, I j, unsigned flagged) {
  if (flagged) {
    const int rt = em_repair_tile(sizeof(T) == 8);
    atomicOr(&v.flags[(batch * (I)v.tiles_m + i / rt) * (I)v.tiles_n + j / rt], 1u);
  }
  unsigned total = flagged;
#pragma unroll
  for (int o = 16; o > 0; o /= 2) total += __shfl_xor_sync(0xffffffffu, total, o);
  if (threadIdx.x % 32 == 0 && total) atomicAdd(v.repaired, (unsigned long long)total);
}

// Pass 2, math=fma: the tiled skeleton (tiled.cuh) with exponentiated operands and an FMA per term.
template <class In, class Out, class I, int BM, int BN, int BK, int TM, int TN>
__device__ __forceinline__ void exp_matmul_fma_kernel(const BmmParams p) {
  typedef typename Acc<In>::type T;
  typedef Tile<T, BM, BN, BK, TM, TN> G;
  static_assert((TM & (TM - 1)) == 0 && (TN & (TN - 1)) == 0 && TM <= 64 && TN <= 64,
                "a thread's outputs must lie in one repair tile");
  __shared__ __align__(16) typename G::Smem sm;
  __shared__ T sh_a[BM], sh_b[BN];
  __shared__ unsigned long long mask_a[BM], mask_b[BN];
  const EmView<T> v = em_view<T>(p);
  const T threshold = EmReal<T>::pow2(v.guard);
  const In* A0 = static_cast<const In*>(p.a);
  const In* B0 = static_cast<const In*>(p.b);
  const T kNegInf = -EmReal<T>::inf();
  const int r_base = (threadIdx.x / (BN / TN)) * TM, c_base = (threadIdx.x % (BN / TN)) * TN;
  for (I z = blockIdx.z; z < (I)p.B; z += gridDim.z) {
    const TileCoords<I> t = tile_coords<I, BM, BN>(p, z);
    const In* A = A0 + t.batch * (I)p.a_batch;
    const In* B = B0 + t.batch * (I)p.b_batch;
    T ra[G::kLoadA], rb[G::kLoadB];
    G::fetch(p, A, B, t.m0, t.n0, t.k_begin, t.k_end, kNegInf, kNegInf, ra, rb);
    __syncthreads(); // the previous tile's epilogue may still read the staged lines and shared memory
    em_stage_lines<T, I, BM, BN, G::kThreads>(p, v, t.batch, t.m0, t.n0, sh_a, sh_b, mask_a, mask_b);
    __syncthreads();
    em_exponentiate<T, BM, BN, BK, G::kThreads>(ra, rb, sh_a, sh_b, v.headroom);
    G::store(sm, 0, ra, rb);
    __syncthreads();
    T s[TM][TN];
#pragma unroll
    for (int r = 0; r < TM; ++r)
#pragma unroll
      for (int c = 0; c < TN; ++c) s[r][c] = (T)0;
    int buf = 0;
    for (I k0 = t.k_begin; k0 < t.k_end; k0 += BK) {
      const bool more = k0 + BK < t.k_end;
      if (more) G::fetch(p, A, B, t.m0, t.n0, k0 + BK, t.k_end, kNegInf, kNegInf, ra, rb); // in flight meanwhile
#pragma unroll
      for (int k = 0; k < BK; ++k) {
        T fa[TM], fb[TN];
        G::row_frag(sm, buf, k, fa);
        G::col_frag(sm, buf, k, fb);
#pragma unroll
        for (int r = 0; r < TM; ++r)
#pragma unroll
          for (int c = 0; c < TN; ++c) s[r][c] = fma(fa[r], fb[c], s[r][c]);
      }
      // buf ^ 1 was last read before the previous barrier: one barrier a slice.
      if (more) {
        em_exponentiate<T, BM, BN, BK, G::kThreads>(ra, rb, sh_a, sh_b, v.headroom);
        G::store(sm, buf ^ 1, ra, rb);
      }
      __syncthreads();
      buf ^= 1;
    }
    unsigned flagged = 0;
#pragma unroll
    for (int r = 0; r < TM; ++r)
#pragma unroll
      for (int c = 0; c < TN; ++c) {
        const I i = t.m0 + r_base + r, j = t.n0 + c_base + c;
        if (i < (I)p.M && j < (I)p.N)
          flagged += em_finish<T, Out, I>(p, t, i, j, s[r][c], sh_a[r_base + r], sh_b[c_base + c],
                                          mask_a[r_base + r] & mask_b[c_base + c], v, threshold);
      }
    em_report<T, I>(v, t.batch, t.m0 + r_base, t.n0 + c_base, flagged);
  }
}

// Tensor cores: mma.sync m16n8k8 with TF32 operands and f32 accumulators.
__device__ __forceinline__ unsigned to_tf32(float x) {
  unsigned r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return r;
}
__device__ __forceinline__ void mma_tf32(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Shared memory of the tensor-core kernel: k-major like Tile's, padded by 8 floats so that the fragment loads
// (lane = 4·row + k: addresses 8·k + row apart) hit 32 distinct banks.
template <int BM, int BN, int BK> struct EmMmaSmem {
  static constexpr int kPadM = BM + 8, kPadN = BN + 8;
  float a[2][BK][kPadM];
  float b[2][BK][kPadN];
};

// Pass 2, math=tf32x3 (SPLIT) or tf32: each thread owns TM×TN outputs as mma fragments; a warp covers a
// (8·TM)×(4·TN) tile. With SPLIT each factor x is hi + lo (hi = tf32(x), lo = tf32(x − hi)) and a term is
// hi·hi + hi·lo + lo·hi: f32-level accuracy (the lo·lo part is below 2^-22 of the term).
template <class In, class Out, class I, int BM, int BN, int BK, int TM, int TN, bool SPLIT>
__device__ __forceinline__ void exp_matmul_mma_kernel(const BmmParams p) {
  typedef float T;
  typedef Tile<T, BM, BN, BK, TM, TN> G; // fetch only
  typedef EmMmaSmem<BM, BN, BK> S;
  constexpr int WM = 8 * TM, WN = 4 * TN, MT = WM / 16, NT = WN / 8, WARPS_N = BN / WN;
  static_assert(TM % 2 == 0 && TN % 2 == 0 && BM % WM == 0 && BN % WN == 0 && BK % 8 == 0, "mma tile geometry");
  static_assert(128 % WM == 0 && 128 % WN == 0, "a warp's outputs must lie in one repair tile");
  static_assert(G::kThreads == (BM / WM) * (BN / WN) * 32, "one thread count");
  __shared__ __align__(16) S sm;
  __shared__ T sh_a[BM], sh_b[BN];
  __shared__ unsigned long long mask_a[BM], mask_b[BN];
  const EmView<T> v = em_view<T>(p);
  const T threshold = EmReal<T>::pow2(v.guard);
  const In* A0 = static_cast<const In*>(p.a);
  const In* B0 = static_cast<const In*>(p.b);
  const T kNegInf = -EmReal<T>::inf();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
  const int wm0 = (warp / WARPS_N) * WM, wn0 = (warp % WARPS_N) * WN;
  for (I z = blockIdx.z; z < (I)p.B; z += gridDim.z) {
    const TileCoords<I> t = tile_coords<I, BM, BN>(p, z);
    const In* A = A0 + t.batch * (I)p.a_batch;
    const In* B = B0 + t.batch * (I)p.b_batch;
    T ra[G::kLoadA], rb[G::kLoadB];
    G::fetch(p, A, B, t.m0, t.n0, t.k_begin, t.k_end, kNegInf, kNegInf, ra, rb);
    __syncthreads();
    em_stage_lines<T, I, BM, BN, G::kThreads>(p, v, t.batch, t.m0, t.n0, sh_a, sh_b, mask_a, mask_b);
    __syncthreads();
    em_exponentiate<T, BM, BN, BK, G::kThreads>(ra, rb, sh_a, sh_b, v.headroom);
#pragma unroll
    for (int l = 0; l < G::kLoadA; ++l) {
      const int idx = threadIdx.x + l * G::kThreads;
      if (idx < BM * BK) sm.a[0][idx % BK][idx / BK] = ra[l];
    }
#pragma unroll
    for (int l = 0; l < G::kLoadB; ++l) {
      const int idx = threadIdx.x + l * G::kThreads;
      if (idx < BK * BN) sm.b[0][idx / BN][idx % BN] = rb[l];
    }
    __syncthreads();
    float acc[MT][NT][4];
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
      for (int n = 0; n < NT; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[m][n][e] = 0.f;
    int buf = 0;
    for (I k0 = t.k_begin; k0 < t.k_end; k0 += BK) {
      const bool more = k0 + BK < t.k_end;
      if (more) G::fetch(p, A, B, t.m0, t.n0, k0 + BK, t.k_end, kNegInf, kNegInf, ra, rb);
#pragma unroll
      for (int kk = 0; kk < BK; kk += 8) {
        unsigned bh[NT][2], bl[NT][2];
#pragma unroll
        for (int n = 0; n < NT; ++n)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const float x = sm.b[buf][kk + q + 4 * h][wn0 + n * 8 + g];
            bh[n][h] = to_tf32(x);
            bl[n][h] = SPLIT ? to_tf32(x - __uint_as_float(bh[n][h])) : 0u;
          }
#pragma unroll
        for (int m = 0; m < MT; ++m) {
          unsigned ah[4], al[4];
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const float x = sm.a[buf][kk + q + 4 * (e / 2)][wm0 + m * 16 + g + 8 * (e % 2)];
            ah[e] = to_tf32(x);
            al[e] = SPLIT ? to_tf32(x - __uint_as_float(ah[e])) : 0u;
          }
#pragma unroll
          for (int n = 0; n < NT; ++n) {
            if (SPLIT) {
              mma_tf32(acc[m][n], al, bh[n][0], bh[n][1]);
              mma_tf32(acc[m][n], ah, bl[n][0], bl[n][1]);
            }
            mma_tf32(acc[m][n], ah, bh[n][0], bh[n][1]);
          }
        }
      }
      if (more) {
        em_exponentiate<T, BM, BN, BK, G::kThreads>(ra, rb, sh_a, sh_b, v.headroom);
#pragma unroll
        for (int l = 0; l < G::kLoadA; ++l) {
          const int idx = threadIdx.x + l * G::kThreads;
          if (idx < BM * BK) sm.a[buf ^ 1][idx % BK][idx / BK] = ra[l];
        }
#pragma unroll
        for (int l = 0; l < G::kLoadB; ++l) {
          const int idx = threadIdx.x + l * G::kThreads;
          if (idx < BK * BN) sm.b[buf ^ 1][idx / BN][idx % BN] = rb[l];
        }
      }
      __syncthreads();
      buf ^= 1;
    }
    unsigned flagged = 0;
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
      for (int n = 0; n < NT; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int r = wm0 + m * 16 + g + 8 * (e / 2), c = wn0 + n * 8 + 2 * q + (e % 2);
          const I i = t.m0 + r, j = t.n0 + c;
          if (i < (I)p.M && j < (I)p.N)
            flagged += em_finish<T, Out, I>(p, t, i, j, acc[m][n][e], sh_a[r], sh_b[c], mask_a[r] & mask_b[c], v,
                                            threshold);
        }
    em_report<T, I>(v, t.batch, t.m0 + wm0, t.n0 + wn0, flagged);
  }
}

} // namespace jb
