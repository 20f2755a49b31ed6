// Storage dtypes and their conversion to and from the accumulator type (and to TF32, as the tensor cores read
// f32). The accumulator types' numbers are in core/numbers.cuh. NVRTC ships no fp16/bf16 headers, so the conversions are written here in PTX (f16) and bit
// arithmetic (bf16), with IEEE round-to-nearest-even.
#pragma once

#include "core/features.cuh"

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
#if JB_HAS_HALF_PAIRS
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
// with half pairs, else two roundings.
template <class H> __device__ __forceinline__ unsigned pack_pair(float lo, float hi);
#if JB_HAS_HALF_PAIRS
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
#else
template <class H> __device__ __forceinline__ unsigned pack_pair(float lo, float hi) {
  return (unsigned)from_acc<H>(lo).bits | (unsigned)from_acc<H>(hi).bits << 16;
}
#endif

// x rounded to TF32 (10 mantissa bits, to nearest), as the tensor cores read it.
__device__ __forceinline__ unsigned to_tf32(float x) {
  unsigned r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return r;
}

} // namespace jb
