// The log fused form's product on tensor cores, for its resident entries on GPUs with TF32 mma.sync
// (JB_HAS_MMA_TF32_BF16; older ones take the FMA sweep of fused_sweep.cuh, with the same factors). Each factor (in
// [0, 1]: finite) is split into two TF32 parts and a term is three products (core/mma.cuh: within a few 2^-22 of it, as
// exp_matmul's tf32x3); the tensor cores add with truncation, so each 8 sources' three products are summed from zero
// and added to the f32 sums with a rounded add, and the truncation never compounds over the sources. Each of a term's
// three products, and each sum a tensor core forms, loses less than 2^-126 to flushing, so a sum of C terms past the
// fused form's guard (C·2^-94, fused_steps.cuh) has lost less than 2^-29 of itself.
//
// The groups alternate chunks of kFusedK sources as the FMA sweep's do; a group's four warps take 16 rows × 32
// columns of the tile each (one m16 fragment, four n8); the groups' sums meet in shared memory and each owner adds
// them in group order.
#pragma once

#include "chain/fused_sweep.cuh"
#include "core/mma.cuh"

namespace jb {
namespace fused {

// A row of the groups' sums where they meet: eight columns past the tile's, so that the fragments' 8-byte writes of
// half a warp fall in 32 banks.
enum { kMmaMeetPitch = kFusedCols + 8 };
static_assert(kFusedResidentSplit * kFusedRows * kMmaMeetPitch <=
                  2 * (kFusedResidentSplit - 1) * kFusedRows * kFusedCols,
              "the groups' sums meet inside the space fused_resident_floats keeps for them");

// The resident tile's product (its table's side staged: stage_resident_table) of the messages' factors staged in
// res.msg, every thread of the block having staged its part: each thread's sums of its owned row's four outputs
// (fused_tiles.cuh's owner: row ty·4 + g of its group g, columns tx·4 + j) in own.
template <int SPLIT>
__device__ __forceinline__ void mma_product(const Position& q, const Resident& res, float (&own)[4]) {
  static_assert(SPLIT * kFusedThreads == 512 && SPLIT == kFusedResidentSplit,
                "four groups of four warps, each warp 16 rows × 32 columns of the 32 × 64 tile");
  const int lane = int(threadIdx.x) % 32, w = q.l / 32, gid = lane / 4, tid = lane % 4;
  const int wm0 = (w & 1) * 16, wn0 = (w >> 1) * 32;
  // Fragment rows gid and gid + 8, sources tid and tid + 4 of each 8; the table's rows tid and tid + 4 of each 8,
  // whose groups of eight columns resident_column swaps by tid (k, a multiple of 8, adds nothing mod 4).
  const float* const a_lo = res.msg + (wm0 + gid) * res.pitch + tid;
  const float* const a_hi = a_lo + 8 * res.pitch;
  int col[4];
#pragma unroll
  for (int n = 0; n < 4; ++n) col[n] = resident_column(tid, wn0 + n * 8 + gid);
  float sum[4][4] = {};
  for (int k0 = q.g * kFusedK; k0 < res.sources; k0 += SPLIT * kFusedK) {
#pragma unroll 1
    for (int kk = 0; kk < kFusedK; kk += 8) {
      const int k = k0 + kk;
      const Tf32Pair a0 = finite_tf32_split(a_lo[k]), a1 = finite_tf32_split(a_hi[k]),
                     a2 = finite_tf32_split(a_lo[k + 4]), a3 = finite_tf32_split(a_hi[k + 4]);
      const unsigned ah[4] = {a0.hi, a1.hi, a2.hi, a3.hi}, al[4] = {a0.lo, a1.lo, a2.lo, a3.lo};
      const float* const b0 = res.table + (k + tid) * kFusedCols;
      const float* const b1 = b0 + 4 * kFusedCols;
#pragma unroll
      for (int n = 0; n < 4; ++n) {
        const Tf32Pair x = finite_tf32_split(b0[col[n]]), y = finite_tf32_split(b1[col[n]]);
        float d[4] = {0.f, 0.f, 0.f, 0.f};
        mma_tf32(d, al, x.hi, y.hi);
        mma_tf32(d, ah, x.lo, y.lo);
        mma_tf32(d, ah, x.hi, y.hi);
#pragma unroll
        for (int e = 0; e < 4; ++e) sum[n][e] += d[e];
      }
    }
  }
  // Fragment element e of tile n is row wm0 + gid + 8·(e / 2), column wn0 + n·8 + 2·tid + e % 2.
  float(*const meet)[kFusedRows][kMmaMeetPitch] = reinterpret_cast<float(*)[kFusedRows][kMmaMeetPitch]>(res.msg);
  __syncthreads(); // every group's reads of the messages done: their space is where the sums meet
#pragma unroll
  for (int n = 0; n < 4; ++n) {
    float* const at = &meet[q.g][wm0 + gid][wn0 + n * 8 + 2 * tid];
    *reinterpret_cast<float2*>(at) = make_float2(sum[n][0], sum[n][1]);
    *reinterpret_cast<float2*>(at + 8 * kMmaMeetPitch) = make_float2(sum[n][2], sum[n][3]);
  }
  __syncthreads();
  float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
  for (int h = 0; h < SPLIT; ++h) {
    const float4 v = *reinterpret_cast<const float4*>(&meet[h][q.ty * 4 + q.g][q.tx * 4]);
    s.x += v.x, s.y += v.y, s.z += v.z, s.w += v.w;
  }
  own[0] = s.x, own[1] = s.y, own[2] = s.z, own[3] = s.w;
}

} // namespace fused
} // namespace jb
