// Storage dtypes and their conversion to and from the accumulator type, and the accumulator types' special values
// and constants (Num). NVRTC ships no fp16/bf16 headers, so the conversions are written here in PTX (f16) and bit
// arithmetic (bf16), with IEEE round-to-nearest-even.
#pragma once

namespace jb {

struct f16 {
  unsigned short bits;
};
struct bf16 {
  unsigned short bits;
};
typedef float f32;
typedef double f64;

// Accumulator type per storage type: half types accumulate in float.
template <class T> struct Acc { typedef float type; };
template <> struct Acc<double> { typedef double type; };

// ±inf, NaN, log2 e and ln 2 per accumulator type: every template spells them through this, never as a literal.
// The infinities and NaN are written as bit patterns, which need no header. Functions, not static constexpr
// members: NVRTC would emit those as global variables in every module.
template <class T> struct Num;
template <> struct Num<float> {
  static __device__ __forceinline__ float inf() { return __int_as_float(0x7f800000); }
  static __device__ __forceinline__ float neg_inf() { return -inf(); }
  static __device__ __forceinline__ float nan() { return __int_as_float(0x7fffffff); }
  static __device__ __forceinline__ float log2e() { return 1.4426950408889634f; }
  static __device__ __forceinline__ float ln2() { return 0.6931471805599453f; }
};
template <> struct Num<double> {
  static __device__ __forceinline__ double inf() { return __longlong_as_double(0x7ff0000000000000LL); }
  static __device__ __forceinline__ double neg_inf() { return -inf(); }
  static __device__ __forceinline__ double nan() { return __longlong_as_double(0x7fffffffffffffffLL); }
  static __device__ __forceinline__ double log2e() { return 1.4426950408889634; }
  static __device__ __forceinline__ double ln2() { return 0.6931471805599453; }
};

__device__ __forceinline__ float to_acc(float x) { return x; }
__device__ __forceinline__ double to_acc(double x) { return x; }
__device__ __forceinline__ float to_acc(f16 x) {
  float r;
  asm("cvt.f32.f16 %0, %1;" : "=f"(r) : "h"(x.bits));
  return r;
}
__device__ __forceinline__ float to_acc(bf16 x) { return __uint_as_float(((unsigned)x.bits) << 16); }

template <class T> __device__ __forceinline__ T from_acc(float x);
template <class T> __device__ __forceinline__ T from_acc(double x);
template <> __device__ __forceinline__ float from_acc<float>(float x) { return x; }
template <> __device__ __forceinline__ double from_acc<double>(double x) { return x; }
template <> __device__ __forceinline__ f16 from_acc<f16>(float x) {
  f16 r;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r.bits) : "f"(x));
  return r;
}
template <> __device__ __forceinline__ bf16 from_acc<bf16>(float x) {
  bf16 r;
#if __CUDA_ARCH__ >= 800
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r.bits) : "f"(x)); // one instruction; NaN stays NaN
#else
  unsigned u = __float_as_uint(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    r.bits = (unsigned short)((u >> 16) | 0x40u); // NaN stays a (quiet) NaN
  } else {
    u += 0x7fffu + ((u >> 16) & 1u); // round to nearest even; overflow rounds to inf as IEEE says
    r.bits = (unsigned short)(u >> 16);
  }
#endif
  return r;
}

// Two values rounded to a half type as from_acc rounds them, packed in one word (lo in the low half): one instruction
// (sm_80 and later).
template <class H> __device__ __forceinline__ unsigned pack_pair(float lo, float hi);
#if __CUDA_ARCH__ >= 800
template <> __device__ __forceinline__ unsigned pack_pair<f16>(float lo, float hi) {
  unsigned r;
  asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
template <> __device__ __forceinline__ unsigned pack_pair<bf16>(float lo, float hi) {
  unsigned r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
#endif

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

// Maximum and minimum of f32 values where NaN wins (PTX max.NaN / min.NaN).
__device__ __forceinline__ float max_nan(float x, float y) {
  float r;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(x), "f"(y));
  return r;
}
__device__ __forceinline__ float min_nan(float x, float y) {
  float r;
  asm("min.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(x), "f"(y));
  return r;
}

// x rounded to TF32 (10 mantissa bits, to nearest), as the tensor cores read it.
__device__ __forceinline__ unsigned to_tf32(float x) {
  unsigned r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return r;
}

} // namespace jb
