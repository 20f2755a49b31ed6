// Two values of a half type (f16, bf16) packed in one 32-bit word, one instruction for both: the tiled kernel's
// packed terms (tiled/packed.cuh) and the maxima and masks of exp_matmul's prepare pass over half inputs.
// add is a fused a · 1 + b and mul a · b + (−0) for bf16: one rounding each, the same results as add and mul (which
// need sm_90 for bf16x2). max and min: NaN wins (max.NaN, min.NaN); least: the smaller, passing over NaN (min).
// Without the half-pair instructions (JB_HAS_HALF_PAIRS) each half goes through f32 and is rounded back: the same
// results, since a sum or product of two halves rounded once from f32 is the correctly rounded one (f32 carries more
// than twice a half type's significand bits, plus two) and the maxima and minima are exact.
#pragma once

#include "core/dtypes.cuh"
#include "core/numbers.cuh"

namespace jb {

// The pair (op(a.lo, b.lo), op(a.hi, b.hi)), each computed in f32 and rounded to H.
template <class H, class Op> __device__ __forceinline__ unsigned pair_in_f32(unsigned a, unsigned b, Op op) {
  H a0, a1, b0, b1;
  a0.bits = (unsigned short)(a & 0xffffu), a1.bits = (unsigned short)(a >> 16);
  b0.bits = (unsigned short)(b & 0xffffu), b1.bits = (unsigned short)(b >> 16);
  return (unsigned)from_acc<H>(op(to_acc(a0), to_acc(b0))).bits |
         (unsigned)from_acc<H>(op(to_acc(a1), to_acc(b1))).bits << 16;
}
struct F32Add {
  __device__ __forceinline__ float operator()(float x, float y) const { return x + y; }
};
struct F32Mul {
  __device__ __forceinline__ float operator()(float x, float y) const { return x * y; }
};
struct F32MaxNan {
  __device__ __forceinline__ float operator()(float x, float y) const { return max_nan(x, y); }
};
struct F32MinNan {
  __device__ __forceinline__ float operator()(float x, float y) const { return min_nan(x, y); }
};
struct F32Least {
  __device__ __forceinline__ float operator()(float x, float y) const { return fminf(x, y); }
};

template <class H> struct HalfPairs;
template <> struct HalfPairs<bf16> {
  static __device__ __forceinline__ unsigned neg_inf_bits() { return 0xff80u; }
  static __device__ __forceinline__ unsigned add(unsigned a, unsigned b) {
#if JB_HAS_HALF_PAIRS
    unsigned r;
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(0x3f803f80u), "r"(b));
    return r;
#else
    return pair_in_f32<bf16>(a, b, F32Add());
#endif
  }
  static __device__ __forceinline__ unsigned mul(unsigned a, unsigned b) {
#if JB_HAS_HALF_PAIRS
    unsigned r;
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(0x80008000u));
    return r;
#else
    return pair_in_f32<bf16>(a, b, F32Mul());
#endif
  }
  static __device__ __forceinline__ unsigned max(unsigned a, unsigned b) {
#if JB_HAS_HALF_PAIRS
    unsigned r;
    asm("max.NaN.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
    return r;
#else
    return pair_in_f32<bf16>(a, b, F32MaxNan());
#endif
  }
  static __device__ __forceinline__ unsigned min(unsigned a, unsigned b) {
#if JB_HAS_HALF_PAIRS
    unsigned r;
    asm("min.NaN.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
    return r;
#else
    return pair_in_f32<bf16>(a, b, F32MinNan());
#endif
  }
  static __device__ __forceinline__ unsigned least(unsigned a, unsigned b) {
#if JB_HAS_HALF_PAIRS
    unsigned r;
    asm("min.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
    return r;
#else
    return pair_in_f32<bf16>(a, b, F32Least());
#endif
  }
};
template <> struct HalfPairs<f16> {
  static __device__ __forceinline__ unsigned neg_inf_bits() { return 0xfc00u; }
  // f16x2 add and mul are older than every architecture jitbmm supports.
  static __device__ __forceinline__ unsigned add(unsigned a, unsigned b) {
    unsigned r;
    asm("add.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
    return r;
  }
  static __device__ __forceinline__ unsigned mul(unsigned a, unsigned b) {
    unsigned r;
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
    return r;
  }
  static __device__ __forceinline__ unsigned max(unsigned a, unsigned b) {
#if JB_HAS_HALF_PAIRS
    unsigned r;
    asm("max.NaN.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
    return r;
#else
    return pair_in_f32<f16>(a, b, F32MaxNan());
#endif
  }
  static __device__ __forceinline__ unsigned min(unsigned a, unsigned b) {
#if JB_HAS_HALF_PAIRS
    unsigned r;
    asm("min.NaN.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
    return r;
#else
    return pair_in_f32<f16>(a, b, F32MinNan());
#endif
  }
  static __device__ __forceinline__ unsigned least(unsigned a, unsigned b) {
#if JB_HAS_HALF_PAIRS
    unsigned r;
    asm("min.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
    return r;
#else
    return pair_in_f32<f16>(a, b, F32Least());
#endif
  }
};

} // namespace jb
