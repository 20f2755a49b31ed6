// The shift the chain kernels keep their values relative to: a maximum where it is finite, else 0, so that ±inf and
// NaN stay as they are.
#pragma once

#include "core/numbers.cuh"

namespace jb {

template <class T> __device__ __forceinline__ T finite_or_zero(T x) {
  return x > Num<T>::neg_inf() && x < Num<T>::inf() ? x : T(0);
}

} // namespace jb
