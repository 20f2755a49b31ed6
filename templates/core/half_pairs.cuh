// Two values of a half type (f16, bf16) packed in one 32-bit word, one instruction for both: the tiled kernel's
// packed terms (tiled/packed.cuh) and the maxima and masks of exp_matmul's prepare pass over half inputs.
// add is a fused a · 1 + b and mul a · b + (−0) for bf16: one rounding each, the same results as add and mul (which
// need sm_90 for bf16x2). max and min: NaN wins (max.NaN, min.NaN); least: the smaller, passing over NaN (min).
// sm_80 and later.
#pragma once

#include "core/dtypes.cuh"

namespace jb {

template <class H> struct HalfPairs;
template <> struct HalfPairs<bf16> {
  static __device__ __forceinline__ unsigned neg_inf_bits() { return 0xff80u; }
  static __device__ __forceinline__ unsigned add(unsigned a, unsigned b) {
    unsigned r;
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(0x3f803f80u), "r"(b));
    return r;
  }
  static __device__ __forceinline__ unsigned mul(unsigned a, unsigned b) {
    unsigned r;
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(0x80008000u));
    return r;
  }
  static __device__ __forceinline__ unsigned max(unsigned a, unsigned b) {
    unsigned r;
    asm("max.NaN.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
    return r;
  }
  static __device__ __forceinline__ unsigned min(unsigned a, unsigned b) {
    unsigned r;
    asm("min.NaN.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
    return r;
  }
  static __device__ __forceinline__ unsigned least(unsigned a, unsigned b) {
    unsigned r;
    asm("min.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
    return r;
  }
};
template <> struct HalfPairs<f16> {
  static __device__ __forceinline__ unsigned neg_inf_bits() { return 0xfc00u; }
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
    unsigned r;
    asm("max.NaN.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
    return r;
  }
  static __device__ __forceinline__ unsigned min(unsigned a, unsigned b) {
    unsigned r;
    asm("min.NaN.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
    return r;
  }
  static __device__ __forceinline__ unsigned least(unsigned a, unsigned b) {
    unsigned r;
    asm("min.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
    return r;
  }
};

} // namespace jb
