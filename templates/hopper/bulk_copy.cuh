// Hopper's bulk copy engine and the shared-memory barriers that count its bytes (sm_90). A bulk copy moves a
// contiguous run of global memory (a multiple of 16 bytes, both ends 16-byte aligned) into shared memory without
// threads; it completes on an mbarrier that the issuing thread first told how many bytes to expect.
//
// An mbarrier's phase completes when its expected arrivals have arrived and its expected bytes have landed; waiting
// names the parity of the phase waited for (0 for the first, 1 for the second, ...).
#pragma once

namespace jb {

__device__ __forceinline__ void mb_init(unsigned bar, unsigned arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(arrivals) : "memory");
}
// After every barrier of a block is initialised, before any thread or the copy engine uses one (then a block-wide
// barrier).
__device__ __forceinline__ void mb_init_fence() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }
__device__ __forceinline__ void mb_arrive(unsigned bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
// This thread's arrival, and `bytes` more for the phase to wait for.
__device__ __forceinline__ void mb_arrive_expect(unsigned bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mb_wait(unsigned bar, unsigned parity) {
  asm volatile("{\n.reg .pred done;\nWAIT:\n"
               "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
               "@!done bra WAIT;\n}\n" ::"r"(bar),
               "r"(parity)
               : "memory");
}
// `bytes` from global `src` to shared `dst`, counted on `bar`.
__device__ __forceinline__ void bulk_copy(unsigned dst, const void* src, unsigned bytes, unsigned bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(bar)
               : "memory");
}

} // namespace jb
