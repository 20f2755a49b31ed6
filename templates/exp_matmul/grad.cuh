// Strategy "exp_matmul" for a log gradient pass: the gradient through exponentiated operands and a dense product on
// tensor cores, exact by a guard and the direct backward. The method, the offsets and the guard's bounds are derived
// in exp_matmul/grad_bounds.cuh; both passes run in its canonical form (grad_b is grad_a of the transposed problem).
// Launches, in order:
//   _stats  row maxima r of x, column maxima c of y with the factors V, each batch's largest finite |G|
//           (_stats_second in place of it when the other pass of the call ran first: V only)
//   _h      H = G·2^(x_ij − E − F) per output, 0 where the guard gives the output up, and the given-up mask
//   main    the product Σ_j H·V on tensor cores (em_mma_tile; on Hopper the wgmma pipeline of
//           exp_matmul/grad_wgmma.cuh), times 2^((x − r)' + E), into the gradient
//   _repair the direct backward over the given-up outputs only, added to the gradient
//   _store  (a gradient broadcast over the batch) the summed accumulator into the gradient
#pragma once

#include "grad/backward.cuh"
#include "exp_matmul/grad_bounds.cuh"
#include "exp_matmul/grad_view.cuh"
#include "exp_matmul/grad_stats.cuh"
#include "exp_matmul/product.cuh"

namespace jb {

// One tile of the H launch as its threads see it: where its G, out and line maxima start, how much of it is real,
// and the scales of its batch.
template <class Out, class T, class I> struct EgHTile {
  const Out *g, *o;
  const T *r, *c;
  I rows, cols, out_row, out_col; // rows, cols: of the result from the tile's first on
  int gamma;
  bool by_factor;
  T g_factor, e_f, g_lo;
};
// The tile's H (0 where given up) and given-up flags into shared memory. ALONG_J: lanes along a row of the tile and
// warps 8 rows apart (out's j the denser direction); else the transpose. A thread's kPer elements are all loaded
// before any is used.
template <bool ALONG_J, int ROWS, class Out, class T, class I>
__device__ __forceinline__ void eg_h_fill(const EgHTile<Out, T, I>& t, const EgBounds& b, T (&tile)[ROWS][33],
                                          unsigned char (&given_up)[ROWS][33]) {
  typedef Num<T> R;
  constexpr int kPer = ROWS * 32 / 256, kGroups = ROWS / 32;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  T gv[kPer], ov[kPer], rv[kPer], cv[kPer];
#pragma unroll
  for (int u = 0; u < kPer; ++u) {
    const int ti = ALONG_J ? warp + 8 * u : lane + 32 * (u % kGroups), tj = ALONG_J ? lane : warp + 8 * (u / kGroups);
    const I at = (I)ti * t.out_row + (I)tj * t.out_col;
    const bool in = (I)ti < t.rows && (I)tj < t.cols;
    gv[u] = in ? to_acc(t.g[at]) : (T)0;
    ov[u] = in ? to_acc(t.o[at]) : R::neg_inf();
    rv[u] = in ? t.r[ti] : (T)0;
    cv[u] = in ? t.c[tj] : (T)0;
  }
#pragma unroll
  for (int u = 0; u < kPer; ++u) {
    const int ti = ALONG_J ? warp + 8 * u : lane + 32 * (u % kGroups), tj = ALONG_J ? lane : warp + 8 * (u / kGroups);
    const T g = gv[u], o = ov[u];
    T h = (T)0;
    bool up = false;
    if (!(g == (T)0 || o == R::neg_inf())) { // else exactly no contribution (also outside the result)
      const T r = rv[u], c = cv[u];
      const T x = ((r + c) - o) * R::log2e(); // NaN or ±inf when any of them is not finite (or r + c overflows)
      // One test, not a branch each (&, not &&).
      const bool safe = (fabs(g) < R::inf()) & (fabs(g) >= t.g_lo) & (x >= (T)b.x_min) & (x <= (T)b.x_max) &
                        (fabs(r) < R::inf()) & (fabs(c) < R::inf());
      if (safe)
        h = (t.by_factor ? g * t.g_factor : ldexp(g, -t.gamma)) * R::exp2(x - t.e_f);
      else
        up = true;
    }
    tile[ti][tj] = h;
    given_up[ti][tj] = up;
  }
}

// Launch 2, 256 threads a block. Tiles of kEgHRows × 32 outputs (canonical rows i, columns j), read in the memory
// order of out and G (eg_h_fill) and written in the order of H through shared memory. Per output: H, or 0 and a bit
// in the mask when the guard gives it up (and its row's flag). The launch issues more than it moves, so what is the
// same for a tile is formed once for 8 outputs a thread, its element's places are constants of the layout's code,
// G scales by a power of two, and a warp writes whole lines of H.
template <class In, class Out, class I, bool GA, int FORM>
__device__ __forceinline__ void eg_h_kernel(const GradParams p0) {
  typedef typename Acc<In>::type T;
  constexpr int kRows = kEgHRows;
  const GradParams p = eg_canonical<GA>(p0);
  const EgView<T> e = eg_view<T>(p, GA);
  __shared__ T tile[kRows][33];
  __shared__ unsigned char given_up[kRows][33];
  const Out* G = static_cast<const Out*>(p.grad_out);
  const Out* O = static_cast<const Out*>(p.out);
  const I Mx = (I)e.d.Mx, Nx = (I)e.d.Nx, Mxp = (I)e.w.Mxp, Nxp = (I)e.w.Nxp;
  const I tiles_i = Mxp / kRows, tiles_j = Nxp / 32, tiles = (I)eg_h_tiles(p.B, e.w);
  const bool along_j = p.out_col <= p.out_row; // lanes along the denser direction of out
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (I t = blockIdx.x; t < tiles; t += gridDim.x) {
    const I z = t / (tiles_i * tiles_j), i0 = t / tiles_j % tiles_i * kRows, j0 = t % tiles_j * 32;
    EgHTile<Out, T, I> h;
    const I first = z * (I)p.out_batch + i0 * (I)p.out_row + j0 * (I)p.out_col;
    h.g = G + first, h.o = O + first;
    h.r = e.r + (e.d.x_batches == 1 ? 0 : z) * Mx + i0;
    h.c = e.c + (e.d.y_batches == 1 ? 0 : z) * Nx + j0;
    h.rows = Mx - i0, h.cols = Nx - j0, h.out_row = (I)p.out_row, h.out_col = (I)p.out_col;
    // H = (G·2^-γ)·2^(x − E − F + γ): G scaled first, exactly, so that neither factor overflows however small G is.
    // 2^-γ is a T wherever γ ≥ −127 (only |G| < 2^-127 has γ below): a product with it rounds as ldexp does.
    h.gamma = eg_batch_gamma(e, z);
    const int E = eg_e(e.b, h.gamma);
    h.e_f = (T)(E + e.b.f - h.gamma), h.g_lo = Num<T>::pow2(eg_gamma_lo(e.b, E));
    h.by_factor = sizeof(T) == 8 || h.gamma >= -127;
    h.g_factor = h.by_factor ? Num<T>::pow2(-h.gamma) : (T)0;
    if (along_j)
      eg_h_fill<true>(h, e.b, tile, given_up);
    else
      eg_h_fill<false>(h, e.b, tile, given_up);
    __syncthreads();
#pragma unroll
    for (int u = 0; u < kRows / 8; ++u) { // warp w writes rows w, w + 8, ...: one line of H each
      const int ti = warp + 8 * u;
      const I i = i0 + ti;
      em_put<FORM>(e.h, z * Mxp + i, j0 + lane, Nxp, tile[ti][lane]);
      const unsigned bits = __ballot_sync(0xffffffffu, given_up[ti][lane] != 0);
      if (lane == 0 && i < Mx) {
        e.mask[(z * Mx + i) * (I)e.w.words + j0 / 32] = bits;
        if (bits) e.rowflag[z * Mx + i] = 1u;
      }
    }
    __syncthreads(); // the tile is rewritten by the next one
  }
}

// What one gradient element's scale reads: x[i, k] and r_i. A block of elements loads these first and then finishes
// them (eg_emit): the gradient's stores may alias x as far as the compiler knows, so it would not move a later
// element's load above an earlier element's store, and every element would wait out its own load.
struct EgScaleIn {
  float x, r;
};
template <class In, class I>
__device__ __forceinline__ float eg_x(const GradParams& p, const EgView<float>& e, I z, I i, I k) {
  const I xb = e.d.x_batches == 1 ? 0 : z;
  return to_acc(static_cast<const In*>(p.a)[xb * (I)p.a_batch + i * (I)p.a_row + k * (I)p.a_col]);
}
template <class I> __device__ __forceinline__ float eg_r(const EgView<float>& e, I z, I i) {
  return e.r[(e.d.x_batches == 1 ? 0 : z) * (I)e.d.Mx + i];
}
template <class In, class I>
__device__ __forceinline__ EgScaleIn eg_scale_in(const GradParams& p, const EgView<float>& e, I z, I i, I k) {
  return {eg_x<In, I>(p, e, z, i, k), eg_r<I>(e, z, i)};
}

// One gradient element from its product s = Σ_j H·V (row i, column k of the canonical gradient): s times
// 2^((x − r)' + E), into the gradient (or, broadcast over the batch, added to the accumulator). A given-up output
// contributed 0 to s.
template <class In, class I>
__device__ __forceinline__ void eg_emit(const GradParams& p, const EgView<float>& e, I z, I i, I k, float s,
                                        float e_batch, EgScaleIn in) {
  typedef float T;
  typedef Num<T> R;
  T value = (T)0;
  if (s != (T)0) { // else the row's r may be non-finite: its outputs were all given up
    const T t = (in.x - in.r) * Num<T>::log2e() + e_batch; // −inf (or far below any result) where x is −inf
    value = s * R::exp2(t);
    // A normal result is as exact as it gets. Below the smallest normal (ex2 flushes 2^t there, and the product
    // would round away digits) or out of range: f·2^(t + e_s) with s = f·2^e_s and t + e_s = n + φ, 2^φ by ex2
    // and 2^n by ldexp, so that a result below the smallest normal keeps its digits.
    if (!(fabsf(value) >= __int_as_float(0x00800000) && fabsf(value) < R::inf())) {
      int pe;
      const T f = frexpf(s, &pe), u = t + (T)pe;
      value = (T)0;
      if (u > (T)-300) {
        const T n = floorf(u);
        value = ldexpf(f * R::exp2(u - n), (int)n);
      }
    }
  }
  if (e.d.broadcast)
    atomicAdd(e.acc + i * (I)e.d.Kx + k, value);
  else
    static_cast<In*>(p.grad)[z * (I)p.a_batch + i * (I)p.a_row + k * (I)p.a_col] = from_acc<In>(value);
}

// Launch 3 (mma.sync: math tf32x3, tf32): per block tile of the result, Σ_j H·V (em_mma_tile), then eg_emit.
template <class In, class Out, class I, int BM, int BN, int BK, int TM, int TN, bool SPLIT, bool GA>
__device__ __forceinline__ void eg_product_kernel(const GradParams p0) {
  typedef float T;
  constexpr int WM = 8 * TM, WN = 4 * TN, MT = WM / 16, NT = WN / 8;
  constexpr int kThreads = (BM / WM) * (BN / WN) * 32;
  static_assert(TM % 2 == 0 && TN % 4 == 0 && BM % WM == 0 && BN % WN == 0 && BK % 8 == 0, "mma tile geometry");
  __shared__ __align__(16) EmMmaSmem<float, BM, BN, BK> sm;
  const GradParams p = eg_canonical<GA>(p0);
  const EgView<T> e = eg_view<T>(p, GA);
  const I Mx = (I)e.d.Mx, Kx = (I)e.d.Kx, Nxp = (I)e.w.Nxp;
  const int lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
  const EmWarpTile w = em_warp_tile<BN, TM, TN>();
  const I m0 = (I)blockIdx.y * BM, n0 = (I)blockIdx.x * BN;
  for (I z = blockIdx.z; z < (I)p.B; z += gridDim.z) {
    const I yb = e.d.y_batches == 1 ? 0 : z;
    const T* eh = e.h + z * (I)e.w.Mxp * Nxp;
    const T* ev = e.v + yb * (I)e.w.Kxp * Nxp;
    float acc[MT][NT][4];
    em_mma_tile<BM, BN, BK, TM, TN, SPLIT, kThreads>(sm, p, eh, ev, Nxp, m0, n0, w, NoTileStaging(), acc);
    const T e_batch = (T)eg_e(e.b, eg_batch_gamma(e, z));
#pragma unroll
    for (int m = 0; m < MT; ++m) { // 16 rows at a time: the loads of all of them, then each (eg_scale_in); a whole
                                   // thread tile's at once spills at t8×8
      EgScaleIn in[NT][4];
#pragma unroll
      for (int pass = 0; pass < 2; ++pass)
#pragma unroll
        for (int n = 0; n < NT; ++n)
#pragma unroll
          for (int el = 0; el < 4; ++el) {
            const I i = m0 + w.wm0 + m * 16 + g + 8 * (el / 2), k = n0 + w.wn0 + n * 8 + 2 * q + (el % 2);
            if (i >= Mx || k >= Kx) continue;
            if (pass == 0)
              in[n][el] = eg_scale_in<In, I>(p, e, z, i, k);
            else
              eg_emit<In, I>(p, e, z, i, k, acc[m][n][el], e_batch, in[n][el]);
          }
    }
  }
}

// The direct backward's outputs: those the guard gave up (their mask bits), in rows whose flag is set.
template <class I, int BM> struct EgKeep {
  enum { kAdd = true };
  const unsigned *mask, *rowflag;
  I Mx, words;
  __device__ __forceinline__ EgKeep batch(I z) const {
    EgKeep k = *this;
    k.mask += z * Mx * words;
    k.rowflag += z * Mx;
    return k;
  }
  __device__ __forceinline__ bool tile(I m0) const { // the same in every warp: a lane a row, one vote
    bool any = false;
    for (I i = m0 + (I)(threadIdx.x % 32); i < m0 + BM && i < Mx; i += 32) any |= rowflag[i] != 0u;
    return __any_sync(0xffffffffu, any);
  }
  __device__ __forceinline__ bool operator()(I i, I j) const { return (mask[i * words + j / 32] >> (j % 32)) & 1u; }
};

// Launch 4: the given-up outputs' exact contributions (the direct tiled backward, reading only them), added.
template <class In, class Out, class I, int BM, int BN, int BK, int TM, int TN, bool GA>
__device__ __forceinline__ void eg_repair_kernel(const GradParams p0) {
  typedef typename Acc<In>::type T;
  GradParams q = eg_canonical<GA>(p0);
  const EgView<T> e = eg_view<T>(q, GA);
  EgKeep<I, BM> keep;
  keep.mask = e.mask, keep.rowflag = e.rowflag, keep.Mx = (I)e.d.Mx, keep.words = (I)e.w.words;
  q.workspace = e.d.broadcast ? static_cast<void*>(e.acc) : nullptr;
  grad_tiled_kernel<LogGrad, In, Out, I, BM, BN, BK, TM, TN, true>(q, keep);
}

// Launch 5 (a gradient broadcast over the batch): the accumulator into the gradient.
template <class In, class I, bool GA> __device__ __forceinline__ void eg_store_kernel(const GradParams p0) {
  typedef typename Acc<In>::type T;
  const GradParams p = eg_canonical<GA>(p0);
  const EgView<T> e = eg_view<T>(p, GA);
  const I Mx = (I)e.d.Mx, Kx = (I)e.d.Kx;
  for (I o = (I)blockIdx.x * blockDim.x + threadIdx.x; o < Mx * Kx; o += (I)gridDim.x * blockDim.x)
    static_cast<In*>(p.grad)[o / Kx * (I)p.a_row + o % Kx * (I)p.a_col] = from_acc<In>(e.acc[o]);
}

} // namespace jb
