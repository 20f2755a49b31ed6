// Reductions over a block of NT threads: the largest value (NaN wins), what the kernels that keep a whole row or
// matrix relative to its largest entry reduce it by, and the sum.
#pragma once

#include "core/numbers.cuh"

namespace jb {

// The largest of every thread's x (NaN wins), in every thread of the block of NT threads. `scratch` holds NT / 32
// values; the barrier before it is written lets a loop call this again.
template <class T, int NT> __device__ __forceinline__ T block_max(T x, T* scratch) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x = Num<T>::max(x, __shfl_xor_sync(0xffffffffu, x, o));
  __syncthreads();
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = x;
  __syncthreads();
  T m = scratch[0];
#pragma unroll
  for (int w = 1; w < NT / 32; ++w) m = Num<T>::max(m, scratch[w]);
  return m;
}

// The sum of every thread's x, in every thread of the block (the same order in every run: a fixed tree of shuffles,
// then the warps' sums in order). `scratch` as block_max's.
template <class T, int NT> __device__ __forceinline__ T block_sum(T x, T* scratch) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = x;
  __syncthreads();
  T s = scratch[0];
#pragma unroll
  for (int w = 1; w < NT / 32; ++w) s += scratch[w];
  return s;
}

} // namespace jb
