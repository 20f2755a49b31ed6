// The last kernel of a backward pass that accumulates atomically (the scatter, and a tiled pass whose operand is
// broadcast over the batch): its accumulator-type workspace stored as the gradient, in its operand's layout and dtype.
#pragma once

#include "core/params.cuh"
#include "core/dtypes.cuh"

namespace jb {

// Workspace [slices][rows][cols] → the gradient in its operand's layout and dtype.
template <class In, class I, bool GA> __device__ __forceinline__ void grad_store_kernel(const GradParams p) {
  typedef typename Acc<In>::type T;
  const T* ws = static_cast<const T*>(p.workspace);
  const I R = GA ? (I)p.M : (I)p.K, C = GA ? (I)p.K : (I)p.N, total = (I)p.workspace_slices * R * C;
  const I d_batch = GA ? (I)p.a_batch : (I)p.b_batch, d_row = GA ? (I)p.a_row : (I)p.b_row,
          d_col = GA ? (I)p.a_col : (I)p.b_col;
  for (I e = (I)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (I)gridDim.x * blockDim.x) {
    const I s = e / (R * C), r = e / C % R, c = e % C;
    static_cast<In*>(p.grad)[s * d_batch + r * d_row + c * d_col] = from_acc<In>(ws[e]);
  }
}

} // namespace jb
