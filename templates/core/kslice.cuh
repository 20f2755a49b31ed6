// The double-buffered K-slice main loop of every tiled kernel (tiled, tiled_log, exp_matmul's product in its FMA
// and tensor-core forms, exp_matmul's repair pass, the backward), written once. A block stages a slice of the
// reduction dimension, for both operands, in one of two shared-memory buffers and consumes it while the next
// slice loads into the other. The kernel supplies a loader (how a slice reaches shared memory) and the loop's
// body (what to do with a staged slice); the order of fetches, stores and barriers is this file's alone:
//
//   for (auto slice = kslice_loop<kFetchAfterUse, kBarrierEverySlice>(ld, p, k_begin, k_end); slice.valid();
//        slice.finish(p)) {
//     slice.start(p);
//     ... the slice [slice.k0, slice.k0 + kSliceK) is in shared-memory buffer slice.buf ...
//   }
//
// Why a loop object rather than a function taking the body as a functor: the body is the kernel's hot loop, and
// NVVM optimises a functor's body on its own before inlining it, which reorders the hot loop's instructions. Why
// start() in the body and not in the loop's condition: a condition that may fetch leaves NVVM a branch on its
// result. Written this way the kernels compile as they did with the loop written out in each, instruction for
// instruction or nearly (scripts/compare-sass measures it).
#pragma once

namespace jb {

// When the next slice is fetched, relative to the arithmetic on the current one. Before: its loads are in flight
// during the arithmetic, its registers live across it (kernels whose arithmetic leaves registers to spare). After:
// the arithmetic has every register; other blocks on the SM hide the loads' latency.
enum KSliceFetch { kFetchBeforeUse, kFetchAfterUse };

// Whether a barrier also follows the last slice. It is never needed there (the next tile's first barrier
// protects the buffers, and the epilogues read only what was staged before a barrier); each kernel keeps the
// schedule it was measured with.
enum KSliceBarrier { kBarrierEverySlice, kBarrierBetweenSlices };

// A loader's defaults; loaders derive from this and redeclare what differs. A loader also has
//   enum { kSliceK = ... };              the slice length
//   void fetch(const P& p, int buf, I k0) start loading slice [k0, k0 + kSliceK): into registers, or with kAsyncCopy
//                                         straight into buffer buf (p: the kernel's argument block)
//   void land(int buf)                    complete it in buffer buf: store the registers, or wait for the copies
// Two rules keep the generated code what it was without the loader: the kernel parameter is passed to fetch(),
// never kept in the loader (a kernel parameter's address stored in a struct changes how NVVM optimises the whole
// kernel), and the staging registers are the kernel's arrays, referenced (an array member changes it as well).
// Enumerators rather than static constexpr members: NVRTC emits those as global variables of every module.
struct KSliceLoader {
  // fetch() writes shared memory itself (cp.async): it follows the barrier that frees the buffer, and land() then
  // waits after every slice, fetched or not. A fetch into registers comes before that barrier, its loads in flight
  // during the wait, and its land() runs only when a slice was fetched.
  enum { kAsyncCopy = false };
  // The barrier before the first slice (the previous tile may still read shared memory) and the one after each
  // slice is staged. A loader may fold a block-wide vote into them (__syncthreads_or).
  __device__ __forceinline__ void tile_barrier() { __syncthreads(); }
  __device__ __forceinline__ void slice_barrier() { __syncthreads(); }
};

// Nothing to stage besides the slices.
struct NoTileStaging {
  template <class P> __device__ __forceinline__ void operator()(const P&) const {}
};

// The loop's state: which slice the body consumes (k0) and where it is (buf). Every thread of the block runs the
// loop with the same range: it holds barriers. The body must begin with start(p).
template <KSliceFetch FETCH, KSliceBarrier BARRIER, class L, class I> struct KSliceLoop {
  L& ld;
  I k0, k_end;
  I next; // k0 + kSliceK: the next slice
  int buf;

  // The first slice, staged before the loop. Between the barrier that frees the buffers and the one that publishes
  // the slice, the kernel stages what its epilogue reads (line maxima, masks): while_landing(p) runs before the
  // slice lands (overlapping its copies), after_landing(p) after. p is passed to them for the reason it is passed
  // to fetch().
  template <class P, class WhileLanding, class AfterLanding>
  __device__ __forceinline__ KSliceLoop(L& ld, const P& p, I k_begin, I k_end, WhileLanding&& while_landing,
                                        AfterLanding&& after_landing)
      : ld(ld), k0(k_begin), k_end(k_end), next(k_begin), buf(0) {
    if (!L::kAsyncCopy) ld.fetch(p, 0, k_begin);
    ld.tile_barrier();
    if (L::kAsyncCopy) ld.fetch(p, 0, k_begin);
    while_landing(p);
    ld.land(0);
    after_landing(p);
    ld.slice_barrier();
  }

  // The loop's condition. Where `next` is computed (here, or in start() beside an early fetch) changes nothing but
  // ptxas's instruction order; these places reproduce the hand-written loops' code exactly.
  __device__ __forceinline__ bool valid() {
    if (!(k0 < k_end)) return false;
    if (FETCH == kFetchAfterUse) next = k0 + L::kSliceK;
    return true;
  }

  // First in the body: with kFetchBeforeUse the next slice starts loading.
  template <class P> __device__ __forceinline__ void start(const P& p) {
    if (FETCH == kFetchBeforeUse) {
      next = k0 + L::kSliceK;
      if (next < k_end) ld.fetch(p, buf ^ 1, next);
    }
  }

  // After the body: with kFetchAfterUse the next slice's fetch; its landing in the other buffer (last read before
  // the previous barrier); the barrier.
  template <class P> __device__ __forceinline__ void finish(const P& p) {
    if (next < k_end) {
      if (FETCH == kFetchAfterUse) ld.fetch(p, buf ^ 1, next);
      if (!L::kAsyncCopy) ld.land(buf ^ 1);
      if (BARRIER == kBarrierBetweenSlices) {
        ld.slice_barrier();
        buf ^= 1;
      }
    }
    if (L::kAsyncCopy) ld.land(buf ^ 1);
    if (BARRIER == kBarrierEverySlice) {
      ld.slice_barrier();
      buf ^= 1;
    }
    k0 = next;
  }
};

template <KSliceFetch FETCH, KSliceBarrier BARRIER, class L, class P, class I, class WhileLanding = NoTileStaging,
          class AfterLanding = NoTileStaging>
__device__ __forceinline__ KSliceLoop<FETCH, BARRIER, L, I>
kslice_loop(L& ld, const P& p, I k_begin, I k_end, WhileLanding&& while_landing = NoTileStaging(),
            AfterLanding&& after_landing = NoTileStaging()) {
  return KSliceLoop<FETCH, BARRIER, L, I>(ld, p, k_begin, k_end, while_landing, after_landing);
}

} // namespace jb
