// Strategy "linear": one thread per output element, one pass over K with the semiring's online accumulator
// (seed 001's loop, with seed 003's single-pass log-sum-exp state). Any strides, broadcast batches, and any
// number of batches: blockIdx.z and blockIdx.y stride over batches and rows, so grid limits never cap B or M.
#pragma once

#include "core/params.cuh"
#include "core/semirings.cuh"

namespace jb {

// S: semiring struct over the accumulator type; In/Out: storage types; I: index type (int or long long).
template <class S, class In, class Out, class I>
__device__ __forceinline__ void
linear_kernel(const BmmParams p) { // by value: a reference to a kernel parameter can force a stack copy
  typedef typename Acc<In>::type T;
  const I j = (I)blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= (I)p.N) return;
  const In* A = static_cast<const In*>(p.a);
  const In* Bm = static_cast<const In*>(p.b);
  Out* O = static_cast<Out*>(p.out);
  const I K = (I)p.K, a_col = (I)p.a_col, b_row = (I)p.b_row;
  for (I batch = blockIdx.z; batch < (I)p.B; batch += gridDim.z) {
    for (I i = (I)blockIdx.y * blockDim.y + threadIdx.y; i < (I)p.M; i += (I)gridDim.y * blockDim.y) {
      const In* a = A + batch * (I)p.a_batch + i * (I)p.a_row;
      const In* b = Bm + batch * (I)p.b_batch + j * (I)p.b_col;
      typename S::State st = S::init();
      for (I k = 0; k < K; ++k) S::add_term(st, to_acc(a[k * a_col]), to_acc(b[k * b_row]), k);
      O[batch * (I)p.out_batch + i * (I)p.out_row + j * (I)p.out_col] = from_acc<Out>(S::finalize(st));
      if (p.argmax) p.argmax[(batch * (I)p.M + i) * (I)p.N + j] = S::arg(st);
    }
  }
}

} // namespace jb
