// Outputs enumerated flat, (batch, i, j) from one index, and one output stored with its argmax: for the kernels
// whose threads walk the outputs with grid-stride loops (the direct reductions, split-K's combine pass).
#pragma once

#include "core/params.cuh"
#include "core/dtypes.cuh"

namespace jb {

template <class I> __device__ __forceinline__ void unflatten(const BmmParams& p, I o, I& batch, I& i, I& j) {
  j = o % (I)p.N;
  const I rest = o / (I)p.N;
  i = rest % (I)p.M;
  batch = rest / (I)p.M;
}

template <class S, class Out, class I, class T>
__device__ __forceinline__ void store_output(const BmmParams& p, I batch, I i, I j, T value, int arg) {
  static_cast<Out*>(p.out)[batch * (I)p.out_batch + i * (I)p.out_row + j * (I)p.out_col] = from_acc<Out>(value);
  if (p.argmax) p.argmax[(batch * (I)p.M + i) * (I)p.N + j] = arg;
}

} // namespace jb
