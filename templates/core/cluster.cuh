// Thread-block clusters (sm_90 and later): a block's rank in its cluster, stores into another block's shared
// memory, and the barrier of the whole cluster. Only kernels generated with a cluster of more than one block call
// them, and the generator makes those for sm_90 and later alone.
#pragma once

#include "core/async_copy.cuh"

namespace jb {

__device__ __forceinline__ unsigned cluster_rank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}

// Stores v at the address that `local` (this block's shared memory) has in the shared memory of block `rank` of
// the cluster. Seen by that block after the next cluster_sync.
template <class T> __device__ __forceinline__ void cluster_store(T* local, unsigned rank, T v) {
  unsigned remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(smem_addr(local)), "r"(rank));
  if constexpr (sizeof(T) == 8)
    asm volatile("st.shared::cluster.f64 [%0], %1;" ::"r"(remote), "d"(v) : "memory");
  else
    asm volatile("st.shared::cluster.f32 [%0], %1;" ::"r"(remote), "f"(v) : "memory");
}

// Every thread of every block of the cluster arrives, and each waits for all: what they wrote before (shared
// memory of any block of the cluster, and global memory) is seen by all after. Every thread must call it.
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}

// A sequence split over a cluster of K blocks (K = 1: one block), the blocks taking ⌈C / K⌉ of its C target states
// each: this block's rank and its states [first, end).
template <int C, int K> struct ClusterShare {
  unsigned rank;
  int first, end;
  __device__ __forceinline__ ClusterShare() : rank(K > 1 ? cluster_rank() : 0) {
    constexpr int CK = (C + K - 1) / K;
    first = int(rank) * CK;
    end = first + CK < C ? first + CK : C;
  }
  // The barrier that ends a step: the cluster's, or the block's alone.
  static __device__ __forceinline__ void sync() {
    if constexpr (K > 1)
      cluster_sync();
    else
      __syncthreads();
  }
};

} // namespace jb
