// Strategy "exp_matmul" (log semiring): one exp per operand element and one multiply-add per term, exact on every
// input. The method, the headroom and the guard's bound are derived in exp_matmul_bounds.cuh. Three launches:
//   1. em_prepare_kernel: per row of a and column of b its max (log2 units) and which 1/64 chunks of K hold a value
//      other than −inf; then the exponentiated operands 2^(x' − max + h), padded, into the workspace; clears the
//      repair flags and counter.
//   2. the product of the exponentiated operands: a register-tiled FP32/FP64 FMA kernel (math=fma) or tensor cores
//      (math=tf32x3: three TF32 products per term, fp32-level accuracy; math=tf32: one, the opt-in fast precision).
//      Each output is written (log2 s + shifts) or, when the guard fires, its tile is flagged.
//   3. em_repair_kernel: an exact two-pass kernel (per output the max term, then Σ 2^(t − max)) on flagged tiles.
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

// The workspace, typed (exp_matmul_bounds.cuh: em_workspace).
template <class T> struct EmView {
  T *row_max, *col_max, *ea, *eb;
  EmLine *row_line, *col_line;
  unsigned long long* repaired;
  unsigned* flags;
  long long Mp, Np, Kp;
  long long a_batches, b_batches; // 1 for an operand broadcast over the batch
  long long tiles_m, tiles_n;     // repair tiles
  int headroom, guard;            // h and log2 of the guard threshold
};
template <class T> __device__ __forceinline__ EmView<T> em_view(const BmmParams& p) {
  const bool wide = sizeof(T) == 8;
  EmView<T> v;
  v.a_batches = p.a_batch == 0 ? 1 : p.B;
  v.b_batches = p.b_batch == 0 ? 1 : p.B;
  const EmWorkspace w = em_workspace(p.B, p.M, p.N, p.K, v.a_batches, v.b_batches, wide);
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
  const int rt = em_repair_tile(wide);
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

// One operand element's factor 2^(x' − max + h), 0 for −inf. A row or column whose max is not finite is shifted by
// 0 (its outputs are NaN or repaired; its products are never used).
// The headroom is added after the max is subtracted: for a huge max (|max| ≫ 2^24 h in f32) max − h would round
// back to max, silently dropping h, and an output whose row and column maxima cancel would come out h·2 too small.
template <class T> __device__ __forceinline__ T em_exponent(T x_log2, T line_max, int headroom) {
  return fabs(line_max) < EmReal<T>::inf() ? (x_log2 - line_max) + (T)headroom : x_log2;
}
template <class T> __device__ __forceinline__ T em_factor(T x, T line_max, int headroom) {
  return EmReal<T>::exp2(em_exponent(EmReal<T>::log2_units(x), line_max, headroom));
}

// How the product reads the exponentiated operands. FORM 0 (math=fma): a as [Mp][Kp], b as [Kp][Np], fp32/fp64.
// FORM 1 (tf32) and 2 (tf32x3): b transposed to [Np][Kp], so both operands reach the tensor cores through
// ldmatrix; FORM 1 stores the values rounded to TF32 (the product then converts nothing).
template <int FORM> __device__ __forceinline__ float em_store_form(float x) {
  return FORM == 1 ? __uint_as_float(to_tf32(x)) : x;
}
template <int FORM> __device__ __forceinline__ double em_store_form(double x) { return x; }

// Pass 1. Blocks [0, row_blocks): a warp per padded row of a (lanes along k): max and mask, then the row's factors.
// Blocks after: 32 padded columns of b per block (lanes along n), its 8 warps splitting K. Padding gets 0.
template <class In, class I, class T, int FORM> __device__ __forceinline__ void em_prepare_kernel(const BmmParams p) {
  typedef EmReal<T> R;
  const EmView<T> v = em_view<T>(p);
  const EmStatsGrid g = em_stats_grid(p.M, p.N, v.a_batches, v.b_batches);
  const In* A0 = static_cast<const In*>(p.a);
  const In* B0 = static_cast<const In*>(p.b);
  const T kNegInf = -R::inf();
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
      T* out = v.ea + r * Kp;
      if (i >= (I)p.M) {
        for (I k = lane; k < Kp; k += 32) out[k] = (T)0;
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
        cache[c] = k < K ? R::log2_units(to_acc(A[k * (I)p.a_col])) : kNegInf;
      }
#pragma unroll
      for (int c = 0; c < kCache; ++c) {
        mx = R::max(mx, cache[c]);
        if (cache[c] != kNegInf) line.add(lane + 32 * c, chunk);
      }
#pragma unroll 8
      for (I k = lane + 32 * kCache; k < K; k += 32) {
        const T x = R::log2_units(to_acc(A[k * (I)p.a_col]));
        mx = R::max(mx, x);
        if (x != kNegInf) line.add(k, chunk);
      }
#pragma unroll
      for (int o = 16; o > 0; o /= 2) {
        mx = R::max(mx, __shfl_xor_sync(0xffffffffu, mx, o));
        line.merge_xor(o);
      }
      if (lane == 0) v.row_max[batch * (I)p.M + i] = mx, v.row_line[batch * (I)p.M + i] = line.line();
      // The factors: 2^(x' − max + h), as em_factor computes them, from the cached log2-unit values.
#pragma unroll
      for (int c = 0; c < kCache; ++c) {
        const I k = lane + 32 * c;
        if (k < Kp) out[k] = k < K ? em_store_form<FORM>(R::exp2(em_exponent(cache[c], mx, v.headroom))) : (T)0;
      }
#pragma unroll 8
      for (I k = lane + 32 * kCache; k < Kp; k += 32)
        out[k] = k < K ? em_store_form<FORM>(em_factor<T>(to_acc(A[k * (I)p.a_col]), mx, v.headroom)) : (T)0;
    }
    return;
  }
  __shared__ T part_max[8][32];
  __shared__ EmLine part_line[8][32];
  __shared__ T tile[32][33]; // FORM 1, 2: [k][column] → written out as [column][k]
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
        const T x = R::log2_units(to_acc(B[k * (I)p.b_row]));
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
      for (I k0 = 0; k0 < Kp; k0 += 32) {  // through shared memory, so both the reads and the writes coalesce
        for (int r = warp; r < 32; r += 8) {
          const I k = k0 + r;
          tile[r][lane] = real && k < K ? em_factor<T>(to_acc(B[k * (I)p.b_row]), mx, v.headroom) : (T)0;
        }
        __syncthreads();
        for (int r = warp; r < 32; r += 8) v.eb[(c0 + r) * Kp + k0 + lane] = em_store_form<FORM>(tile[lane][r]);
        __syncthreads();
      }
    }
    __syncthreads();
  }
}

// The block's row and column maxima and masks, staged in shared memory for the epilogue.
template <class T, class I, int BM, int BN, int THREADS>
__device__ __forceinline__ void em_stage_lines(const BmmParams& p, const EmView<T>& v, I batch, I m0, I n0, T* sh_a,
                                               T* sh_b, EmLine* line_a, EmLine* line_b) {
  const EmLine none = {0ull, 0x7fffffff, -1};
  const I ab = v.a_batches == 1 ? 0 : batch, bb = v.b_batches == 1 ? 0 : batch;
  for (int l = threadIdx.x; l < BM + BN; l += THREADS) {
    if (l < BM) {
      const I i = m0 + l;
      sh_a[l] = i < (I)p.M ? v.row_max[ab * (I)p.M + i] : (T)0;
      line_a[l] = i < (I)p.M ? v.row_line[ab * (I)p.M + i] : none;
    } else {
      const I j = n0 + (l - BM);
      sh_b[l - BM] = j < (I)p.N ? v.col_max[bb * (I)p.N + j] : (T)0;
      line_b[l - BM] = j < (I)p.N ? v.col_line[bb * (I)p.N + j] : none;
    }
  }
}

// One output: written when exact, else reported for repair (returns true; nothing is written).
template <class T, class Out, class I>
__device__ __forceinline__ bool em_finish(const BmmParams& p, const TileCoords<I>& t, I i, I j, T s, T am, T bm,
                                          bool all_neg_inf, const EmView<T>& v, T threshold) {
  typedef EmReal<T> R;
  const T kLn2 = (T)0.6931471805599453;
  T value;
  if (am != am || bm != bm)
    value = R::nan(); // a NaN in the row of a or the column of b
  else if (am == R::inf() || bm == R::inf())
    return true; // +inf in the row or column: the shift says nothing
  else if (all_neg_inf)
    value = -R::inf(); // every term is −inf
  else if (s >= threshold) {
    // log2 s = e + log2 f with f in [0.5, 1): exact exponent arithmetic, so log2 s − 2h keeps all its digits even
    // though log2 s itself is near 2h (a plain log2f(s) would carry its rounding at the scale of 2h).
    int e;
    const T f = frexp(s, &e);
    value = ((am + bm) + ((T)(e - 2 * v.headroom) + R::log2(f))) * kLn2;
  }
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

// 16 bytes of T: the product's loads from the padded, aligned workspace.
template <class T> struct __align__(16) EmVec {
  T v[16 / sizeof(T)];
};

// Moves one K slice of the exponentiated operands into shared memory: a's [BM][BK] block (k contiguous in the
// workspace) transposed to [BK][BM], b's [BK][BN] block as it is. No bounds checks: the workspace is padded.
template <class T, int BM, int BN, int BK, int THREADS> struct EmLoader {
  static constexpr int V = 16 / sizeof(T);
  static constexpr int kVecA = BM * BK / V, kVecB = BK * BN / V;
  static constexpr int kLoadA = (kVecA + THREADS - 1) / THREADS, kLoadB = (kVecB + THREADS - 1) / THREADS;
  static_assert(BK % V == 0 && BN % V == 0, "slices are whole 16-byte vectors");
  EmVec<T> ra[kLoadA], rb[kLoadB];

  template <class I> __device__ __forceinline__ void fetch(const T* ea, const T* eb, I Kp, I Np, I m0, I n0, I k0) {
#pragma unroll
    for (int l = 0; l < kLoadA; ++l) {
      const int idx = threadIdx.x + l * THREADS, r = idx / (BK / V), c = idx % (BK / V);
      if (kVecA % THREADS == 0 || idx < kVecA)
        ra[l] = *reinterpret_cast<const EmVec<T>*>(ea + (m0 + r) * Kp + k0 + c * V);
    }
#pragma unroll
    for (int l = 0; l < kLoadB; ++l) {
      const int idx = threadIdx.x + l * THREADS, r = idx / (BN / V), c = idx % (BN / V);
      if (kVecB % THREADS == 0 || idx < kVecB)
        rb[l] = *reinterpret_cast<const EmVec<T>*>(eb + (k0 + r) * Np + n0 + c * V);
    }
  }
  template <int PAD_M, int PAD_N> __device__ __forceinline__ void store(T (*sa)[PAD_M], T (*sb)[PAD_N]) const {
#pragma unroll
    for (int l = 0; l < kLoadA; ++l) {
      const int idx = threadIdx.x + l * THREADS, r = idx / (BK / V), c = idx % (BK / V);
      if (kVecA % THREADS == 0 || idx < kVecA)
#pragma unroll
        for (int e = 0; e < V; ++e) sa[c * V + e][r] = ra[l].v[e];
    }
#pragma unroll
    for (int l = 0; l < kLoadB; ++l) {
      const int idx = threadIdx.x + l * THREADS, r = idx / (BN / V), c = idx % (BN / V);
      if (kVecB % THREADS == 0 || idx < kVecB) *reinterpret_cast<EmVec<T>*>(&sb[r][c * V]) = rb[l];
    }
  }
};

// Pass 2, math=fma: the tiled skeleton's shared-memory layout and fragments (tiled.cuh), an FMA per term.
template <class In, class Out, class I, int BM, int BN, int BK, int TM, int TN>
__device__ __forceinline__ void exp_matmul_fma_kernel(const BmmParams p) {
  typedef typename Acc<In>::type T;
  typedef Tile<T, BM, BN, BK, TM, TN> G;
  typedef EmLoader<T, BM, BN, BK, G::kThreads> L;
  static_assert((TM & (TM - 1)) == 0 && (TN & (TN - 1)) == 0 && TM <= 64 && TN <= 64,
                "a thread's outputs must lie in one repair tile");
  __shared__ __align__(16) typename G::Smem sm;
  __shared__ T sh_a[BM], sh_b[BN];
  __shared__ EmLine line_a[BM], line_b[BN];
  const EmView<T> v = em_view<T>(p);
  const T threshold = EmReal<T>::pow2(v.guard);
  const I Kp = (I)v.Kp, Np = (I)v.Np;
  const int r_base = (threadIdx.x / (BN / TN)) * TM, c_base = (threadIdx.x % (BN / TN)) * TN;
  for (I z = blockIdx.z; z < (I)p.B; z += gridDim.z) {
    const TileCoords<I> t = tile_coords<I, BM, BN>(p, z);
    const T* ea = v.ea + (v.a_batches == 1 ? 0 : t.batch) * (I)v.Mp * Kp;
    const T* eb = v.eb + (v.b_batches == 1 ? 0 : t.batch) * Kp * Np;
    L ld;
    ld.fetch(ea, eb, Kp, Np, t.m0, t.n0, (I)0);
    __syncthreads(); // the previous tile's epilogue may still read the staged lines and shared memory
    em_stage_lines<T, I, BM, BN, G::kThreads>(p, v, t.batch, t.m0, t.n0, sh_a, sh_b, line_a, line_b);
    ld.store(sm.a[0], sm.b[0]);
    __syncthreads();
    T s[TM][TN];
#pragma unroll
    for (int r = 0; r < TM; ++r)
#pragma unroll
      for (int c = 0; c < TN; ++c) s[r][c] = (T)0;
    int buf = 0;
    for (I k0 = 0; k0 < Kp; k0 += BK) {
      const bool more = k0 + BK < Kp;
      if (more) ld.fetch(ea, eb, Kp, Np, t.m0, t.n0, k0 + BK); // in flight during the FMAs
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
      if (more) ld.store(sm.a[buf ^ 1], sm.b[buf ^ 1]); // last read before the previous barrier
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
                                          em_all_neg_inf(line_a[r_base + r], line_b[c_base + c]), v, threshold);
      }
    em_report<T, I>(v, t.batch, t.m0 + r_base, t.n0 + c_base, flagged);
  }
}

// Tensor cores: mma.sync m16n8k8 with TF32 operands and f32 accumulators.
__device__ __forceinline__ void mma_tf32(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Shared-memory address of a generic pointer, for the instructions that take one.
__device__ __forceinline__ unsigned em_smem_addr(const void* p) {
  unsigned addr;
  asm("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(addr) : "l"(p));
  return addr;
}

// Four 8×4 tiles of 32-bit values from shared memory in one instruction: lane l names row l % 8 of tile l / 8,
// and receives from tile i the word (row l / 4, column l % 4) in r[i] — exactly an mma fragment's layout.
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], const float* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(em_smem_addr(row)));
}

// Shared memory of the tensor-core kernel: a as [BM][BK] and b as [BN][BK] (k contiguous, as the prepare pass
// stores them), rows padded by 4 words so that the 8 rows one ldmatrix tile reads hit 32 distinct banks.
template <int BM, int BN, int BK> struct EmMmaSmem {
  static constexpr int kPitch = BK + 4;
  float a[2][BM][kPitch];
  float b[2][BN][kPitch];
};

// Copies one K slice of rows (a's rows or b's columns, each k-contiguous in the workspace) into shared memory with
// cp.async: 16 bytes per copy, straight from global to shared, no registers in between.
template <int ROWS, int BK, int THREADS, int PITCH, class I>
__device__ __forceinline__ void em_copy_rows(float (*dst)[PITCH], const float* src, I Kp, I row0, I k0) {
  constexpr int kVec = ROWS * BK / 4, kLoad = (kVec + THREADS - 1) / THREADS;
  static_assert(BK % 4 == 0, "slices are whole 16-byte vectors");
#pragma unroll
  for (int l = 0; l < kLoad; ++l) {
    const int idx = threadIdx.x + l * THREADS;
    if (kVec % THREADS == 0 || idx < kVec)
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(em_smem_addr(&dst[idx / (BK / 4)][idx % (BK / 4) * 4])),
                   "l"(src + (row0 + idx / (BK / 4)) * Kp + k0 + idx % (BK / 4) * 4));
  }
}
__device__ __forceinline__ void em_copy_commit() { asm volatile("cp.async.commit_group;"); }
__device__ __forceinline__ void em_copy_wait_all() { asm volatile("cp.async.wait_group 0;" ::: "memory"); }

// Pass 2, math=tf32x3 (SPLIT) or tf32: each thread owns TM×TN outputs as mma fragments; a warp covers a
// (8·TM)×(4·TN) tile. With SPLIT each factor x is hi + lo (hi = tf32(x), lo = tf32(x − hi)) and a term is
// hi·hi + hi·lo + lo·hi (the lo·lo part is below 2^-22 of the term). Tensor cores add with truncation, so SPLIT
// sums each k-step's three products from zero and adds that to the f32 accumulator with a rounded add: the
// truncation then never compounds over K. Without SPLIT the operands arrive rounded to TF32 (FORM 1).
template <class In, class Out, class I, int BM, int BN, int BK, int TM, int TN, bool SPLIT>
__device__ __forceinline__ void exp_matmul_mma_kernel(const BmmParams p) {
  typedef float T;
  constexpr int WM = 8 * TM, WN = 4 * TN, MT = WM / 16, NT = WN / 8, WARPS_N = BN / WN;
  constexpr int kThreads = (BM / WM) * (BN / WN) * 32;
  typedef EmMmaSmem<BM, BN, BK> S;
  static_assert(TM % 2 == 0 && TN % 4 == 0 && BM % WM == 0 && BN % WN == 0 && BK % 8 == 0, "mma tile geometry");
  static_assert(128 % WM == 0 && 128 % WN == 0, "a warp's outputs must lie in one repair tile");
  __shared__ __align__(16) S sm;
  __shared__ T sh_a[BM], sh_b[BN];
  __shared__ EmLine line_a[BM], line_b[BN];
  const EmView<T> v = em_view<T>(p);
  const T threshold = EmReal<T>::pow2(v.guard);
  const I Kp = (I)v.Kp;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
  const int wm0 = (warp / WARPS_N) * WM, wn0 = (warp % WARPS_N) * WN;
  // This lane's ldmatrix rows: for a, tile lane/8 is (rows +8 if odd, k +4 if ≥ 2); for b (two n8 tiles per
  // call), (k +4 if odd, columns +8 if ≥ 2).
  const int a_row = (lane / 8 % 2) * 8 + lane % 8, a_k = (lane / 16) * 4;
  const int b_row = (lane / 16) * 8 + lane % 8, b_k = (lane / 8 % 2) * 4;
  for (I z = blockIdx.z; z < (I)p.B; z += gridDim.z) {
    const TileCoords<I> t = tile_coords<I, BM, BN>(p, z);
    const T* ea = v.ea + (v.a_batches == 1 ? 0 : t.batch) * (I)v.Mp * Kp;
    const T* eb = v.eb + (v.b_batches == 1 ? 0 : t.batch) * (I)v.Np * Kp;
    __syncthreads(); // the previous tile's epilogue may still read the staged lines and shared memory
    em_copy_rows<BM, BK, kThreads>(sm.a[0], ea, Kp, t.m0, (I)0);
    em_copy_rows<BN, BK, kThreads>(sm.b[0], eb, Kp, t.n0, (I)0);
    em_copy_commit();
    em_stage_lines<T, I, BM, BN, kThreads>(p, v, t.batch, t.m0, t.n0, sh_a, sh_b, line_a, line_b);
    em_copy_wait_all();
    __syncthreads();
    float acc[MT][NT][4];
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
      for (int n = 0; n < NT; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[m][n][e] = 0.f;
    int buf = 0;
    for (I k0 = 0; k0 < Kp; k0 += BK) {
      const bool more = k0 + BK < Kp;
      if (more) { // into the other buffer, last read before the previous barrier; lands during the mma below
        em_copy_rows<BM, BK, kThreads>(sm.a[buf ^ 1], ea, Kp, t.m0, k0 + BK);
        em_copy_rows<BN, BK, kThreads>(sm.b[buf ^ 1], eb, Kp, t.n0, k0 + BK);
        em_copy_commit();
      }
      // SPLIT holds twice the fragments: one k-step at a time, or ptxas hoists the next step's loads and spills.
#pragma unroll(SPLIT ? 1 : BK / 8)
      for (int kk = 0; kk < BK; kk += 8) {
        unsigned bh[NT][2], bl[NT][2];
#pragma unroll
        for (int n = 0; n < NT; n += 2) {
          unsigned r[4];
          ldmatrix_x4(r, &sm.b[buf][wn0 + n * 8 + b_row][kk + b_k]);
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const float x = __uint_as_float(r[e]);
            bh[n + e / 2][e % 2] = SPLIT ? to_tf32(x) : r[e];
            bl[n + e / 2][e % 2] = SPLIT ? to_tf32(x - __uint_as_float(to_tf32(x))) : 0u;
          }
        }
#pragma unroll
        for (int m = 0; m < MT; ++m) {
          unsigned ah[4], al[4];
          ldmatrix_x4(ah, &sm.a[buf][wm0 + m * 16 + a_row][kk + a_k]);
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const float x = __uint_as_float(ah[e]);
            if (SPLIT) {
              ah[e] = to_tf32(x);
              al[e] = to_tf32(x - __uint_as_float(ah[e]));
            }
          }
#pragma unroll
          for (int n = 0; n < NT; ++n) {
            if (SPLIT) {
              float d[4] = {0.f, 0.f, 0.f, 0.f};
              mma_tf32(d, al, bh[n][0], bh[n][1]);
              mma_tf32(d, ah, bl[n][0], bl[n][1]);
              mma_tf32(d, ah, bh[n][0], bh[n][1]);
#pragma unroll
              for (int e = 0; e < 4; ++e) acc[m][n][e] += d[e];
            } else {
              mma_tf32(acc[m][n], ah, bh[n][0], bh[n][1]);
            }
          }
        }
      }
      em_copy_wait_all();
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
            flagged += em_finish<T, Out, I>(p, t, i, j, acc[m][n][e], sh_a[r], sh_b[c],
                                            em_all_neg_inf(line_a[r], line_b[c]), v, threshold);
        }
    em_report<T, I>(v, t.batch, t.m0 + wm0, t.n0 + wn0, flagged);
  }
}

// Pass 3: the exact two-pass kernel on the tiles the guard flagged (BmmParams.repair_flags). Per output, a first
// sweep over K finds the largest term t = a + b (natural units, so no finite input overflows a scaling); a second
// sums 2^((t − max)·log2 e), every term ≤ 1 and the largest exactly 1, so nothing that matters can underflow.
// NaN terms give NaN, a +inf max gives +inf, an all −inf output −inf: the reference's contract.
template <class In, class Out, class I, int BM, int BN, int BK, int TM, int TN>
__device__ __forceinline__ void em_repair_kernel(const BmmParams p) {
  typedef typename Acc<In>::type T;
  typedef EmReal<T> R;
  typedef Tile<T, BM, BN, BK, TM, TN> G;
  __shared__ __align__(16) typename G::Smem sm;
  const In* A0 = static_cast<const In*>(p.a);
  const In* B0 = static_cast<const In*>(p.b);
  const T kNegInf = -R::inf(), kLog2e = (T)1.4426950408889634, kLn2 = (T)0.6931471805599453;
  for (I z = blockIdx.z; z < (I)p.B; z += gridDim.z) {
    if (!tile_wanted<I, BM, BN>(p, z)) continue; // uniform over the block
    const TileCoords<I> t = tile_coords<I, BM, BN>(p, z);
    const In* A = A0 + t.batch * (I)p.a_batch;
    const In* B = B0 + t.batch * (I)p.b_batch;
    T m[TM][TN], s[TM][TN];
#pragma unroll
    for (int r = 0; r < TM; ++r)
#pragma unroll
      for (int c = 0; c < TN; ++c) m[r][c] = kNegInf, s[r][c] = (T)0;
#pragma unroll 1
    for (int sweep = 0; sweep < 2; ++sweep) {
      T ra[G::kLoadA], rb[G::kLoadB];
      G::fetch(p, A, B, t.m0, t.n0, t.k_begin, t.k_end, kNegInf, kNegInf, ra, rb);
      __syncthreads(); // the previous sweep or tile may still read shared memory
      G::store(sm, 0, ra, rb);
      __syncthreads();
      int buf = 0;
      for (I k0 = t.k_begin; k0 < t.k_end; k0 += BK) {
        const bool more = k0 + BK < t.k_end;
        if (more) G::fetch(p, A, B, t.m0, t.n0, k0 + BK, t.k_end, kNegInf, kNegInf, ra, rb);
#pragma unroll 4
        for (int k = 0; k < BK; ++k) {
          T fa[TM], fb[TN];
          G::row_frag(sm, buf, k, fa);
          G::col_frag(sm, buf, k, fb);
#pragma unroll
          for (int r = 0; r < TM; ++r)
#pragma unroll
            for (int c = 0; c < TN; ++c) {
              // Padding is −inf on both sides: a −inf term, which neither sweep counts.
              const T term = fa[r] + fb[c];
              if (sweep == 0)
                m[r][c] = R::max(m[r][c], term);
              else
                s[r][c] += R::exp2((term - m[r][c]) * kLog2e);
            }
        }
        if (more) G::store(sm, buf ^ 1, ra, rb);
        __syncthreads();
        buf ^= 1;
      }
    }
    const I r0 = t.m0 + (threadIdx.x / (BN / TN)) * TM, c0 = t.n0 + (threadIdx.x % (BN / TN)) * TN;
#pragma unroll
    for (int r = 0; r < TM; ++r)
#pragma unroll
      for (int c = 0; c < TN; ++c)
        if (r0 + r < (I)p.M && c0 + c < (I)p.N) {
          const T mx = m[r][c];
          const T value = fabs(mx) < R::inf() ? mx + R::log2(s[r][c]) * kLn2 : mx; // NaN, ±inf as they are
          emit<T, Out, I>(p, t, r0 + r, c0 + c, value, -1);
        }
  }
}

} // namespace jb
