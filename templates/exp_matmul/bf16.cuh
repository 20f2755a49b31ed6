// exp_matmul's product through BF16 tensor cores (math=bf16), for f16 and bf16 problems: the prepare pass stores the
// factors rounded to BF16 (FORM 5), and mma.sync m16n8k16 multiplies them exactly and sums in f32. The bound below
// holds for Hopper's wgmma_bf16 too (FORM 6, exp_matmul/wgmma.cuh).
//
// Accuracy. A BF16 factor is within 2^-9 of its value (8 mantissa bits, to nearest), so each product is within
// 2^-8 + 2^-18 of its term, and the positive sum s within the same relative error: log s within 2^-8 ≈ 0.0039.
// The half types' contract is 1e-2 (README), of which the output's own rounding takes at most one step, 2^-8 for
// bf16 and 2^-11 for f16 (relative to max(1, |out|)); the rest, 0.0061 of it, is more than the 0.0039 this form
// can lose. The f32 sums chain over K, and the tensor cores truncate each add (about 2^-22 relative, all one way):
// K/16 adds, at most 0.001 more at K = 65536, the longest K these forms accept. The wgmma forms' epilogue takes
// the log as em_log_half (exp_matmul/product.cuh): under 1e-5 more. BF16 has f32's exponent range, so the
// headroom and the guard are f32's: a term lost to underflow is bounded as in exp_matmul/bounds.cuh, and the guard
// sends its outputs to the exact repair.
#pragma once

#include "exp_matmul/product.cuh"

namespace jb {

// The BF16 product of one block tile, as em_mma_tile (exp_matmul/product.cuh) computes the TF32 one, with the same fragment
// layout of acc: ldmatrix reads the same 16-byte pieces of each row, which now hold 8 k each, so a k-step is 16.
struct EmBf16Product {
  typedef unsigned short Factor;
  enum { kForm = 5, kStepK = 16 };
  template <int BM, int BN, int BK, int TM, int TN, int THREADS, class I, class P, class Stage>
  static __device__ __forceinline__ void tile(EmMmaSmem<Factor, BM, BN, BK>& sm, const P& p, const Factor* ea,
                                              const Factor* eb, I Kp, I m0, I n0, const EmWarpTile& w,
                                              const Stage& stage, float (&acc)[TM / 2][TN / 2][4]) {
    constexpr int MT = TM / 2, NT = TN / 2;
    EmMmaLoader<Factor, BM, BN, BK, THREADS, I> ld(sm, ea, eb, Kp, m0, n0);
    auto slice = kslice_loop<kFetchBeforeUse, kBarrierEverySlice>(ld, p, (I)0, Kp, stage);
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
      for (int n = 0; n < NT; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[m][n][e] = 0.f;
    for (; slice.valid(); slice.finish(p)) {
      slice.start(p);
#pragma unroll
      for (int kk = 0; kk < BK; kk += 16) {
        unsigned b[NT][2];
#pragma unroll
        for (int n = 0; n < NT; n += 2) {
          unsigned r[4];
          ldmatrix_x4(r, &sm.b[slice.buf][w.wn0 + n * 8 + w.b_row][kk + 2 * w.b_k]);
          b[n][0] = r[0], b[n][1] = r[1], b[n + 1][0] = r[2], b[n + 1][1] = r[3];
        }
#pragma unroll
        for (int m = 0; m < MT; ++m) {
          unsigned a[4];
          ldmatrix_x4(a, &sm.a[slice.buf][w.wm0 + m * 16 + w.a_row][kk + 2 * w.a_k]);
#pragma unroll
          for (int n = 0; n < NT; ++n) mma_bf16(acc[m][n], a, b[n][0], b[n][1]);
        }
      }
    }
  }
};

} // namespace jb
