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
  const EgView<T> e = eg_view<T>(p);
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
  for (I z = blockIdx.z; z < (I)p.B; z += gridDim.z) {
    float acc[P::kRegs];
    pipe.consume(acc, Nxp, cg);
    const T e_batch = (T)eg_e(e.b, eg_batch_gamma(e, z));
    wg_epilogue_blocks<BN>([&](int blk) { // a 32-column block a pass (wg_next_block)
      EgScaleIn in[16];
#pragma unroll
      for (int pass = 0; pass < 2; ++pass) // the loads of all 16, then all 16 (eg_scale_in)
#pragma unroll
        for (int q = 0; q < 16; ++q) {
          const I i = m0 + 64 * cg + wg_frag_row(warp, lane, q % 4),
                  k = n0 + 32 * blk + wg_frag_col(lane, q / 4, q % 4);
          if (i >= Mx || k >= Kx) continue;
          if (pass == 0)
            in[q] = eg_scale_in<In, I>(p, e, z, i, k);
          else
            eg_emit<In, I>(p, e, z, i, k, acc[q], e_batch, in[q]);
        }
      wg_next_block(acc);
    });
  }
}

} // namespace jb
