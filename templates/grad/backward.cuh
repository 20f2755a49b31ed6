// Backward kernels: gradients of a scalar loss through out = a ⊗ b, from grad_out (G) and what the forward saved.
//
// Gather (log, plus_times; strategy "tiled"): each gradient is itself a reduction shaped like a semiring BMM, so it
// is register-tiled like the forward, and no B·M·N·K tensor ever exists:
//   grad_a[i,k] = Σ_j G[i,j] · w(i,j,k)   (output rows i, cols k, reduction over j)
//   grad_b[k,j] = Σ_i G[i,j] · w(i,j,k)   (output rows k, cols j, reduction over i)
// with w = exp(a[i,k] + b[k,j] − out[i,j]) for log (the softmax weight; ≤ 1 since out ≥ every term) and w = the
// other operand for plus_times. The operand whose gradient is computed is a per-output constant held in registers;
// G (and out) sit on one side of the tile ("G side": rows for grad_a, columns for grad_b), the other operand on the
// other side. Terms with G = 0, and outputs whose terms were all −inf (out = −inf), contribute exactly 0 (never
// NaN); NaN in G or out reaches exactly the gradients of its row and column.
//
// Small G (log): a gradient of tiny G (1e-20·randn next to weights of e^-60) is a sum of subnormal terms, and f32
// rounds each partial sum to the subnormal spacing: dozens of roundings, several units of 2^-149 off. A block each
// of whose G lines (a row of G for grad_a, a column for grad_b) shows a |G| ≥ 2^kTiny among its first values (randn
// G: every block) sums as it is: its roundings are below the contract's floor, 2^-120·Σ|G|. Another block sums
// with each line read as G·2^-σ, σ the exponent of the line's largest finite |G| (capped to
// [−kMaxScaleUp, 0]: scaled up only, exactly), the terms summed as normal numbers, the sum scaled back by 2^σ once,
// with one rounding. (w ≤ 1 keeps the scaled sum below the line's length.)
//
// The selecting semirings' backward is grad/scatter.cuh's (or grad/histogram.cuh's).
//
// A gradient broadcast over the batch (its operand's batch stride is 0) sums every batch's contribution: the
// kernels then accumulate atomically into the workspace and grad_store_kernel writes the result.
#pragma once

#include "core/params.cuh"
#include "core/dtypes.cuh"
#include "core/kslice.cuh"
#include "core/numbers.cuh"
#include "grad/store.cuh"

namespace jb {

// |x| ≤ 2^126 (f64: 2^1022), false for NaN: LogGrad's fast loop (below).
__device__ __forceinline__ bool log_grad_fast(float x) { return fabsf(x) <= 0x1p126f; }
__device__ __forceinline__ bool log_grad_fast(double x) { return fabs(x) <= 0x1p1022; }

// Per-semiring weight of one term. side(): the value stored for out on the G side; operand()/constant(): the
// stored form of a or b; term(u, v, c): the weight from the G-side value u, the other side's v and the constant c;
// fast(x): whether an operand value allows the fast term loop (no test per term: grad_tiled_pass).
// Log: the weight 2^((a + b)·log2e − out·log2e), a + b added in natural units and scaled inside one fused
// multiply-add, so offsets of rows and columns that cancel in a + b cancel exactly (scaled first, each operand would
// carry |x|·2^-24 of rounding); what remains is out's own rounding, |out|·2^-24. Two instructions and the exp,
// as many as adding operands scaled beforehand. A finite out too large to scale (|out|·log2e past the format's
// top: beyond ±2.3e38 in f32) is stored as NaN, so its gradients are NaN rather than silently missing its terms.
// The fast loop takes operands up to 2^126 (2^1022): a + b then stays finite, so a skipped term's weight is 0.
struct LogGrad {
  static const bool kUsesOut = true, kConstant = true, kScaleG = true;
  template <class T> static __device__ __forceinline__ T side(T o) {
    const T u = -o * Num<T>::log2e();
    return fabs(u) == Num<T>::inf() && fabs(o) < Num<T>::inf() ? Num<T>::nan() : u;
  }
  template <class T> static __device__ __forceinline__ T operand(T x) { return x; }
  template <class T> static __device__ __forceinline__ bool fast(T x) { return log_grad_fast(x); }
  template <class T> static __device__ __forceinline__ T term(T u, T v, T c) {
    return ex2_approx(fma(c + v, Num<T>::log2e(), u));
  }
};
struct PlusTimesGrad {
  static const bool kUsesOut = false, kConstant = false, kScaleG = false; // w unbounded: G kept as it is
  template <class T> static __device__ __forceinline__ T side(T) { return T(0); }
  template <class T> static __device__ __forceinline__ T operand(T x) { return x; }
  template <class T> static __device__ __forceinline__ T term(T, T v, T) { return v; }
  template <class T> static __device__ __forceinline__ bool fast(T x) { return x - x == T(0); } // finite
};

// Which outputs a tiled backward reads. Every one, for the backward itself; the exp-matmul backward's direct pass
// reads only the outputs its guard gave up and adds their contributions to the gradient (exp_matmul/grad.cuh).
// batch(z) binds a batch; tile(m0) says, the same for the whole block, whether rows [m0, m0 + BM) read any;
// (i, j) whether one output is read.
struct KeepAll {
  enum { kAdd = false }; // store the gradient, or add to what is there
  template <class I> __device__ __forceinline__ KeepAll batch(I) const { return *this; }
  template <class I> __device__ __forceinline__ bool tile(I) const { return true; }
  template <class I> __device__ __forceinline__ bool operator()(I, I) const { return true; }
};

template <class T, int BM, int BN, int BK, bool GA> struct GradSmem {
  static constexpr int kG = GA ? BM : BN, kO = GA ? BN : BM;
  T u[2][BK][kG + 4]; // G side: out in the semiring's form (−out·log2e for log), −inf where the term is skipped
  T g[2][BK][kG + 4]; // G side: grad_out (times up[]), 0 where the term is skipped
  T v[2][BK][kO + 4]; // other side: the other operand
  int sigma[kG];      // G side, scaled: each line's scale exponent σ
  T up[kG];           // G side, scaled: 2^-σ
  int unproven;       // some line's sample held no |G| ≥ 2^kTiny (grad_needs_scales)
};

// tiny(): below 2^kTiny, a |G| may need its line scaled (the header; grad_needs_scales): a line of such G may meet
// the subnormals, whose spacing (2^-150 in f32, for a floor of 2^-120·|G| per term) the contract's floor no longer
// covers below about 2^-30 (f64: 2^-1075 against 2^-1000·|G|, below 2^-75); 6 binades of margin. kMaxScaleUp: the
// largest scale-up of a line (2^kMaxScaleUp is normal); a line of |G| below 2^-kMaxScaleUp is scaled that far.
template <class T> struct GradScale;
template <> struct GradScale<float> {
  enum { kMaxScaleUp = 120 };
  static __device__ __forceinline__ float tiny() { return 0x1p-24f; } // 2^kTiny
};
template <> struct GradScale<double> {
  enum { kMaxScaleUp = 1000 };
  static __device__ __forceinline__ double tiny() { return 0x1p-69; }
};
__device__ __forceinline__ float grad_pow2(float v, int e) { return ldexpf(v, e); }
__device__ __forceinline__ double grad_pow2(double v, int e) { return ldexp(v, e); }
__device__ __forceinline__ int grad_exponent(float v) { // v < 2^e, v ≥ 2^(e−1); v > 0 finite
  int e;
  frexpf(v, &e);
  return e;
}
__device__ __forceinline__ int grad_exponent(double v) {
  int e;
  frexp(v, &e);
  return e;
}

// Whether a block and batch must sum with scaled G lines (the header: small G): unless each of its lines shows a
// |G| ≥ 2^kTiny among its first kSample values (which proves the line's Σ|G| large enough for the floor to cover
// the subnormal roundings), it must. A line that shows none there is scaled, whatever its later values: that costs
// time, never accuracy (its scale comes from all its values). Every thread of the block calls it; uniform result.
template <class Out, class I, int BM, int BN, int BK, int NT, bool GA, class T>
__device__ __forceinline__ bool grad_needs_scales(GradSmem<T, BM, BN, BK, GA>& sm, const GradParams& p, const Out* Gp,
                                                  I m0, I n0) {
  constexpr int kG = GA ? BM : BN, kSample = 32;
  const I T_len = GA ? (I)p.N : (I)p.M;
  const int lines = (int)min((I)kG, GA ? (I)p.M - m0 : (I)p.N - n0), sample = (int)min((I)kSample, T_len);
  // Per thread a bit per line it saw proven, over the lines it visits; then a line is proven when any thread saw it.
  for (int x = threadIdx.x; x < kG; x += NT) sm.sigma[x] = 0;
  if (threadIdx.x == 0) sm.unproven = 0;
  __syncthreads();
#pragma unroll 1 // unrolled, its loads' registers spilled some tiles' main loops
  for (int l = threadIdx.x; l < kG * kSample; l += NT) {
    // GA: (line x = row i, t = column j), t fastest along G's rows. Else (t = row i, x = column j), x fastest.
    const int x = GA ? l / kSample : l % kG, t = GA ? l % kSample : l / kG;
    if (x >= lines || t >= sample) continue;
    const I i = GA ? m0 + x : (I)t, j = GA ? (I)t : n0 + x;
    const T g = fabs(to_acc(Gp[i * (I)p.out_row + j * (I)p.out_col]));
    if (g >= GradScale<T>::tiny()) sm.sigma[x] = 1; // ≥ also excludes NaN; +inf counts as proven (nothing to scale)
  }
  __syncthreads();
  for (int x = threadIdx.x; x < lines; x += NT)
    if (sm.sigma[x] == 0) sm.unproven = 1;
  __syncthreads();
  return sm.unproven != 0;
}

// The G side's scales of a block and batch that needs them (the header: small G): σ and 2^-σ per line, over
// every G of the line (also those a Keep skips, so that a gradient the exp-matmul product already holds stays below
// the line's length once scaled). Reads coalesce along G's rows for grad_a (a warp per line at a time); for grad_b
// each thread keeps one column when the block's threads are a multiple of the lines. Every thread of the block
// calls it.
template <class Out, class I, int BM, int BN, int BK, int NT, bool GA, class T>
__device__ __forceinline__ void grad_line_scales(GradSmem<T, BM, BN, BK, GA>& sm, const GradParams& p, const Out* Gp,
                                                 I m0, I n0) {
  constexpr int kG = GA ? BM : BN;
  static_assert(NT % 32 == 0, "whole warps: the line maxima are reduced by shuffles");
  const int tid = threadIdx.x;
  const int kNone = -0x7fffffff; // no finite nonzero G in the line
  for (int x = tid; x < kG; x += NT) sm.sigma[x] = kNone;
  __syncthreads();
  const I T_len = GA ? (I)p.N : (I)p.M;
  const auto g_at = [&](I i, I j) {
    const T g = fabs(to_acc(Gp[i * (I)p.out_row + j * (I)p.out_col]));
    return g < Num<T>::inf() ? g : T(0); // NaN compares false: 0
  };
  const auto publish = [&](int x, T mx) {
    if (mx > T(0)) atomicMax(&sm.sigma[x], grad_exponent(mx));
  };
  if (GA || NT % kG != 0) {
    for (int x = 0; x < kG; ++x) { // a line at a time, the block's threads along it
      const I i = GA ? m0 + x : I(0), j = GA ? I(0) : n0 + x;
      if ((GA ? i >= (I)p.M : j >= (I)p.N)) break;
      T mx = T(0);
      for (I t = tid; t < T_len; t += NT) mx = fmax(mx, GA ? g_at(i, t) : g_at(t, j));
#pragma unroll
      for (int o = 16; o > 0; o /= 2) mx = fmax(mx, __shfl_xor_sync(0xffffffffu, mx, o));
      if (tid % 32 == 0) publish(x, mx);
    }
  } else { // grad_b: thread tid keeps column x = tid % kG, rows strided by NT / kG
    const int x = tid % kG;
    const I j = n0 + x;
    T mx = T(0);
    if (j < (I)p.N)
      for (I t = tid / kG; t < T_len; t += NT / kG) mx = fmax(mx, g_at(t, j));
    publish(x, mx);
  }
  __syncthreads();
  for (int x = tid; x < kG; x += NT) {
    const int e = sm.sigma[x];
    const int sigma = e == kNone ? 0 : e > 0 ? 0 : e < -GradScale<T>::kMaxScaleUp ? -GradScale<T>::kMaxScaleUp : e;
    sm.sigma[x] = sigma;
    sm.up[x] = grad_pow2(T(1), -sigma);
  }
  __syncthreads();
}

// One slice [t0, t0 + BK) of the reduction into registers (GA: the G side is rows i, the reduction is j).
// Returns whether everything fetched by this thread allows the fast term loop (see grad_tiled_kernel).
// SCALED (the header: small G): G times its line's up[].
template <bool SCALED, class Sem, class In, class Out, class I, int BM, int BN, int BK, int NT, int LG, int LO, bool GA,
          class Keep>
__device__ __forceinline__ bool grad_fetch(const GradParams& p, const Keep& keep, const In* A, const In* Bm,
                                           const Out* O, const Out* Gp, const typename Acc<In>::type* up, I m0, I n0,
                                           I t0, typename Acc<In>::type (&ru)[LG], typename Acc<In>::type (&rg)[LG],
                                           typename Acc<In>::type (&rv)[LO]) {
  typedef typename Acc<In>::type T;
  const T kNegInf = Num<T>::neg_inf();
  const int tid = threadIdx.x;
  constexpr int kG = GA ? BM : BN, kO = GA ? BN : BM;
  const I T_len = GA ? (I)p.N : (I)p.M;
  bool fast = true;
#pragma unroll
  for (int l = 0; l < LG; ++l) {
    const int idx = tid + l * NT;
    // GA: (i = m0 + r, j = t0 + t), t fastest. Else: (i = t0 + t, j = n0 + c), c fastest.
    const int x = GA ? idx / BK : idx % kG, t = GA ? idx % BK : idx / kG;
    const I i = GA ? m0 + x : t0 + t, j = GA ? t0 + t : n0 + x;
    T u = kNegInf, g = T(0);
    if (idx < kG * BK && i < (I)p.M && j < (I)p.N && t0 + t < T_len) {
      const I at = i * (I)p.out_row + j * (I)p.out_col;
      g = to_acc(Gp[at]);
      if (Sem::kScaleG && SCALED) g *= up[x]; // exact: a power of two that keeps |g| ≤ 1
      if (!keep(i, j)) g = T(0);
      if (Sem::kUsesOut) {
        const T o = to_acc(O[at]);
        if (o == kNegInf) g = T(0); // every term of this output was −inf: no weight anywhere
        u = Sem::side(o);
      } else {
        u = T(0);
      }
      if (g == T(0)) u = kNegInf; // a skipped term: weight exactly 0 next to finite partners
    }
    fast &= (u == u) && (g - g == T(0)); // u not NaN, g finite
    ru[l] = u, rg[l] = g;
  }
#pragma unroll
  for (int l = 0; l < LO; ++l) {
    const int idx = tid + l * NT;
    // GA: b at (k = n0 + c, j = t0 + t), t fastest. Else: a at (i = t0 + t, k = m0 + r), r fastest.
    const int x = GA ? idx / BK : idx % kO, t = GA ? idx % BK : idx / kO;
    T v = T(0);
    if (GA) {
      const I k = n0 + x, j = t0 + t;
      if (idx < kO * BK && k < (I)p.K && j < (I)p.N) v = Sem::operand(to_acc(Bm[k * (I)p.b_row + j * (I)p.b_col]));
    } else {
      const I i = t0 + t, k = m0 + x;
      if (idx < kO * BK && i < (I)p.M && k < (I)p.K) v = Sem::operand(to_acc(A[i * (I)p.a_row + k * (I)p.a_col]));
    }
    fast &= Sem::fast(v);
    rv[l] = v;
  }
  return fast;
}

template <class T, int BM, int BN, int BK, int NT, int LG, int LO, bool GA>
__device__ __forceinline__ void grad_store(GradSmem<T, BM, BN, BK, GA>& sm, int buf, const T (&ru)[LG],
                                           const T (&rg)[LG], const T (&rv)[LO]) {
  constexpr int kG = GA ? BM : BN, kO = GA ? BN : BM;
  const int tid = threadIdx.x;
#pragma unroll
  for (int l = 0; l < LG; ++l) {
    const int idx = tid + l * NT;
    if (idx >= kG * BK) continue;
    const int x = GA ? idx / BK : idx % kG, t = GA ? idx % BK : idx / kG;
    sm.u[buf][t][x] = ru[l];
    sm.g[buf][t][x] = rg[l];
  }
#pragma unroll
  for (int l = 0; l < LO; ++l) {
    const int idx = tid + l * NT;
    if (idx >= kO * BK) continue;
    const int x = GA ? idx / BK : idx % kO, t = GA ? idx % BK : idx / kO;
    sm.v[buf][t][x] = rv[l];
  }
}

// One slice of terms. FAST (every value of the slice and every constant finite, u possibly −inf): acc += g·w with
// no test, since a skipped term (u = −inf) has weight exactly 0 next to finite partners. Otherwise G = 0
// contributes exactly 0 even next to inf or NaN. (Computing one 2^x in five with a polynomial on the FP32 pipe was
// tried and measured: no gain, since the loop is bound by instruction issue as much as by the exp unit.)
template <bool FAST, class Sem, class T, int BM, int BN, int BK, int TM, int TN, bool GA>
__device__ __forceinline__ void grad_slice(const GradSmem<T, BM, BN, BK, GA>& sm, int buf, int r_base, int c_base,
                                           const T (&cst)[TM][TN], T (&acc)[TM][TN]) {
  constexpr int kFG = GA ? TM : TN, kFO = GA ? TN : TM; // fragment lengths: G side, other side
  const int g0 = GA ? r_base : c_base, o0 = GA ? c_base : r_base;
#pragma unroll 2
  for (int t = 0; t < BK; ++t) {
    T fu[kFG], fg[kFG], fv[kFO];
#pragma unroll
    for (int x = 0; x < kFG; ++x) fu[x] = sm.u[buf][t][g0 + x], fg[x] = sm.g[buf][t][g0 + x];
#pragma unroll
    for (int x = 0; x < kFO; ++x) fv[x] = sm.v[buf][t][o0 + x];
#pragma unroll
    for (int r = 0; r < TM; ++r)
#pragma unroll
      for (int c = 0; c < TN; ++c) {
        const T gg = GA ? fg[r] : fg[c], uu = GA ? fu[r] : fu[c], vv = GA ? fv[c] : fv[r];
        if (FAST) {
          acc[r][c] = fma(gg, Sem::term(uu, vv, cst[r][c]), acc[r][c]);
        } else {
          const T w = Sem::term(uu, vv, cst[r][c]);
          acc[r][c] += gg != T(0) ? gg * w : T(0);
        }
      }
  }
}

// kslice_loop's loader for the backward: one slice of the reduction (G side and other side) through the registers ru,
// rg, rv into GradSmem. Its barriers also decide, block-wide, whether the staged slice allows the fast term loop: the
// constants of the whole tile (voted once, at the first barrier) and everything fetched for the slice, all finite.
template <bool SCALED, class Sem, class In, class Out, class I, int BM, int BN, int BK, int NT, int LG, int LO, bool GA,
          class Keep>
struct GradLoader : KSliceLoader {
  typedef typename Acc<In>::type T;
  enum { kSliceK = BK };
  GradSmem<T, BM, BN, BK, GA>& sm;
  const Keep& keep;
  const In *A, *Bm;
  const Out *O, *Gp;
  I m0, n0;
  T (&ru)[LG];
  T (&rg)[LG];
  T (&rv)[LO];
  bool constants_finite;    // this thread's constants
  bool tile_finite = false; // the whole tile's
  bool fetched_finite = true, fast = false;
  __device__ __forceinline__ GradLoader(GradSmem<T, BM, BN, BK, GA>& sm, const Keep& keep, const In* A, const In* Bm,
                                        const Out* O, const Out* Gp, I m0, I n0, T (&ru)[LG], T (&rg)[LG], T (&rv)[LO],
                                        bool constants_finite)
      : sm(sm), keep(keep), A(A), Bm(Bm), O(O), Gp(Gp), m0(m0), n0(n0), ru(ru), rg(rg), rv(rv),
        constants_finite(constants_finite) {}
  __device__ __forceinline__ void fetch(const GradParams& p, int, I t0) {
    fetched_finite = grad_fetch<SCALED, Sem, In, Out, I, BM, BN, BK, NT, LG, LO, GA>(p, keep, A, Bm, O, Gp, sm.up, m0,
                                                                                     n0, t0, ru, rg, rv);
  }
  __device__ __forceinline__ void land(int buf) { grad_store<T, BM, BN, BK, NT, LG, LO, GA>(sm, buf, ru, rg, rv); }
  // The barriers must run in every case: never inside a short-circuited condition.
  __device__ __forceinline__ void tile_barrier() { tile_finite = !__syncthreads_or(!constants_finite); }
  __device__ __forceinline__ void slice_barrier() {
    fast = !__syncthreads_or(!fetched_finite) && tile_finite;
    fetched_finite = true; // no slice fetched, nothing that is not finite
  }
};

// One pass over the reduction of a block's tile and batch, into acc (zeroed here): G as it is, or (SCALED) times its
// line's 2^-σ (sm.up, from grad_line_scales). Two instantiations: the usual one carries no multiply.
template <bool SCALED, class Sem, class In, class Out, class I, int BM, int BN, int BK, int TM, int TN, bool GA,
          class Keep, class T>
__device__ __forceinline__ void grad_tiled_pass(const GradParams& p, GradSmem<T, BM, BN, BK, GA>& sm, const Keep& keep,
                                                const In* A, const In* Bm, const Out* O, const Out* Gp, I m0, I n0,
                                                int r_base, int c_base, bool finite, const T (&cst)[TM][TN],
                                                T (&acc)[TM][TN]) {
  constexpr int kThreads = (BM / TM) * (BN / TN);
  constexpr int kG = GA ? BM : BN, kO = GA ? BN : BM;
  constexpr int kLoadG = (kG * BK + kThreads - 1) / kThreads, kLoadO = (kO * BK + kThreads - 1) / kThreads;
  const I T_len = GA ? (I)p.N : (I)p.M;
#pragma unroll
  for (int r = 0; r < TM; ++r)
#pragma unroll
    for (int c = 0; c < TN; ++c) acc[r][c] = T(0);
  T ru[kLoadG], rg[kLoadG], rv[kLoadO];
  GradLoader<SCALED, Sem, In, Out, I, BM, BN, BK, kThreads, kLoadG, kLoadO, GA, Keep> ld(sm, keep, A, Bm, O, Gp, m0, n0,
                                                                                         ru, rg, rv, finite);
  for (auto slice = kslice_loop<kFetchAfterUse, kBarrierEverySlice>(ld, p, I(0), T_len); slice.valid();
       slice.finish(p)) {
    slice.start(p);
    if (ld.fast)
      grad_slice<true, Sem, T, BM, BN, BK, TM, TN, GA>(sm, slice.buf, r_base, c_base, cst, acc);
    else
      grad_slice<false, Sem, T, BM, BN, BK, TM, TN, GA>(sm, slice.buf, r_base, c_base, cst, acc);
  }
}

template <class Sem, class In, class Out, class I, int BM, int BN, int BK, int TM, int TN, bool GA,
          class Keep = KeepAll>
__device__ __forceinline__ void grad_tiled_kernel(const GradParams p, const Keep& keep_all = Keep()) {
  typedef typename Acc<In>::type T;
  constexpr int kThreads = (BM / TM) * (BN / TN);
  __shared__ __align__(16) GradSmem<T, BM, BN, BK, GA> sm;
  const I R = GA ? (I)p.M : (I)p.K, C = GA ? (I)p.K : (I)p.N;
  const long long d_batch = GA ? p.a_batch : p.b_batch, d_row = GA ? p.a_row : p.b_row, d_col = GA ? p.a_col : p.b_col;
  const int r_base = (threadIdx.x / (BN / TN)) * TM, c_base = (threadIdx.x % (BN / TN)) * TN;
  const I m0 = (I)blockIdx.y * BM, n0 = (I)blockIdx.x * BN;
  for (I z = blockIdx.z; z < (I)p.B; z += gridDim.z) {
    const Keep keep = keep_all.batch(z);
    if (!keep.tile(m0)) continue; // uniform over the block
    const In* A = static_cast<const In*>(p.a) + z * (I)p.a_batch;
    const In* Bm = static_cast<const In*>(p.b) + z * (I)p.b_batch;
    const Out* O = Sem::kUsesOut ? static_cast<const Out*>(p.out) + z * (I)p.out_batch : nullptr;
    const Out* Gp = static_cast<const Out*>(p.grad_out) + z * (I)p.out_batch;
    T acc[TM][TN], cst[TM][TN];
    bool finite = true; // this thread's constants
#pragma unroll
    for (int r = 0; r < TM; ++r)
#pragma unroll
      for (int c = 0; c < TN; ++c) {
        const I rr = m0 + r_base + r, cc = n0 + c_base + c;
        cst[r][c] = T(0);
        if (Sem::kConstant && rr < R && cc < C)
          cst[r][c] =
              Sem::operand(to_acc(GA ? A[rr * (I)p.a_row + cc * (I)p.a_col] : Bm[rr * (I)p.b_row + cc * (I)p.b_col]));
        finite &= Sem::fast(cst[r][c]);
      }
    // The header's small G: G as it is, or scaled by lines. Uniform over the block.
    const bool scaled = Sem::kScaleG && grad_needs_scales<Out, I, BM, BN, BK, kThreads, GA>(sm, p, Gp, m0, n0);
    if (scaled) {
      grad_line_scales<Out, I, BM, BN, BK, kThreads, GA>(sm, p, Gp, m0, n0);
      grad_tiled_pass<true, Sem, In, Out, I, BM, BN, BK, TM, TN, GA>(p, sm, keep, A, Bm, O, Gp, m0, n0, r_base, c_base,
                                                                     finite, cst, acc);
    } else {
      grad_tiled_pass<false, Sem, In, Out, I, BM, BN, BK, TM, TN, GA>(p, sm, keep, A, Bm, O, Gp, m0, n0, r_base, c_base,
                                                                      finite, cst, acc);
    }
#pragma unroll
    for (int r = 0; r < TM; ++r)
#pragma unroll
      for (int c = 0; c < TN; ++c) {
        const I rr = m0 + r_base + r, cc = n0 + c_base + c;
        if (rr >= R || cc >= C) continue;
        In* grad = static_cast<In*>(p.grad) + z * (I)d_batch + rr * (I)d_row + cc * (I)d_col;
        // Scaled: back by 2^σ (added where the scaled sum is exact, then one rounding).
        const int sigma = scaled ? sm.sigma[GA ? r_base + r : c_base + c] : 0;
        const T value = scaled ? grad_pow2(acc[r][c], sigma) : acc[r][c];
        if (p.workspace) // broadcast gradient: sum the batches
          atomicAdd(static_cast<T*>(p.workspace) + rr * C + cc, value);
        else if (Keep::kAdd)
          *grad = from_acc<In>(scaled ? grad_pow2(grad_pow2(to_acc(*grad), -sigma) + acc[r][c], sigma)
                                      : to_acc(*grad) + acc[r][c]);
        else
          *grad = from_acc<In>(value);
      }
    __syncthreads(); // sm.sigma and sm.unproven are rewritten for the next batch
  }
}

} // namespace jb
