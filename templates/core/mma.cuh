// Tensor-core products through mma.sync (sm_80 on: JB_HAS_MMA_TF32_BF16) for the exp_matmul products
// (exp_matmul/product.cuh, bf16.cuh) and the chain's fused steps (chain/fused_mma.cuh), and the split of an f32 value
// into two TF32 parts (also for exp_matmul's wgmma pipeline), which makes a term hi·hi + hi·lo + lo·hi, within a few
// 2^-22 of it (the lo·lo part dropped, each lo rounded).
#pragma once

#include "core/dtypes.cuh"

namespace jb {

// d += a·b for one m16n8k8 tile: TF32 operands (a row-major, b column-major fragments), f32 accumulators.
__device__ __forceinline__ void mma_tf32(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// d += a·b for one m16n8k16 tile: BF16 operands (two a register), f32 accumulators.
__device__ __forceinline__ void mma_bf16(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// A finite x rounded to TF32 as to_tf32 rounds it, to nearest with ties away from zero (a carry into the exponent is
// the rounding up of an all-ones mantissa), in two integer instructions where cvt.rna.tf32 compiles to about five on
// sm_90 (it tests for NaN first). Never for a NaN: its payload may carry into the sign bit.
__device__ __forceinline__ unsigned finite_to_tf32(float x) { return (__float_as_uint(x) + 0x1000u) & 0xffffe000u; }

// A finite x = hi + lo to within 2^-22 of x: hi = tf32(x), lo = tf32(x − hi) (x − hi is exact in f32).
struct Tf32Pair {
  unsigned hi, lo;
};
__device__ __forceinline__ Tf32Pair finite_tf32_split(float x) {
  const unsigned hi = finite_to_tf32(x);
  return {hi, finite_to_tf32(x - __uint_as_float(hi))};
}

} // namespace jb
