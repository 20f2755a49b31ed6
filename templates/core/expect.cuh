// A log-sum of terms with the mean of a value under the same weights, kept relative to the largest term: what the
// chains' expectations (templates/chain/expectation.cuh) and the expectation semiring's product
// (templates/structured/entropy_product.cuh) accumulate.
#pragma once

#include "core/numbers.cuh"

namespace jb {

// A log-sum of terms e^x with the mean of a value v under the same weights, kept relative to the largest x: m, s =
// Σ e^{x − m} and a = Σ e^{x − m} v over the terms of weight, those whose x is not −inf and whose e^{x − m} does not
// round to 0 (a term too small for the type adds nothing, whatever its v: 0·inf is never formed). NaN in x wins; +inf
// terms give m = +inf, each of weight 1.
template <class T> struct Expect {
  T m, s, a;

  static __device__ __forceinline__ Expect none() { return {Num<T>::neg_inf(), T(0), T(0)}; }
  static __device__ __forceinline__ T ex(T y) { return Num<T>::exp2(y * Num<T>::log2e()); }
  // e^{from − to} for from ≤ to: 1 where they are equal (+inf too), 0 from an empty sum's −inf.
  static __device__ __forceinline__ T rescale(T from, T to) {
    return from == to ? T(1) : from == Num<T>::neg_inf() ? T(0) : ex(from - to);
  }
  __device__ __forceinline__ void poison(T nan) { m = s = a = nan; }

  __device__ __forceinline__ void add(T x, T v) {
    if (x < m) { // the common case, kept short: below the largest so far (−inf below a finite one gives weight 0)
      const T e = ex(x - m);
      if (e > T(0)) s += e, a += e * v;
      return;
    }
    if (x == Num<T>::neg_inf() || m != m) return; // no term yet and none now, or already NaN
    if (x != x) return poison(x);
    if (x == m) { // equal to the largest (+inf too): weight 1
      s += T(1), a += v;
      return;
    }
    const T f = rescale(m, x); // a new largest
    s = (f > T(0) ? s * f : T(0)) + T(1);
    a = (f > T(0) ? a * f : T(0)) + v;
    m = x;
  }
  // Without a branch, so that the warp's shuffles between merges stay converged: each side's factor e^{m − n}, 1 for
  // the larger (an infinite one too), NaN where either is NaN (which then stays); a side of weight 0 adds nothing.
  __device__ __forceinline__ void merge(const Expect& o) {
    const T n = Num<T>::max(m, o.m);
    const T f = m == n ? T(1) : ex(m - n), g = o.m == n ? T(1) : ex(o.m - n);
    s = s * f + o.s * g;
    a = (f > T(0) ? a * f : T(0)) + (g > T(0) ? o.a * g : T(0));
    m = n;
  }

  // Every lane of the warp gets the warp's merge (the same tree in every run).
  __device__ __forceinline__ void merge_warp() {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const Expect other{__shfl_xor_sync(0xffffffffu, m, o), __shfl_xor_sync(0xffffffffu, s, o),
                         __shfl_xor_sync(0xffffffffu, a, o)};
      merge(other);
    }
  }
  // log Σ e^x: −inf for no term, NaN for a NaN one.
  __device__ __forceinline__ T log_sum() const {
    return s > T(0) ? m + Num<T>::log2(s) * Num<T>::ln2() : s == T(0) ? Num<T>::neg_inf() : Num<T>::nan();
  }
  // The weighted mean of v, `empty` where no term has weight.
  __device__ __forceinline__ T mean(T empty) const { return s > T(0) ? a / s : s == T(0) ? empty : Num<T>::nan(); }
};

} // namespace jb
