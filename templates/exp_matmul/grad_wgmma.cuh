// The exp_matmul backward's product on Hopper (math wgmma_tf32x3 and wgmma_tf32; sm_90a): Σ_j H·V through the
// warp-specialised pipeline of exp_matmul/pipeline.cuh, H and V in the workspace's panels (FORM 3: as they are, split
// into TF32 parts in shared memory; FORM 4: rounded to TF32), then eg_emit per gradient element.
#pragma once

#include "exp_matmul/grad.cuh"
#include "exp_matmul/pipeline.cuh"

namespace jb {

template <class In, class Out, class I, int BM, int BN, int STAGES, bool SPLIT, bool GA>
__device__ __forceinline__ void eg_product_wgmma_kernel(const GradParams p0) {
  typedef float T;
  typedef WgPipeline<BM, BN, STAGES, SPLIT> P;
  extern __shared__ unsigned char eg_wg_smem[];
  __shared__ __align__(8) unsigned long long bars[3 * STAGES];
  P pipe(eg_wg_smem, bars);
  const GradParams p = eg_canonical<GA>(p0);
  const EgView<T> e = eg_view<T>(p, GA);
  const I Mx = (I)e.d.Mx, Kx = (I)e.d.Kx, Mxp = (I)e.w.Mxp, Kxp = (I)e.w.Kxp, Nxp = (I)e.w.Nxp;
  const I m0 = (I)blockIdx.y * BM, n0 = (I)blockIdx.x * BN;
  const int group = threadIdx.x / 128;
  if (group == 0) {
    P::enter_producer();
    // The block's tiles: batches z = blockIdx.z, + gridDim.z, ...
    const I z0 = (I)blockIdx.z, dz = (I)gridDim.z, y_batch = e.d.y_batches == 1 ? 0 : Kxp;
    pipe.produce(
        e.h, e.v, Nxp,
        WgTiles<I>{((I)p.B - z0 + dz - 1) / dz, z0 * Mxp + m0, dz * Mxp, z0 * y_batch + n0, dz * y_batch, Kxp - n0},
        (int)threadIdx.x);
    return;
  }
  P::enter_consumer();
  const int cg = group - 1, warp = threadIdx.x / 32 % 4, lane = threadIdx.x % 32;
  // This thread's accumulator register q holds row row0 + 8·(q % 4 / 2) and, in 32-column block blk, column
  // n0 + 32·blk + wg_frag_col(lane, q / 4, q % 4) of the tile.
  const I row0 = m0 + 64 * cg + wg_frag_row(warp, lane, 0);
  // x of one 32-column block's elements (0 outside the gradient: never used).
  const auto load_x = [&](I z, int blk, float(&x)[16]) {
#pragma unroll
    for (int q = 0; q < 16; ++q) {
      const I i = row0 + 8 * (q % 4 / 2), k = n0 + 32 * blk + wg_frag_col(lane, q / 4, q % 4);
      x[q] = i < Mx && k < Kx ? eg_x<In, I>(p, e, z, i, k) : 0.f;
    }
  };
  for (I z = blockIdx.z; z < (I)p.B; z += gridDim.z) {
    // The epilogue's operand values wait out their loads where nothing waits for them: the rows' r and the first
    // block's x before the main loop, each next block's x before a block finishes its own (the gradient's stores
    // may alias x as far as the compiler knows, so it would not move a load above them).
    float r[2], x[16];
#pragma unroll
    for (int h = 0; h < 2; ++h) r[h] = row0 + 8 * h < Mx ? eg_r<I>(e, z, row0 + 8 * h) : 0.f;
    load_x(z, 0, x);
    float acc[P::kRegs];
    pipe.consume(acc, Nxp, cg);
    const T e_batch = (T)eg_e(e.b, eg_batch_gamma(e, z));
    wg_epilogue_blocks<BN>([&](int blk) { // a 32-column block a pass (wg_next_block)
      float cur[16];
#pragma unroll
      for (int q = 0; q < 16; ++q) cur[q] = x[q];
      if (blk + 1 < BN / 32) load_x(z, blk + 1, x);
#pragma unroll
      for (int q = 0; q < 16; ++q) {
        const I i = row0 + 8 * (q % 4 / 2), k = n0 + 32 * blk + wg_frag_col(lane, q / 4, q % 4);
        if (i < Mx && k < Kx) eg_emit<In, I>(p, e, z, i, k, acc[q], e_batch, EgScaleIn{cur[q], r[q % 4 / 2]});
      }
      wg_next_block(acc);
    });
  }
}

} // namespace jb
