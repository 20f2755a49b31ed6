// exp_matmul's third pass (the overview is in exp_matmul/product.cuh): the outputs the guard could not vouch for,
// recomputed exactly.
#pragma once

#include "tiled/tiled.cuh"
#include "exp_matmul/factors.cuh"

namespace jb {

// Pass 3: the exact two-pass kernel on the tiles the guard flagged (BmmParams.repair_flags). Per output, a first
// sweep over K finds the largest term t = a + b (natural units, so no finite input overflows a scaling); a second
// sums 2^((t − max)·log2 e), every term ≤ 1 and the largest exactly 1, so nothing that matters can underflow.
// NaN terms give NaN, a +inf max gives +inf, an all −inf output −inf: the reference's contract.
//
// The tiles are one list (TileList, the flags' order), walked by a grid of a few blocks an SM (exp_matmul.cpp): block
// b's tiles are b, b + gridDim.x, … . It reads 256 of its tiles' flags at once, a thread each, and runs the flagged
// ones in order (every one where there are no flags), so a repair with nothing flagged (the usual one) costs a
// launch and a read rather than a block for every tile, thousands of which cost more than the launch.

// The repair tile's geometry: f64 element by element (16-byte chunks spilled 16–32 bytes).
template <class In, int BM, int BN, int BK, int TM, int TN>
using EmRepairGeometry = Tile<typename Acc<In>::type, BM, BN, BK, TM, TN, sizeof(typename Acc<In>::type) == 8 ? 0 : 16>;

// One tile of outputs, both sweeps, through shared memory sm.
template <class In, class Out, class I, int BM, int BN, int BK, int TM, int TN>
__device__ __forceinline__ void
em_repair_one(const BmmParams& p, typename EmRepairGeometry<In, BM, BN, BK, TM, TN>::Smem& sm, const TileCoords<I>& t) {
  typedef typename Acc<In>::type T;
  typedef Num<T> R;
  typedef EmRepairGeometry<In, BM, BN, BK, TM, TN> G;
  const T kNegInf = Num<T>::neg_inf(), kLog2e = Num<T>::log2e(), kLn2 = Num<T>::ln2();
  const In* A = static_cast<const In*>(p.a) + t.batch * (I)p.a_batch;
  const In* B = static_cast<const In*>(p.b) + t.batch * (I)p.b_batch;
  T m[TM][TN], s[TM][TN];
#pragma unroll
  for (int r = 0; r < TM; ++r)
#pragma unroll
    for (int c = 0; c < TN; ++c) m[r][c] = kNegInf, s[r][c] = (T)0;
#pragma unroll 1
  for (int sweep = 0; sweep < 2; ++sweep) {
    // Each sweep is a pass of its own: the previous sweep (or tile) may still read shared memory at its start.
    typedef TileRegs<G, In> Regs;
    typename Regs::Word ra[Regs::kA], rb[Regs::kB];
    TileLoader<G, In, I> ld(sm, A, B, t, kNegInf, kNegInf, ra, rb);
    for (auto slice = kslice_loop<kFetchBeforeUse, kBarrierEverySlice>(ld, p, t.k_begin, t.k_end); slice.valid();
         slice.finish(p)) {
      slice.start(p);
#pragma unroll 4
      for (int k = 0; k < BK; ++k)
        G::for_each_term(sm, slice.buf, k, [&](int r, int c, T a, T b) {
          // Padding is −inf on both sides: a −inf term, which neither sweep counts.
          const T term = a + b;
          if (sweep == 0)
            m[r][c] = R::max(m[r][c], term);
          else
            s[r][c] += R::exp2((term - m[r][c]) * kLog2e);
        });
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

template <class In, class Out, class I, int BM, int BN, int BK, int TM, int TN>
__device__ __forceinline__ void em_repair_kernel(const BmmParams p) {
  typedef EmRepairGeometry<In, BM, BN, BK, TM, TN> G;
  static_assert(BM / TM * (BN / TN) == 256, "a flag a thread: 256 threads");
  __shared__ __align__(16) typename G::Smem sm;
  __shared__ unsigned flagged[8]; // a round's flags, a warp's 32 a word
  typedef TileList<I, BM, BN> Tiles;
  for (I round = 0; (I)blockIdx.x + round * (I)gridDim.x < Tiles::total(p); round += 256) {
    {
      const I u = (I)blockIdx.x + (round + (I)threadIdx.x) * (I)gridDim.x;
      const unsigned mine =
          __ballot_sync(0xffffffffu, u < Tiles::total(p) && (!p.repair_flags || p.repair_flags[u] != 0u));
      __syncthreads(); // the previous round's words are read
      if (threadIdx.x % 32 == 0) flagged[threadIdx.x / 32] = mine;
      __syncthreads();
    }
    // The flagged tiles in order, uniformly over the block: every thread reads the same words.
#pragma unroll 1
    for (int w = 0; w < 8; ++w)
#pragma unroll 1
      for (unsigned bits = flagged[w]; bits != 0u; bits &= bits - 1u) {
        const I f = round + (I)(32 * w + __ffs(bits) - 1);
        em_repair_one<In, Out, I, BM, BN, BK, TM, TN>(p, sm, Tiles::at(p, (I)blockIdx.x + f * (I)gridDim.x));
      }
  }
}

} // namespace jb
