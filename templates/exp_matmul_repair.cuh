// exp_matmul's third pass (the overview is in exp_matmul.cuh): the outputs the guard could not vouch for,
// recomputed exactly.
#pragma once

namespace jb {

// Pass 3: the exact two-pass kernel on the tiles the guard flagged (BmmParams.repair_flags). Per output, a first
// sweep over K finds the largest term t = a + b (natural units, so no finite input overflows a scaling); a second
// sums 2^((t − max)·log2 e), every term ≤ 1 and the largest exactly 1, so nothing that matters can underflow.
// NaN terms give NaN, a +inf max gives +inf, an all −inf output −inf: the reference's contract.
template <class In, class Out, class I, int BM, int BN, int BK, int TM, int TN>
__device__ __forceinline__ void em_repair_kernel(const BmmParams p) {
  typedef typename Acc<In>::type T;
  typedef EmReal<T> R;
  typedef Tile<T, BM, BN, BK, TM, TN, sizeof(T) == 8 ? 0 : 16> G; // f64 element by element: chunks spill 16–32 bytes
  __shared__ __align__(16) typename G::Smem sm;
  const In* A0 = static_cast<const In*>(p.a);
  const In* B0 = static_cast<const In*>(p.b);
  const T kNegInf = Num<T>::neg_inf(), kLog2e = Num<T>::log2e(), kLn2 = Num<T>::ln2();
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
      // Each sweep is a pass of its own: the previous sweep (or tile) may still read shared memory at its start.
      T ra[G::kLoadA], rb[G::kLoadB];
      TileLoader<G, In, I> ld(sm, A, B, t, kNegInf, kNegInf, ra, rb);
      for (auto slice = kslice_loop<kFetchBeforeUse, kBarrierEverySlice>(ld, p, t.k_begin, t.k_end); slice.valid();
           slice.finish(p)) {
        slice.start(p);
#pragma unroll 4
        for (int k = 0; k < BK; ++k) {
          T fa[TM], fb[TN];
          G::row_frag(sm, slice.buf, k, fa);
          G::col_frag(sm, slice.buf, k, fb);
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
      }
    }
    const I r0 = t.m0 + (threadIdx.x / (BN / TN)) * TM, c0 = t.n0 + (threadIdx.x % (BN / TN)) * TN;
#pragma unroll
    for (int r = 0; r < TM; ++r)
#pragma unroll
      for (int c = 0; c < TN; ++c)
        if (r0 + r < (I)p.M && c0 + c < (I)p.N) {
          const T mx = m[r][c];
          const T value = fabs(mx) < Num<T>::inf() ? mx + R::log2(s[r][c]) * kLn2 : mx; // NaN, ±inf as they are
          emit<T, Out, I>(p, t, r0 + r, c0 + c, value, -1);
        }
  }
}

} // namespace jb
