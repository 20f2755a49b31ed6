// The log semiring on the tiled skeleton, at the exp unit's pace: per term one add, one ex2.approx, one add.
// Operands are shifted in shared memory once per slice, in natural units (so rows and columns that sit at ±1e4 lose
// nothing to rounding), and scaled to log2 units there.
//
// Exact by construction, not by luck of the data. Each output's terms are shifted by a separable bound
// m[i,j] = A[i] + B[j], where A[i] (B[j]) is the running max of row i of a (column j of b) over the K slices seen
// so far; so every shifted term 2^((a − A)·log2e + (b − B)·log2e) ≤ 1 and the sum s never overflows. When a new
// slice raises A or B, s is rescaled once per row/column (not per term). The bound can be loose (row max and
// column max at different k), so terms may underflow; the guard below catches every such output:
//   ex2.approx.ftz drops terms under 2^-126, so the mass lost is at most K·2^-126. If s ≥ 2^-60 that is at most
//   2^-35·s for any K < 2^31, far below f32 rounding: the output is exact to f32. Otherwise the output is
//   recomputed exactly (the linear strategy's online loop over K, in place, by the owning thread).
// Per slice each row/column also records which k hold a finite value, so an output whose terms are all −inf
// (banded −inf masks) is recognised without recomputation. Rows or columns holding +inf are recomputed exactly;
// NaN anywhere in a row or column makes its outputs NaN, as the contract says.
#pragma once

#include "tiled/tiled.cuh"

namespace jb {

// The exact recomputation of one output, out of line: it is rare, and inlined per output it would bloat the
// kernel and its register allocation.
template <class In, class I>
__device__ __noinline__ float repair_log(const BmmParams& p, const In* A, const In* B, I i, I j, I k_begin, I k_end) {
  typename LogSemiring<float>::State st = LogSemiring<float>::init();
  for (I k = k_begin; k < k_end; ++k)
    LogSemiring<float>::push(st,
                             to_acc(A[i * (I)p.a_row + k * (I)p.a_col]) + to_acc(B[k * (I)p.b_row + j * (I)p.b_col]));
  return LogSemiring<float>::finalize(st);
}

// Per-slice statistics of one row of a (or column of b), computed by one thread for the whole block: the
// running max (NaN-propagating), the factor that rescales sums made under the previous max, the shift to use
// (0 while the max is not finite), and which k of the slice hold a finite value.
struct LogLineStats {
  float run, factor, shift;
  unsigned finite;
};

template <int BK, int STRIDE> __device__ __forceinline__ LogLineStats log_line_stats(float* line, float previous) {
  const float kNegInf = Num<float>::neg_inf(), kPosInf = Num<float>::inf();
  LogLineStats st;
  st.run = previous;
  st.finite = 0u;
#pragma unroll
  for (int k = 0; k < BK; ++k) {
    const float v = line[k * STRIDE];
    st.run = max_nan(st.run, v);
    st.finite |= (v != kNegInf ? 1u : 0u) << k;
  }
  st.factor = st.run == previous ? 1.f : ex2_approx((previous - st.run) * Num<float>::log2e());
  st.shift = fabsf(st.run) < kPosInf ? st.run : 0.f;
  // Shift the slice in place, then scale it to log2 units: the terms loop reads ready exponents.
#pragma unroll
  for (int k = 0; k < BK; ++k) line[k * STRIDE] = (line[k * STRIDE] - st.shift) * Num<float>::log2e();
  return st;
}

// A finite operand of 2^126 (about 8.5e37) or more becomes +inf as it enters shared memory, which sends its row or
// column to exact recomputation (never a wrong value): below it, a sum of two operands scaled to log2 units cannot
// overflow.
__device__ __forceinline__ float to_shiftable(float x) {
  const float kPosInf = Num<float>::inf();
  return fabsf(x) < 0x1p126f ? x : (fabsf(x) < kPosInf ? kPosInf : x);
}

// The tiled loader, huge finite operands made +inf as the slice lands (to_shiftable); the log kernels' loader.
template <class G, class In, class I> struct ShiftableTileLoader : TileLoader<G, In, I> {
  using TileLoader<G, In, I>::TileLoader;
  __device__ __forceinline__ void land(int buf) {
    const auto shiftable = [](float x) { return to_shiftable(x); };
    G::template store_as<In>(this->sm, buf, this->ra, this->rb, shiftable, shiftable);
  }
};

template <class In, class Out, class I, int BM, int BN, int BK, int TM, int TN>
__device__ __forceinline__ void tiled_log_kernel(const BmmParams p) {
  static_assert(BK <= 32, "finite-k masks are 32 bits");
  typedef float T;
  typedef Tile<T, BM, BN, BK, TM, TN> G;
  __shared__ __align__(16) typename G::Smem sm;
  __shared__ LogLineStats rows[BM], cols[BN];
  const T kLn2 = Num<T>::ln2(), kNegInf = Num<T>::neg_inf(), kPosInf = Num<T>::inf();
  const In* A0 = static_cast<const In*>(p.a);
  const In* B0 = static_cast<const In*>(p.b);
  const int r_base = (threadIdx.x / (BN / TN)) * TM, c_base = (threadIdx.x % (BN / TN)) * TN;
  const I chunks = p.k_chunk > 0 ? ((I)p.K + (I)p.k_chunk - 1) / (I)p.k_chunk : 1;
  for (I z = blockIdx.z; z < (I)p.B * chunks; z += gridDim.z) {
    const TileCoords<I> t = tile_coords<I, BM, BN>(p, z);
    const In* A = A0 + t.batch * (I)p.a_batch;
    const In* B = B0 + t.batch * (I)p.b_batch;
    T s[TM][TN];
    unsigned any[(TM * TN + 31) / 32];
#pragma unroll
    for (int r = 0; r < TM; ++r)
#pragma unroll
      for (int c = 0; c < TN; ++c) s[r][c] = 0.f;
#pragma unroll
    for (int w = 0; w < (TM * TN + 31) / 32; ++w) any[w] = 0u;

    // After the first barrier: the previous tile's epilogue may still read rows[] / cols[].
    const auto reset_lines = [&](const BmmParams&) {
      for (int l = threadIdx.x; l < BM + BN; l += G::kThreads) (l < BM ? rows[l] : cols[l - BM]).run = kNegInf;
    };
    typedef TileRegs<G, In> Regs;
    typename Regs::Word ra[Regs::kA], rb[Regs::kB];
    ShiftableTileLoader<G, In, I> ld(sm, A, B, t, kNegInf, kNegInf, ra, rb);
    // The next slice is fetched after the terms, so its registers are not live across them (other blocks on the
    // SM hide the load latency). One barrier a slice: the next slice's pass 1 rewrites rows[] / cols[], which
    // this one read after its middle barrier.
    auto slice =
        kslice_loop<kFetchAfterUse, kBarrierEverySlice>(ld, p, t.k_begin, t.k_end, NoTileStaging(), reset_lines);
    for (; slice.valid(); slice.finish(p)) {
      slice.start(p);
      // Pass 1, one thread per row or column: running maxima, rescale factors, shifts and finite masks.
      for (int l = threadIdx.x; l < BM + BN; l += G::kThreads) {
        if (l < BM)
          rows[l] = log_line_stats<BK, G::kPadM>(&sm.a[slice.buf][0][l], rows[l].run);
        else
          cols[l - BM] = log_line_stats<BK, G::kPadN>(&sm.b[slice.buf][0][l - BM], cols[l - BM].run);
      }
      __syncthreads();
      T fr[TM], fc[TN];
      unsigned ma[TM], mb[TN];
      bool rose = false;
#pragma unroll
      for (int r = 0; r < TM; ++r) {
        const LogLineStats st = rows[r_base + r];
        fr[r] = st.factor, ma[r] = st.finite;
        rose |= st.factor != 1.f;
      }
#pragma unroll
      for (int c = 0; c < TN; ++c) {
        const LogLineStats st = cols[c_base + c];
        fc[c] = st.factor, mb[c] = st.finite;
        rose |= st.factor != 1.f;
      }
#pragma unroll
      for (int r = 0; r < TM; ++r)
#pragma unroll
        for (int c = 0; c < TN; ++c) any[(r * TN + c) / 32] |= ((ma[r] & mb[c]) != 0u ? 1u : 0u) << ((r * TN + c) % 32);
      // Rescale sums whose bound rose (rare after the first slices; skipped warp-wide).
      if (__any_sync(0xffffffffu, rose)) {
#pragma unroll
        for (int r = 0; r < TM; ++r)
#pragma unroll
          for (int c = 0; c < TN; ++c) s[r][c] *= fr[r] * fc[c];
      }
      // Pass 2: the terms, 2^(a' + b') each, a' and b' already scaled and shifted in shared memory.
#pragma unroll 1
      // Written out rather than through G::for_each_term: the same PTX with its registers numbered otherwise, which
      // ptxas schedules differently in this, the default kernel.
      for (int k = 0; k < BK; ++k) {
        T fa[TM], fb[TN];
        G::row_frag(sm, slice.buf, k, fa);
        G::col_frag(sm, slice.buf, k, fb);
#pragma unroll
        for (int r = 0; r < TM; ++r)
#pragma unroll
          for (int c = 0; c < TN; ++c) s[r][c] += ex2_approx(fa[r] + fb[c]);
      }
    }
#pragma unroll
    for (int r = 0; r < TM; ++r)
#pragma unroll
      for (int c = 0; c < TN; ++c) {
        const I i = t.m0 + r_base + r, j = t.n0 + c_base + c;
        if (i >= (I)p.M || j >= (I)p.N) continue;
        const T amax = rows[r_base + r].run, bmax = cols[c_base + c].run, sum = s[r][c];
        const bool has_finite = (any[(r * TN + c) / 32] >> ((r * TN + c) % 32)) & 1u;
        T value;
        if (amax != amax || bmax != bmax) {
          value = Num<T>::nan(); // a NaN input in the row or column
        } else if (amax == kPosInf || bmax == kPosInf || (has_finite && !(sum >= 0x1p-60f))) {
          value = repair_log<In, I>(p, A, B, i, j, t.k_begin, t.k_end); // +inf present, or the guard fired
        } else if (!has_finite) {
          value = kNegInf; // every term −inf
        } else {
          value = (amax + bmax) + log2f(sum) * kLn2; // the shift in natural units, the sum in log2 units
        }
        emit<T, Out, I>(p, t, i, j, value, -1);
      }
  }
}

} // namespace jb
