// The accumulator types' numbers: the exp unit's 2^x and log2 x, the maximum and minimum where NaN wins, and Num,
// the special values and constants every template spells through it.
#pragma once

#include "core/features.cuh"

namespace jb {

// 2^x on the exp unit (MUFU.EX2): relative error ≤ 2^-22, results below 2^-126 flushed to 0. Shared by the tiled
// log forward and the backward.
__device__ __forceinline__ float ex2_approx(float x) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}
__device__ __forceinline__ double ex2_approx(double x) { return exp2(x); }
// log2 x on the exp unit (MUFU.LG2): absolute error below 2^-22 for x in [0.5, 2]; subnormal x flushed to 0.
__device__ __forceinline__ float lg2_approx(float x) {
  float r;
  asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}

// Maximum and minimum of f32 values where NaN wins (PTX max.NaN / min.NaN); without them, a comparison and a select
// that take y when it is better or NaN and x otherwise (x itself when it is NaN). That form, rather than a max and a
// NaN test of both, keeps the fast tiled kernels inside the registers of 3 blocks an SM without spilling.
__device__ __forceinline__ float max_nan(float x, float y) {
  float r;
#if JB_HAS_NAN_MINMAX
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(x), "f"(y));
#else
  r = y > x || y != y ? y : x;
#endif
  return r;
}
__device__ __forceinline__ float min_nan(float x, float y) {
  float r;
#if JB_HAS_NAN_MINMAX
  asm("min.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(x), "f"(y));
#else
  r = y < x || y != y ? y : x;
#endif
  return r;
}

// ±inf, NaN, log2 e and ln 2 per accumulator type: every template spells them through this, never as a literal;
// and 2^x, log2 x, 2^e and the maximum where NaN wins, each on the accumulator type's fastest exact-enough path.
// The infinities and NaN are written as bit patterns, which need no header. Functions, not static constexpr
// members: NVRTC would emit those as global variables in every module.
template <class T> struct Num;
template <> struct Num<float> {
  static __device__ __forceinline__ float inf() { return __int_as_float(0x7f800000); }
  static __device__ __forceinline__ float neg_inf() { return -inf(); }
  static __device__ __forceinline__ float nan() { return __int_as_float(0x7fffffff); }
  static __device__ __forceinline__ float log2e() { return 1.4426950408889634f; }
  static __device__ __forceinline__ float ln2() { return 0.6931471805599453f; }
  static __device__ __forceinline__ float exp2(float x) { return ex2_approx(x); }
  static __device__ __forceinline__ float log2(float x) { return log2f(x); }
  static __device__ __forceinline__ float pow2(int e) { return ldexpf(1.f, e); }
  static __device__ __forceinline__ float max(float x, float y) { return max_nan(x, y); }
};
template <> struct Num<double> {
  static __device__ __forceinline__ double inf() { return __longlong_as_double(0x7ff0000000000000LL); }
  static __device__ __forceinline__ double neg_inf() { return -inf(); }
  static __device__ __forceinline__ double nan() { return __longlong_as_double(0x7fffffffffffffffLL); }
  static __device__ __forceinline__ double log2e() { return 1.4426950408889634; }
  static __device__ __forceinline__ double ln2() { return 0.6931471805599453; }
  static __device__ __forceinline__ double exp2(double x) { return ::exp2(x); }
  static __device__ __forceinline__ double log2(double x) { return ::log2(x); }
  static __device__ __forceinline__ double pow2(int e) { return ldexp(1.0, e); }
  static __device__ __forceinline__ double max(double x, double y) { return x != x ? x : y != y ? y : fmax(x, y); }
};

} // namespace jb
