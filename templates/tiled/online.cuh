// Strategy "tiled_online": the log semiring on the tiled skeleton, exact on any data in one pass. Each output keeps
// its sum online, as flash attention keeps a row's: a scale m (log2 units) and a sum s of 2^(t − m) over the terms t
// seen so far, with m ≤ log2 of the true sum (s ≥ 1 once a finite term is in). Unlike tiled_log's separable bound
// (row max + column max), m follows the output's own terms, so spread-out data need no recomputation.
//
// Per K slice, a thread's outputs take the slice's terms under their current scale: sl = Σ 2^(t·log2e − m), one add
// (t = a + b in natural units: rows and columns that sit at ±1e4 cancel exactly), one multiply, one subtract, one
// ex2.approx and one add a term. The product is rounded before the subtraction (not fused): the slice's largest term
// then gives exactly 2^0 under its own scale, however large t is (a fused 1e37·log2e − m is off by 2^99).
//   - sl < 2^120: no term overflowed (each is below 2^120), and a term that ex2.approx.ftz flushed is below
//     2^-126 · 2^m ≤ 2^-126 of the output's sum: s += sl is the slice's exact contribution to f32 accuracy.
//   - otherwise (a term above the scale by 2^120 or more, or m = −inf: no finite term before this slice) the thread
//     redoes that output's slice from shared memory under the slice's own maximum (online_exact_slice), as the
//     two-pass form would. On randn·50 about 1% of an output's slices take this path, on randn none after the first.
// After each slice s is brought back to [1, 2) by an exact power of two (online_normalize), so the next slice's
// 2^120 of headroom always holds. The result is ln 2 · (m + log2 s).
//
// Special values, as the contract says: NaN in a row of a or column of b makes the output NaN; +inf present (or a
// finite operand of 2^126 or more, made +inf by the loader) sends the output to the exact recomputation of tiled_log
// (repair_log); no finite term gives −inf. They are found from
// each line's running maximum (NaN-propagating), gathered with the slice maxima by one thread per line.
#pragma once

#include "tiled/log.cuh"

namespace jb {

// One output's slice exactly: its terms' maximum first (NaN ignored: a NaN input decides the output elsewhere),
// then the sum under max(m, that maximum) (log2 units; the operands are in natural units). a and b step through the
// slice's k with strides PA and PB. Returns the new (m, s). Inlined: out of line, its call would make ptxas keep the
// caller's registers to the calling convention.
template <int BK, int PA, int PB>
__device__ __forceinline__ float2 online_exact_slice(const float* a, const float* b, float m, float s) {
  const float kLog2e = Num<float>::log2e();
  float top = Num<float>::neg_inf();
  for (int k = 0; k < BK; ++k) top = fmaxf(top, a[k * PA] + b[k * PB]);
  const float shift = fmaxf(m, __fmul_rn(top, kLog2e));
  if (shift == Num<float>::neg_inf()) return make_float2(m, s); // no finite term in the slice
  if (shift != m) s *= ex2_approx(m - shift);                   // m = −inf: s is 0 and stays 0
  for (int k = 0; k < BK; ++k) s += ex2_approx(__fmul_rn(a[k * PA] + b[k * PB], kLog2e) - shift);
  return make_float2(shift, s);
}

// s ≥ 2 → s in [1, 2), its power of two moved into m (exact: only the exponent changes). s = 0 (no finite term yet),
// s < 2, inf and NaN stay as they are.
__device__ __forceinline__ void online_normalize(float& m, float& s) {
  const int bits = __float_as_int(s);
  const int e = (bits >> 23) - 127;
  if (e > 0 && e < 128) {
    s = __int_as_float(bits - (e << 23));
    m += (float)e;
  }
}

template <class In, class Out, class I, int BM, int BN, int BK, int TM, int TN>
__device__ __forceinline__ void tiled_online_kernel(const BmmParams p) {
  typedef float T;
  typedef Tile<T, BM, BN, BK, TM, TN> G;
  __shared__ __align__(16) typename G::Smem sm;
  // Per line (BM rows of a, then BN columns of b): this slice's maximum, and the running maximum over the slices.
  __shared__ float slice_max[BM + BN], run_max[BM + BN];
  const T kLn2 = Num<T>::ln2(), kLog2e = Num<T>::log2e(), kNegInf = Num<T>::neg_inf(), kPosInf = Num<T>::inf();
  const T kHeadroom = 0x1p120f; // a slice's sum under the output's scale stays below this, or the slice is redone
  const In* A0 = static_cast<const In*>(p.a);
  const In* B0 = static_cast<const In*>(p.b);
  const int r_base = (threadIdx.x / (BN / TN)) * TM, c_base = (threadIdx.x % (BN / TN)) * TN;
  const I chunks = p.k_chunk > 0 ? ((I)p.K + (I)p.k_chunk - 1) / (I)p.k_chunk : 1;
  for (I z = blockIdx.z; z < (I)p.B * chunks; z += gridDim.z) {
    const TileCoords<I> t = tile_coords<I, BM, BN>(p, z);
    const In* A = A0 + t.batch * (I)p.a_batch;
    const In* B = B0 + t.batch * (I)p.b_batch;
    T s[TM][TN], m[TM][TN];
#pragma unroll
    for (int r = 0; r < TM; ++r)
#pragma unroll
      for (int c = 0; c < TN; ++c) s[r][c] = 0.f, m[r][c] = kNegInf;

    // After the first barrier: the previous tile's epilogue may still read run_max[].
    const auto reset_lines = [&](const BmmParams&) {
      for (int l = threadIdx.x; l < BM + BN; l += G::kThreads) run_max[l] = kNegInf;
    };
    typedef TileRegs<G, In> Regs;
    typename Regs::Word ra[Regs::kA], rb[Regs::kB];
    ShiftableTileLoader<G, In, I> ld(sm, A, B, t, kNegInf, kNegInf, ra, rb);
    auto slice =
        kslice_loop<kFetchAfterUse, kBarrierEverySlice>(ld, p, t.k_begin, t.k_end, NoTileStaging(), reset_lines);
    for (; slice.valid(); slice.finish(p)) {
      slice.start(p);
      // One thread per line: the slice's maximum and the running one (NaN and +inf decide the epilogue).
      for (int l = threadIdx.x; l < BM + BN; l += G::kThreads) {
        const float* line = l < BM ? &sm.a[slice.buf][0][l] : &sm.b[slice.buf][0][l - BM];
        const int stride = l < BM ? G::kPadM : G::kPadN;
        float top = kNegInf;
#pragma unroll
        for (int k = 0; k < BK; ++k) top = max_nan(top, line[k * stride]);
        slice_max[l] = top;
        run_max[l] = max_nan(run_max[l], top);
      }
      __syncthreads();
      // The slice's terms under each output's scale.
      T sl[TM][TN];
#pragma unroll
      for (int r = 0; r < TM; ++r)
#pragma unroll
        for (int c = 0; c < TN; ++c) sl[r][c] = 0.f;
#pragma unroll 1
      for (int k = 0; k < BK; ++k)
        G::for_each_term(sm, slice.buf, k, [&](int r, int c, T a, T b) {
          sl[r][c] += ex2_approx(__fmul_rn(a + b, kLog2e) - m[r][c]);
        });
      // Taken as they are, or the slice redone exactly (see the top of the file); then s back to [1, 2).
#pragma unroll
      for (int r = 0; r < TM; ++r)
#pragma unroll
        for (int c = 0; c < TN; ++c) {
          if (sl[r][c] < kHeadroom) {
            s[r][c] += sl[r][c];
          } else if (m[r][c] != kNegInf || slice_max[r_base + r] + slice_max[BM + c_base + c] != kNegInf) {
            const float2 x = online_exact_slice<BK, G::kPadM, G::kPadN>(
                &sm.a[slice.buf][0][r_base + r], &sm.b[slice.buf][0][c_base + c], m[r][c], s[r][c]);
            m[r][c] = x.x, s[r][c] = x.y;
          }
          online_normalize(m[r][c], s[r][c]);
        }
    }
#pragma unroll
    for (int r = 0; r < TM; ++r)
#pragma unroll
      for (int c = 0; c < TN; ++c) {
        const I i = t.m0 + r_base + r, j = t.n0 + c_base + c;
        if (i >= (I)p.M || j >= (I)p.N) continue;
        const T amax = run_max[r_base + r], bmax = run_max[BM + c_base + c];
        T value;
        if (amax != amax || bmax != bmax) {
          value = Num<T>::nan(); // a NaN input in the row or column
        } else if (amax == kPosInf || bmax == kPosInf) {
          value = repair_log<In, I>(p, A, B, i, j, t.k_begin, t.k_end); // +inf present: the exact online loop
        } else if (m[r][c] == kNegInf) {
          value = kNegInf; // no finite term (or K = 0)
        } else {
          value = (m[r][c] + log2f(s[r][c])) * kLn2; // back from log2 units
        }
        emit<T, Out, I>(p, t, i, j, value, -1);
      }
  }
}

} // namespace jb
