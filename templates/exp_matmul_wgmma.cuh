// exp_matmul's product on Hopper (math wgmma_tf32x3 and wgmma_tf32; sm_90a): the block's warpgroups each compute
// 64 rows × BN columns of the output tile with wgmma (wgmma.cuh) while cp.async fills the next stages. A K slice of
// both operands goes straight from the workspace into one of STAGES shared-memory buffers, in wgmma's layout.
//
// wgmma_tf32 reads FORM 1 (operands rounded to TF32) and chains every product into the accumulators.
// wgmma_tf32x3 reads FORM 3 (each factor as TF32 high and low parts) and adds three products per term,
// hi·hi + hi·lo + lo·hi (lo·lo is below 2^-22 of the term). The tensor cores add with truncation, so each slice's
// products go into a fresh partial accumulator that is then added to the f32 total with a rounded add: the
// truncation never compounds over K (as in em_mma_tile).
//
// The schedule of one block tile, slice s in stage s % STAGES:
//   wait for slice s's copies, fence them to the tensor cores' proxy, barrier (the stage of slice s − 2, whose
//   products every warpgroup has waited for, is now free); copy slice s + STAGES − 2 into it; issue slice s's
//   products; wait until at most they are in flight (wgmma_tf32) or done (wgmma_tf32x3, then add the partial).
// The guard and the epilogue are the other forms' (em_finish, em_report).
#pragma once

namespace jb {

// One operand's K slice [k0, k0 + BK) of ROWS rows (k-contiguous rows of pitch Kp in the workspace) into shared
// address dst, in wgmma's layout, 16 bytes a cp.async. Consecutive threads fill consecutive 16 bytes (the 8 rows
// of a core matrix, then the next 4 k), so the shared-memory writes never conflict. Rows at or past `rows` are
// zero-filled without being read.
template <int ROWS, int BK, int THREADS, class I>
__device__ __forceinline__ void em_wg_copy(unsigned dst, const float* src, I Kp, I k0, I rows) {
  constexpr int kChunks = ROWS * BK / 4, kLoads = (kChunks + THREADS - 1) / THREADS;
#pragma unroll
  for (int l = 0; l < kLoads; ++l) {
    const int c = threadIdx.x + l * THREADS;
    if (kChunks % THREADS == 0 || c < kChunks) {
      const int row = (c / (8 * (BK / 4))) * 8 + c % 8, kc = (c / 8) % (BK / 4);
      const bool in = (I)row < rows;
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst + c * 16),
                   "l"(src + (in ? (I)row : (I)0) * Kp + k0 + kc * 4), "r"(in ? 16 : 0));
    }
  }
}
template <int N> __device__ __forceinline__ void em_copy_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }

template <class In, class Out, class I, int BM, int BN, int BK, int STAGES, bool SPLIT>
__device__ __forceinline__ void exp_matmul_wgmma_kernel(const BmmParams p) {
  typedef float T;
  constexpr int kThreads = 2 * BM, kRegs = BN / 2, kParts = SPLIT ? 2 : 1;
  constexpr int kA = BM * BK * 4, kB = BN * BK * 4, kStage = kParts * (kA + kB);
  static_assert((BM == 64 || BM == 128) && (BN == 64 || BN == 128 || BN == 256) && BK % 8 == 0 && 32 % BK == 0,
                "wgmma tile geometry");
  static_assert(STAGES >= 3, "one stage in the tensor cores, one landing, one being filled");
  extern __shared__ __align__(128) unsigned char em_wg_smem[];
  __shared__ T sh_a[BM], sh_b[BN];
  __shared__ EmLine line_a[BM], line_b[BN];
  const EmView<T> v = em_view<T>(p);
  const T threshold = EmReal<T>::pow2(v.guard);
  const I Kp = (I)v.Kp, Mp = (I)v.Mp, Np = (I)v.Np, slices = Kp / BK;
  const unsigned smem = em_smem_addr(em_wg_smem);
  const int group = threadIdx.x / 128, warp = threadIdx.x / 32 % 4, lane = threadIdx.x % 32;
  // This warpgroup's 64 rows of a within a stage, and the k-step offset (two core matrices: 8 k).
  const unsigned a_rows = (unsigned)wg_offset<BK>(64 * group, 0);
  for (I z = blockIdx.z; z < (I)p.B; z += gridDim.z) {
    const TileCoords<I> t = tile_coords<I, BM, BN>(p, z);
    const I ao = ((v.a_batches == 1 ? 0 : t.batch) * Mp + t.m0) * Kp;
    const I bo = ((v.b_batches == 1 ? 0 : t.batch) * Np + t.n0) * Kp;
    const I b_rows = Np - t.n0; // rows past the padding (BN = 256 over a 128-padded N) are zero-filled
    const auto fetch = [&](I s) {
      if (s < slices) {
        const unsigned st = smem + (unsigned)(s % STAGES) * kStage;
        em_wg_copy<BM, BK, kThreads>(st, v.ea + ao, Kp, s * BK, (I)BM);
        em_wg_copy<BN, BK, kThreads>(st + kA, v.eb + bo, Kp, s * BK, b_rows);
        if (SPLIT) {
          em_wg_copy<BM, BK, kThreads>(st + kA + kB, v.ea_lo + ao, Kp, s * BK, (I)BM);
          em_wg_copy<BN, BK, kThreads>(st + 2 * kA + kB, v.eb_lo + bo, Kp, s * BK, b_rows);
        }
      }
      em_copy_commit(); // a group per slice, empty past the end, so the wait below counts uniformly
    };
    __syncthreads(); // the previous tile's products and epilogue are done with shared memory
#pragma unroll
    for (int s = 0; s < STAGES - 2; ++s) fetch((I)s);
    em_stage_lines<T, I, BM, BN, kThreads>(p, v, t.batch, t.m0, t.n0, sh_a, sh_b, line_a, line_b);
    float acc[kRegs], part[kRegs];
#pragma unroll
    for (int r = 0; r < kRegs; ++r) acc[r] = 0.f;
    for (I s = 0; s < slices; ++s) {
      em_copy_wait<STAGES - 3>(); // slice s has landed (this thread's copies)
      wg_fence_async_shared();
      __syncthreads();
      fetch(s + STAGES - 2);
      const unsigned st = smem + (unsigned)(s % STAGES) * kStage;
      wg_fence();
#pragma unroll
      for (int kk = 0; kk < BK / 8; ++kk) {
        const unsigned long long ah = wg_descriptor<BK>(st + a_rows + kk * 256),
                                 bh = wg_descriptor<BK>(st + kA + kk * 256);
        if (SPLIT) {
          const unsigned long long al = wg_descriptor<BK>(st + kA + kB + a_rows + kk * 256),
                                   bl = wg_descriptor<BK>(st + 2 * kA + kB + kk * 256);
          wg_mma_tf32<BN>(part, al, bh, kk > 0);
          wg_mma_tf32<BN>(part, ah, bl, 1);
          wg_mma_tf32<BN>(part, ah, bh, 1);
        } else {
          wg_mma_tf32<BN>(acc, ah, bh, 1);
        }
      }
      wg_commit();
      if (SPLIT) {
        // Reading a wgmma's accumulators while any wgmma is in flight serialises them all (ptxas C7514), so the
        // slice's products complete first; the other warpgroup's keep the tensor cores busy meanwhile.
        wg_wait<0>();
        wg_pin(part);
#pragma unroll
        for (int r = 0; r < kRegs; ++r) acc[r] += part[r];
      } else {
        wg_wait<1>(); // slice s − 1's products are done: its stage may be refilled after the next barrier
      }
    }
    wg_wait<0>();
    wg_pin(acc);
    // Each warp's outputs lie in one 128-row repair tile and in BN / 128 (at least one) 128-column ones.
    constexpr int kHalves = BN > 128 ? BN / 128 : 1;
    unsigned flagged[kHalves];
#pragma unroll
    for (int h = 0; h < kHalves; ++h) flagged[h] = 0;
#pragma unroll
    for (int n = 0; n < BN / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = 64 * group + 16 * warp + lane / 4 + 8 * (e / 2), c = 8 * n + 2 * (lane % 4) + e % 2;
        const I i = t.m0 + r, j = t.n0 + c;
        if (i < (I)p.M && j < (I)p.N)
          flagged[c / 128 % kHalves] += em_finish<T, Out, I>(p, t, i, j, acc[4 * n + e], sh_a[r], sh_b[c],
                                                            em_all_neg_inf(line_a[r], line_b[c]), v, threshold);
      }
#pragma unroll
    for (int h = 0; h < kHalves; ++h)
      em_report<T, I>(v, t.batch, t.m0 + 64 * group + 16 * warp, t.n0 + 128 * h, flagged[h]);
  }
}

} // namespace jb
