// Copies from global to shared memory that hold no registers (cp.async), for kernels that stage their operands
// ahead of use, and the shared-memory addresses the instructions take. Without cp.async copy_async is a plain load
// and store, and commit and wait do nothing.
#pragma once

#include "core/features.cuh"

namespace jb {

// Shared-memory address of a generic pointer, for the instructions that take one.
__device__ __forceinline__ unsigned smem_addr(const void* p) {
  unsigned addr;
  asm("{ .reg .u64 a; cvta.to.shared.u64 a, %1; cvt.u32.u64 %0, a; }" : "=r"(addr) : "l"(p));
  return addr;
}

// BYTES (4, 8 or 16) from global to shared memory, both addresses aligned to BYTES, cached in L1 on the way.
template <int BYTES> __device__ __forceinline__ void copy_async(void* dst, const void* src) {
#if JB_HAS_ASYNC_COPY
  asm volatile("cp.async.ca.shared.global [%0], [%1], %2;" ::"r"(smem_addr(dst)), "l"(src), "n"(BYTES) : "memory");
#else
  struct alignas(BYTES) Bytes { unsigned char b[BYTES]; };
  *static_cast<Bytes*>(dst) = *static_cast<const Bytes*>(src);
#endif
}
// 16 bytes to shared address dst of which the first `bytes` (0..16) come from src and the rest are zeros, through
// L2 only (cp.async's source size; src 16-byte aligned, and read only when bytes > 0). Only wgmma_bf16_fused uses it,
// whose specs need cp.async (generator/arch_features.cpp).
__device__ __forceinline__ void copy_async_prefix(unsigned dst, const void* src, int bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(bytes) : "memory");
}
// The thread's copies since the last commit make one group.
__device__ __forceinline__ void copy_commit() {
#if JB_HAS_ASYNC_COPY
  asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}
// Waits until at most N of the thread's committed groups are still in flight.
template <int N> __device__ __forceinline__ void copy_wait() {
#if JB_HAS_ASYNC_COPY
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
#endif
}
__device__ __forceinline__ void copy_wait_all() { copy_wait<0>(); }

} // namespace jb
