// exp_matmul's product on Hopper (math wgmma_tf32x3, wgmma_tf32, wgmma_bf16 and wgmma_bf16_fused; sm_90a): the
// warp-specialised pipeline of exp_matmul/pipeline.cuh over the workspace's panels of exponentiated operands, FORM 3 (the
// factors as they are, split into TF32 parts in shared memory), FORM 4 (rounded to TF32) or FORM 6 (rounded to BF16:
// Mma = WgBf16, for half outputs, bounded as math=bf16 in exp_matmul/bf16.cuh); or, MADE (FORM 7), over the factors
// its producer makes from a and b (exp_matmul/fused.cuh). The guard and the epilogue are the other forms' (EmFinish,
// EmFlagged).
#pragma once

#include "exp_matmul/product.cuh"
#include "exp_matmul/pipeline.cuh"
#include "exp_matmul/fused.cuh"

namespace jb {

template <class In, class Out, class I, int BM, int BN, int STAGES, bool SPLIT, class Mma = WgTf32, bool MADE = false>
__device__ __forceinline__ void exp_matmul_wgmma_kernel(const BmmParams p) {
  typedef float T;
  constexpr bool kHalf = sizeof(Out) == 2; // f16 and bf16 outputs (em_log_half)
  typedef WgPipeline<BM, BN, STAGES, SPLIT, Mma, MADE> P;
  typedef typename P::F F;
  // Whether the kernel skips void tiles (em_tile_void): not where the producer makes the factors (MADE), nor in
  // tiles of 256 columns, whose consumers have no registers for the next tile's line maxima.
  constexpr bool kVoidTiles = !MADE && BN <= 128;
  constexpr int kForm = MADE ? 7 : sizeof(F) == 2 ? 6 : SPLIT ? 3 : 4;
  extern __shared__ unsigned char em_wg_smem[];
  __shared__ __align__(8) unsigned long long bars[3 * STAGES];
  __shared__ __align__(16) T sh_a[BM], sh_b[BN];
  __shared__ __align__(16) EmLine line_a[BM], line_b[BN];
  P pipe(em_wg_smem, bars);
  // The tiles (TileList). The launch is persistent (a block an SM: Launch::blocks_per_sm): a block's producer fetches
  // a tile's first slices while its consumers finish the one before.
  typedef TileList<I, BM, BN> Tiles;
  const int group = threadIdx.x / 128;
  // Each role reads the workspace's view itself, after taking its registers: computed before the roles part, its
  // fields stayed live across setmaxnreg and spilled.
  if (group == 0) {
    P::enter_producer();
    const EmView<T> v = em_view<T, kForm>(p);
    const I Kp = (I)v.Kp;
    if constexpr (MADE) {
      em_make_factors<In, I, BM, BN, STAGES>(pipe, p, v, (int)threadIdx.x);
      return;
    }
    const I a_batch = v.a_batches == 1 ? 0 : (I)v.Mp, b_batch = v.b_batches == 1 ? 0 : (I)v.Np;
    for (I u = (I)blockIdx.x; u < Tiles::total(p); u += (I)gridDim.x) {
      const TileCoords<I> t = Tiles::at(p, u);
      if (kVoidTiles && em_tile_void(em_tile_lines<T, I, BM, BN>(p, v, t.batch, t.m0, t.n0)))
        continue; // its consumers skip it too
      pipe.produce(reinterpret_cast<const F*>(v.ea), reinterpret_cast<const F*>(v.eb), Kp,
                   WgTiles<I>{1, t.batch * a_batch + t.m0, 0, t.batch * b_batch + t.n0, 0, (I)v.Np - t.n0},
                   (int)threadIdx.x);
    }
    return;
  }
  P::enter_consumer();
  const EmView<T> v = em_view<T, kForm>(p);
  const I Kp = (I)v.Kp;
  const int cg = group - 1, warp = threadIdx.x / 32 % 4, lane = threadIdx.x % 32;
  typedef EmFinish<T, Out, I> Finish;
  // The line maxima of the block's next tile, loaded while the tile before it finishes (em_tile_void).
  EmTileLines<T, BM, BN> next;
  if (kVoidTiles && (I)blockIdx.x < Tiles::total(p)) {
    const TileCoords<I> t = Tiles::at(p, (I)blockIdx.x);
    next = em_tile_lines<T, I, BM, BN>(p, v, t.batch, t.m0, t.n0);
  }
  for (I u = (I)blockIdx.x; u < Tiles::total(p); u += (I)gridDim.x) {
    const TileCoords<I> t = Tiles::at(p, u);
    const bool void_tile = kVoidTiles && em_tile_void(next);
    // The tile's lines, copied while the tile's products run (their loads off the consumers' path).
    P::consumers_sync(); // the previous tile's epilogue is done with the staged lines
    em_stage_lines<T, I, BM, BN, P::kConsumerThreads, true>(p, v, t.batch, t.m0, t.n0, sh_a, sh_b, line_a, line_b,
                                                            threadIdx.x - 128);
    float acc[P::kRegs];
    // A void tile's producer issued no slices: its sums are the zeros consume() starts from.
    pipe.consume(acc, void_tile ? (I)0 : Kp, cg);
    if (kVoidTiles && u + (I)gridDim.x < Tiles::total(p)) {
      const TileCoords<I> after = Tiles::at(p, u + (I)gridDim.x);
      next = em_tile_lines<T, I, BM, BN>(p, v, after.batch, after.m0, after.n0);
    }
    copy_wait_all();
    // Every consumer's staged lines are in; for half outputs the barrier also says whether all of them are plain.
    const bool plain = P::consumers_all(
        kHalf ? em_staged_plain<T, BM, BN, P::kConsumerThreads>(sh_a, sh_b, threadIdx.x - 128) : true);
    const Finish finish(p, v, t.batch, line_a, line_b);
    const unsigned lo_bits = __float_as_uint(finish.lo); // half outputs: em_in_range's bound
    // Each warp's outputs: 16 rows (one 32-block) by the tile's BN columns, a thread's in two rows.
    typename Finish::Row rows[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = 64 * cg + wg_frag_row(warp, lane, 2 * h);
      rows[h] = finish.row(t.m0 + r, r, sh_a[r]);
    }
    // Register q holds row rows[q % 4 / 2] and column col(q) (hopper/wgmma.cuh's fragment).
    const auto col = [&](int q) {
      const int c = wg_frag_col(lane, q / 4, q % 4);
      return finish.col(t.n0 + c, c, sh_b[c]);
    };
    // The usual outputs in one pass, unrolled: a few instructions each (EmFinish::common), so even 128 of them stay
    // small beside the instruction cache. Where the output's rows are contiguous and 16-byte aligned, a warp's 32
    // columns at a time, stored in whole sectors (wg_store_block) when all of them are usual or lie past M;
    // otherwise an output at a time. Half outputs there take the shortest path: when the tile's lines are all plain
    // and the block lies inside N, an output is usual when its sum is in range (em_in_range), and its value is
    // em_log_half's, the column maxima read in pairs.
    // Whether the output's rows are contiguous and 16-byte aligned (read from the parameters here, where it is used:
    // kept across the main loop, it cost a register).
    const bool vectors = p.out_col == 1 && (reinterpret_cast<unsigned long long>(p.out) |
                                            (unsigned long long)p.out_batch * sizeof(Out) |
                                            (unsigned long long)p.out_row * sizeof(Out)) % 16 == 0;
    bool all = true;
    if (vectors) {
#pragma unroll
      for (int blk = 0; blk < BN / 32; ++blk) {
        bool usual = true;
        if constexpr (kHalf) {
          bool ok[2] = {true, true}; // each row's sums
#pragma unroll
          for (int q = 16 * blk; q < 16 * blk + 16; ++q) ok[q % 4 / 2] &= em_in_range(acc[q], lo_bits);
          usual = plain & (t.n0 + (I)(32 * blk + 32) <= (I)p.N) & (ok[0] | !rows[0].in) & (ok[1] | !rows[1].in);
        } else {
#pragma unroll
          for (int q = 16 * blk; q < 16 * blk + 16; ++q)
            usual &= finish.usual(acc[q], rows[q % 4 / 2], col(q)) | !rows[q % 4 / 2].in;
        }
        asm volatile("" ::: "memory"); // the columns read again below, not kept in registers
        if (__all_sync(0xffffffffu, usual)) {
          Out* const at[2] = {rows[0].at + (t.n0 + 32 * blk), rows[1].at + (t.n0 + 32 * blk)};
          const bool in[2] = {rows[0].in, rows[1].in};
          wg_store_block<Out>(
              [&](int r) {
                const int q = 16 * blk + r;
                if constexpr (kHalf) {
                  const float2 m = reinterpret_cast<const float2*>(sh_b)[4 * (q / 4) + lane % 4]; // columns c, c + 1
                  return em_log_half(acc[q], rows[q % 4 / 2].max + finish.half_shift(q % 2 ? m.y : m.x));
                } else {
                  return em_log(acc[q], rows[q % 4 / 2].max + col(q).max, finish.ebias);
                }
              },
              at, in);
        } else {
          all = false; // the block's outputs, usual ones too, are written below
        }
        asm volatile("" ::: "memory"); // as below: a block's columns once the block before it is done
      }
    } else {
#pragma unroll
      for (int q = 0; q < P::kRegs; ++q) {
        all &= finish.common(acc[q], rows[q % 4 / 2], col(q));
        // A 32-column block's columns are read once the block before it is done (hoisted all together, they spilled).
        if (q % 16 == 15) asm volatile("" ::: "memory");
      }
    }
    if (__all_sync(0xffffffffu, all)) continue; // the warp as one: report() below shuffles across it
    // Any others, a 32-column block a pass (wg_next_block: the rare code stays one block's; a loop not unrolled, so
    // that the registers it moves need no copies), each pass's flagged outputs reported as it ends. A block the vector
    // path left has none of its outputs written yet, so there common() writes the usual ones first (and again, the
    // same values, in a block it stored).
    const auto rare_block = [&](int blk) {
      EmFlagged<1, 1> flagged;
#pragma unroll
      for (int q = 0; q < 16; ++q) {
        if (vectors) finish.common(acc[q], rows[q % 4 / 2], col(16 * blk + q));
        flagged.n[0][0] += finish.rare(acc[q], rows[q % 4 / 2], col(16 * blk + q));
      }
      flagged.report(v, t.batch, t.m0 + 64 * cg + 16 * warp, t.n0 + 32 * blk);
      wg_next_block(acc);
    };
#pragma unroll 1
    for (int blk = 0; blk < BN / 32; ++blk) rare_block(blk);
  }
}

} // namespace jb
