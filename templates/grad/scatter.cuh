// The selecting semirings' backward (max_plus, min_plus, max_times; strategy "scatter"): G[i,j] goes to the
// forward's argmax k (times the partner operand for max_times), accumulated atomically in an accumulator-type
// workspace, then stored (grad/store.cuh).
#pragma once

#include "core/params.cuh"
#include "core/dtypes.cuh"
#include "grad/store.cuh"

namespace jb {

// Selecting semirings: one thread per output (b, i, j) sends G to its argmax k.
template <class In, class Out, class I, bool GA, bool kTimes>
__device__ __forceinline__ void grad_scatter_kernel(const GradParams p) {
  typedef typename Acc<In>::type T;
  T* ws = static_cast<T*>(p.workspace);
  const In* A = static_cast<const In*>(p.a);
  const In* Bm = static_cast<const In*>(p.b);
  const Out* Gp = static_cast<const Out*>(p.grad_out);
  const I M = (I)p.M, N = (I)p.N, K = (I)p.K, total = (I)p.B * M * N;
  for (I o = (I)blockIdx.x * blockDim.x + threadIdx.x; o < total; o += (I)gridDim.x * blockDim.x) {
    const I bt = o / (M * N), i = o / N % M, j = o % N;
    const int k = p.argmax[o];
    if (k < 0 || (I)k >= K) continue; // K = 0: no term, no gradient
    const T g = to_acc(Gp[bt * (I)p.out_batch + i * (I)p.out_row + j * (I)p.out_col]);
    if (g == T(0)) continue;
    const I slice = p.workspace_slices == 1 ? I(0) : bt;
    if (GA) {
      const T w = kTimes ? g * to_acc(Bm[bt * (I)p.b_batch + (I)k * (I)p.b_row + j * (I)p.b_col]) : g;
      atomicAdd(ws + (slice * M + i) * K + k, w);
    } else {
      const T w = kTimes ? g * to_acc(A[bt * (I)p.a_batch + i * (I)p.a_row + (I)k * (I)p.a_col]) : g;
      atomicAdd(ws + (slice * K + k) * N + j, w);
    }
  }
}

} // namespace jb
