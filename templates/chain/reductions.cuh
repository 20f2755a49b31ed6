// The reductions of one step of the chain kernels: a target state's terms, spread over a group of lanes, to their
// ⊕ (log: log Σ exp; max_plus: the maximum and the state that won). The sequential kernels, the chunked best path's
// and the stepped strategy's take the same ones, so the three agree on every winner.
#pragma once

#include "core/numbers.cuh"
#include "core/semirings.cuh"

namespace jb {

// The ⊕ of x over a group of G lanes (xor-adjacent, G a power of two ≤ 32): the result in every lane of the
// group. Every lane of the warp takes part.
template <int G, class T, class Op> __device__ __forceinline__ T group_reduce(T x, Op op) {
#pragma unroll
  for (int o = 1; o < G; o <<= 1) x = op(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

// The ⊕ over a warp of a value that every lane of each group of G lanes holds alike (a group_reduce's result):
// only the shuffles between groups.
template <int G, class T, class Op> __device__ __forceinline__ T across_groups(T x, Op op) {
#pragma unroll
  for (int o = G; o < 32; o <<= 1) x = op(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

// Each step's reduction of one target state's C terms, N per lane over a group of G lanes: lane l holds the terms
// of states first, first + G, ... (first = l's index in the group; states ≥ C hold −inf). The result reaches every
// lane of the group, with the state that won (selecting reductions) in `arg`.
//
// log: log Σ exp, exact to the dtype: NaN anywhere gives NaN, a +inf term (without NaN) +inf, all −inf −inf.
template <class T> struct ChainLog {
  static constexpr bool kLog = true;
  static constexpr bool kPaths = false; // whether a forward may write the best path from its back-pointers
  template <int G, int N> static __device__ __forceinline__ T reduce(const T (&x)[N], int, int& arg) {
    T m = x[0];
#pragma unroll
    for (int k = 1; k < N; ++k) m = Num<T>::max(m, x[k]);
    m = group_reduce<G>(m, [](T a, T b) { return Num<T>::max(a, b); });
    const bool finite = m > Num<T>::neg_inf() && m < Num<T>::inf();
    const T shift = finite ? m : T(0);
    T s = 0;
#pragma unroll
    for (int k = 0; k < N; ++k) s += Num<T>::exp2((x[k] - shift) * Num<T>::log2e());
    s = group_reduce<G>(s, [](T a, T b) { return a + b; });
    arg = -1;
    return finite ? m + Num<T>::log2(s) * Num<T>::ln2() : m;
  }
};

// max_plus: the maximum and the smallest state reaching it; NaN wins (the smallest state holding NaN): the bmm
// argmax's order, select_beats.
template <class T> struct ChainMax {
  static constexpr bool kLog = false;
  static constexpr bool kPaths = true;
  // Without branches: a step's reduction compares every term, and with select_beats' early returns ptxas gave the
  // sequential Viterbi loop about three times the branches and reconvergence points (sm_90, 256 states).
  static __device__ __forceinline__ bool beats(T a, int i, T b, int j) {
    return select_beats_flat<MaxPlusOp<T>>(a, i, b, j);
  }
  template <int G, int N> static __device__ __forceinline__ T reduce(const T (&x)[N], int first, int& arg) {
    T v = x[0];
    int i = first;
#pragma unroll
    for (int k = 1; k < N; ++k)
      if (beats(x[k], first + k * G, v, i)) v = x[k], i = first + k * G;
#pragma unroll
    for (int o = 1; o < G; o <<= 1) {
      const T w = __shfl_xor_sync(0xffffffffu, v, o);
      const int j = __shfl_xor_sync(0xffffffffu, i, o);
      if (beats(w, j, v, i)) v = w, i = j;
    }
    arg = i;
    return v;
  }
};

} // namespace jb
