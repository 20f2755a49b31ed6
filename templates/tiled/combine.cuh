// Split-K, second pass: each output reduces its chunks' values (already semiring values) with ⊕. Chunk c covers
// smaller k than chunk c + 1, so ties resolve to the smaller k exactly as in a single pass.
#pragma once

#include "core/params.cuh"
#include "core/semirings.cuh"
#include "core/outputs.cuh"

namespace jb {

template <class S, class Out, class I, class T> __device__ __forceinline__ void combine_kernel(const BmmParams p) {
  const I outputs = (I)p.B * (I)p.M * (I)p.N;
  const I chunks = ((I)p.K + (I)p.k_chunk - 1) / (I)p.k_chunk;
  const T* values = static_cast<const T*>(p.workspace);
  const int* args = reinterpret_cast<const int*>(values + chunks * outputs);
  for (I o = (I)blockIdx.x * blockDim.x + threadIdx.x; o < outputs; o += (I)gridDim.x * blockDim.x) {
    typename S::State st = S::init();
    for (I c = 0; c < chunks; ++c) S::absorb(st, values[c * outputs + o], p.argmax ? args[c * outputs + o] : (int)c);
    I batch, i, j;
    unflatten(p, o, batch, i, j);
    store_output<S, Out, I>(p, batch, i, j, S::finalize(st), S::arg(st));
  }
}

} // namespace jb
