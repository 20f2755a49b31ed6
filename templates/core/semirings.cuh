// The semirings, one device struct each: init (the empty accumulator), add_term (acc ⊕= a ⊗ b for one k),
// combine (merge two accumulators, the first covering smaller k), finalize (accumulator → output value).
// T is the accumulator type (float or double). The README's edge-case contract is implemented here and
// mirrored exactly by reference/reference.cpp.
#pragma once

#include "core/dtypes.cuh"
#include "core/numbers.cuh"

namespace jb {

__device__ __forceinline__ float exp_(float x) { return __expf(x); }
__device__ __forceinline__ double exp_(double x) { return exp(x); }
__device__ __forceinline__ float log_(float x) { return logf(x); }
__device__ __forceinline__ double log_(double x) { return log(x); }
template <class T> __device__ __forceinline__ bool is_nan(T x) { return x != x; }
template <class T> __device__ __forceinline__ T shfl_xor_(T x, int lane_mask) {
  return __shfl_xor_sync(0xffffffffu, x, lane_mask);
}

// log: a ⊕ b = log(e^a + e^b), a ⊗ b = a + b, zero = −inf, one = 0.
// State (m, s) stands for e^m · s (KeOps' online log-sum-exp). A term equal to m adds exactly 1, so ties of
// ±inf never form inf − inf; m is never NaN (NaN fails every comparison) and a NaN term poisons s instead.
// All terms −inf → (−inf, K) → −inf; any +inf term → +inf; a NaN term or (+inf) + (−inf) → NaN.
template <class T> struct LogSemiring {
  struct State {
    T m, s;
  };
  static __device__ __forceinline__ State init() { return {Num<T>::neg_inf(), T(0)}; }
  static __device__ __forceinline__ void push(State& st, T t) {
    if (t > st.m) {
      st.s = st.s * exp_(st.m - t) + T(1);
      st.m = t;
    } else if (t == st.m) {
      st.s += T(1);
    } else {
      st.s += exp_(t - st.m);
    }
  }
  static __device__ __forceinline__ void add_term(State& st, T a, T b, long long) { push(st, a + b); }
  static __device__ __forceinline__ void combine(State& x, const State& y) {
    if (y.m > x.m) {
      x.s = y.s + x.s * exp_(x.m - y.m);
      x.m = y.m;
    } else if (y.m == x.m) {
      x.s += y.s;
    } else {
      x.s += y.s * exp_(y.m - x.m);
    }
  }
  static __device__ __forceinline__ T finalize(const State& st) {
    if (is_nan(st.s)) return st.s;
    if (st.m == Num<T>::inf() || st.m == Num<T>::neg_inf()) return st.m;
    return st.m + log_(st.s);
  }
  static __device__ __forceinline__ int arg(const State&) { return -1; }
  // A value that is already a partial ⊕ (a split-K chunk) joins like a term.
  static __device__ __forceinline__ void absorb(State& st, T v, int) { push(st, v); }
  static __device__ __forceinline__ State shfl_xor(const State& st, int lane_mask) {
    return {shfl_xor_(st.m, lane_mask), shfl_xor_(st.s, lane_mask)};
  }
  // Tiled padding: (−inf) + (−inf) adds nothing and never forms inf − inf.
  static __device__ __forceinline__ T pad_a() { return Num<T>::neg_inf(); }
  static __device__ __forceinline__ T pad_b() { return Num<T>::neg_inf(); }
};

// The selecting semirings' one order, which the chains' reductions take too (templates/chain/reductions.cuh):
// whether value v at index k beats cur at cur_k. NaN beats every number, and between NaN the smallest index wins;
// among numbers Op::better (a strict preference), ties to the smallest index.
template <class Op, class T> __device__ __forceinline__ bool select_beats(T v, int k, T cur, int cur_k) {
  if (is_nan(cur)) return is_nan(v) && k < cur_k;
  if (is_nan(v) || Op::better(v, cur)) return true;
  return v == cur && k < cur_k;
}
// The same order without branches, for sorting networks, whose compare-and-swaps would otherwise each take a branch
// and its reconvergence: every test made, and combined bitwise.
template <class Op, class T> __device__ __forceinline__ bool select_beats_flat(T v, int k, T cur, int cur_k) {
  const bool nv = is_nan(v), nc = is_nan(cur), before = k < cur_k;
  return (nc & nv & before) | (!nc & (nv | Op::better(v, cur) | ((v == cur) & before)));
}

// Selecting semirings: ⊕ picks one term, so the accumulator remembers which k won. Ties keep the smallest k;
// the first NaN term wins over every number and stays (select_beats); with no term (K = 0) the output is the
// semiring zero and the argmax is −1. Op supplies times (⊗), better (strict preference) and zero.
template <class T, class Op> struct Select {
  struct State {
    T v;
    int k;
  };
  static __device__ __forceinline__ State init() { return {Op::zero(), -1}; }
  static __device__ __forceinline__ bool takes(const State& x, T v, int k) {
    return x.k < 0 || select_beats<Op>(v, k, x.v, x.k);
  }
  static __device__ __forceinline__ void add_term(State& st, T a, T b, long long k) {
    const T t = Op::times(a, b);
    if (takes(st, t, (int)k)) {
      st.v = t;
      st.k = (int)k;
    }
  }
  static __device__ __forceinline__ void combine(State& x, const State& y) {
    if (y.k >= 0 && takes(x, y.v, y.k)) x = y;
  }
  static __device__ __forceinline__ T finalize(const State& st) { return st.k < 0 ? Op::zero() : st.v; }
  static __device__ __forceinline__ int arg(const State& st) { return st.k; }
  static __device__ __forceinline__ void absorb(State& st, T v, int k) { combine(st, State{v, k}); }
  static __device__ __forceinline__ State shfl_xor(const State& st, int lane_mask) {
    return {shfl_xor_(st.v, lane_mask), shfl_xor_(st.k, lane_mask)};
  }
  static __device__ __forceinline__ T pad_a() { return Op::pad_a(); }
  static __device__ __forceinline__ T pad_b() { return Op::pad_b(); }
};

// max_plus (Viterbi, tropical): a ⊕ b = max, a ⊗ b = a + b, zero = −inf, one = 0.
template <class T> struct MaxPlusOp {
  static __device__ __forceinline__ T times(T a, T b) { return a + b; }
  static __device__ __forceinline__ bool better(T v, T cur) { return v > cur; }
  static __device__ __forceinline__ T zero() { return Num<T>::neg_inf(); }
  static __device__ __forceinline__ T pad_a() {
    return Num<T>::neg_inf();
  } // pad ⊗ pad = −inf: never wins a tie (larger k)
  static __device__ __forceinline__ T pad_b() { return Num<T>::neg_inf(); }
  // For the tiled kernel's argmax policy (tiled/tiled.cuh): a value no term is worse than, and the operands that can form
  // a NaN term (NaN, or +inf meeting −inf).
  static __device__ __forceinline__ T worst() { return Num<T>::neg_inf(); }
  static __device__ __forceinline__ bool suspect(T x) { return !(x < Num<T>::inf()); }
};
// min_plus (shortest paths): a ⊕ b = min, a ⊗ b = a + b, zero = +inf, one = 0.
template <class T> struct MinPlusOp {
  static __device__ __forceinline__ T times(T a, T b) { return a + b; }
  static __device__ __forceinline__ bool better(T v, T cur) { return v < cur; }
  static __device__ __forceinline__ T zero() { return Num<T>::inf(); }
  static __device__ __forceinline__ T pad_a() { return Num<T>::inf(); }
  static __device__ __forceinline__ T pad_b() { return Num<T>::inf(); }
  static __device__ __forceinline__ T worst() { return Num<T>::inf(); }
  static __device__ __forceinline__ bool suspect(T x) { return !(x > Num<T>::neg_inf()); }
};
// max_times (genbmm's prodmax, for non-negative inputs): a ⊕ b = max, a ⊗ b = a · b, zero = 0, one = 1.
// The maximum is taken over the actual products, so negative inputs still give max_k a·b; K = 0 gives 0.
template <class T> struct MaxTimesOp {
  static __device__ __forceinline__ T times(T a, T b) { return a * b; }
  static __device__ __forceinline__ bool better(T v, T cur) { return v > cur; }
  static __device__ __forceinline__ T zero() { return T(0); }
  static __device__ __forceinline__ T pad_a() { return Num<T>::neg_inf(); } // (−inf) · 1 = −inf
  static __device__ __forceinline__ T pad_b() { return T(1); }
  static __device__ __forceinline__ T worst() { return Num<T>::neg_inf(); } // below zero(): products may be negative
  static __device__ __forceinline__ bool suspect(T x) { return !(fabs(x) < Num<T>::inf()); } // 0 · inf
};
template <class T> struct MaxPlusSemiring : Select<T, MaxPlusOp<T>> {};
template <class T> struct MinPlusSemiring : Select<T, MinPlusOp<T>> {};
template <class T> struct MaxTimesSemiring : Select<T, MaxTimesOp<T>> {};

// plus_times (ordinary): a ⊕ b = a + b, a ⊗ b = a · b (fused multiply-add), zero = 0, one = 1. IEEE arithmetic:
// overflowing products give ±inf and inf − inf gives NaN, as in any GEMM.
template <class T> struct PlusTimesSemiring {
  struct State {
    T s;
  };
  static __device__ __forceinline__ State init() { return {T(0)}; }
  static __device__ __forceinline__ void add_term(State& st, T a, T b, long long) { st.s = fma(a, b, st.s); }
  static __device__ __forceinline__ void combine(State& x, const State& y) { x.s += y.s; }
  static __device__ __forceinline__ T finalize(const State& st) { return st.s; }
  static __device__ __forceinline__ int arg(const State&) { return -1; }
  static __device__ __forceinline__ void absorb(State& st, T v, int) { st.s += v; }
  static __device__ __forceinline__ State shfl_xor(const State& st, int lane_mask) {
    return {shfl_xor_(st.s, lane_mask)};
  }
  static __device__ __forceinline__ T pad_a() { return T(0); }
  static __device__ __forceinline__ T pad_b() { return T(0); }
};

} // namespace jb
