// A warp-specialised wgmma product of two operands stored in the exp-matmul workspace's panels (em_panel_at, both
// K-major: lines of Kp values), for the exp_matmul forward and backward on Hopper (sm_90a).
//
// Warpgroup 0 produces. One of its threads moves each slice of the block tile (BM lines of a, BN of b; a slice is a
// 128-byte line of each: 32 k of TF32's 4-byte values, 64 of BF16's 2-byte ones) into one of STAGES shared-memory
// stages with bulk copies (hopper/bulk_copy.cuh): the panels lie as wgmma reads them. With SPLIT the
// whole warpgroup then splits the landed slice into TF32 high parts (in place) and low parts (beside them), so each
// value crosses L2 once, as f32; the next slice's copies are issued before the split, so they land meanwhile.
// Warpgroups 1 .. BM/64 consume: each computes 64 lines of a × BN lines of b.
//
// MADE (BF16): the producer warpgroup writes every stage itself, from a and b as they lie (exp_matmul/fused.cuh:
// em_make_factors), and b's slice is N-major (wg_descriptor_n_major); the consumers then wait on `split` as with
// SPLIT, and `full` goes unused.
//
// Barriers per stage: `full` (the slice's bytes have landed), `split` (SPLIT: its parts are written, 128 arrivals),
// `empty` (every consumer warp is done reading it, 4 arrivals a consumer warpgroup). Producer and consumers walk the
// same slices in the same order (tile after tile, then k), so the block's n-th slice uses stage n % STAGES, and its
// barriers' phase of parity (n / STAGES) % 2.
//
// Without SPLIT the operands hold the values Mma multiplies (WgTf32: TF32; WgBf16: BF16) and every product chains
// into the accumulators, one slice's products in flight while the next one's are issued. With SPLIT there are three
// products per term, hi·hi + hi·lo + lo·hi (lo·lo is below 2^-22 of the term). The tensor cores add with truncation, so
// each slice's products go into a fresh partial accumulator that is then added to the f32 total with a rounded add: the
// truncation never compounds over K (as in em_mma_tile).
#pragma once

#include "core/async_copy.cuh"
#include "core/mma.cuh"
#include "hopper/bulk_copy.cuh"
#include "hopper/wgmma.cuh"
#include "exp_matmul/factors.cuh"

namespace jb {

// The producer's split of one landed stage of BYTES bytes (thread tid of 128): each value x becomes tf32(x) in
// place, and tf32(x − tf32(x)) BYTES further on (core/mma.cuh; the factors, H and V are finite: a line or element that
// is not has 0 there). Consecutive threads take consecutive 16 bytes.
template <int BYTES> __device__ __forceinline__ void wg_split(unsigned char* stage, int tid) {
  static_assert(BYTES % (16 * 128) == 0, "whole 16-byte vectors for every thread");
  constexpr int kVectors = BYTES / (16 * 128);
  float4* const hi = reinterpret_cast<float4*>(stage) + tid;
  float4* const lo = reinterpret_cast<float4*>(stage + BYTES) + tid;
  float4 x[kVectors]; // every load first (at most 64 registers): no store waits for one
#pragma unroll
  for (int i = 0; i < kVectors; ++i) x[i] = hi[128 * i];
#pragma unroll
  for (int i = 0; i < kVectors; ++i) {
    const Tf32Pair sx = finite_tf32_split(x[i].x), sy = finite_tf32_split(x[i].y), sz = finite_tf32_split(x[i].z),
                   sw = finite_tf32_split(x[i].w);
    hi[128 * i] = make_float4(__uint_as_float(sx.hi), __uint_as_float(sy.hi), __uint_as_float(sz.hi),
                              __uint_as_float(sw.hi));
    lo[128 * i] = make_float4(__uint_as_float(sx.lo), __uint_as_float(sy.lo), __uint_as_float(sz.lo),
                              __uint_as_float(sw.lo));
  }
}

// The block's tiles for the producer, `count` of them: the t-th reads a's lines from a_line + t · a_step and b's from
// b_line + t · b_step; b_left: b's lines from b_line to its batch's end (a 256-line tile's second panel may lie past
// them; its stage bytes are then left as they are, and the consumers write none of its columns).
template <class I> struct WgTiles { I count, a_line, a_step, b_line, b_step, b_left; };

template <int BM, int BN, int STAGES, bool SPLIT, class Mma = WgTf32, bool MADE = false> struct WgPipeline {
  typedef typename Mma::Factor F;
  static constexpr int kLine = 128 / (int)sizeof(F); // k a slice
  static constexpr int kConsumers = BM / 64, kConsumerThreads = 128 * kConsumers, kRegs = BN / 2;
  static constexpr int kA = BM * 128, kB = BN * 128, kPart = kA + kB, kStage = (SPLIT ? 2 : 1) * kPart; // bytes
  static_assert((BM == 64 || BM == 128) && (BN == 64 || BN == 128 || BN == 256), "wgmma tile geometry");
  static_assert(STAGES >= 3, "one stage in the tensor cores, one being split or waited for, one landing");
  static_assert(!SPLIT || sizeof(F) == 4, "the split makes TF32 parts of 4-byte values");
  static_assert(!MADE || (!SPLIT && sizeof(F) == 2), "made stages hold BF16 factors");
  // With two consumer warpgroups (384 threads, 168 registers each at entry) the producer, which needs few, gives
  // registers to the consumers. The consumers' claim waits until the producer's release covers it, so the two
  // counts may add up to no more than the block holds from its entry: kProducerRegs + 2 · kConsumerRegs ≤ 3 · 168
  // (a larger claim never returns). A producer that makes the factors (MADE) keeps 56: at 40 it spilled.
  static constexpr int kProducerRegs = MADE ? 56 : 40, kConsumerRegs = MADE ? 224 : 232;
  static_assert(kProducerRegs + 2 * kConsumerRegs <= 3 * 168, "the block's registers at entry");
  // The producer's and the consumers' first step (a block of one consumer warpgroup has registers enough).
  static __device__ __forceinline__ void enter_producer() {
    if constexpr (kConsumers == 2) wg_release_registers<kProducerRegs>();
  }
  static __device__ __forceinline__ void enter_consumer() {
    if constexpr (kConsumers == 2) wg_claim_registers<kConsumerRegs>();
  }
  unsigned smem, full, split, empty; // shared addresses: the first stage, each kind's first barrier
  unsigned char* smem_ptr;           // the first stage
  unsigned n = 0;                    // the block's slices so far

  // Every thread of the block, first: `dyn` is the dynamic shared memory (STAGES × kStage from its first 1024-byte
  // boundary: the swizzle's period), `bars` room for 3 × STAGES barriers.
  __device__ __forceinline__ WgPipeline(unsigned char* dyn, unsigned long long* bars) {
    const unsigned raw = smem_addr(dyn);
    smem = (raw + 1023u) & ~1023u;
    smem_ptr = dyn + (smem - raw);
    full = smem_addr(bars), split = full + 8 * STAGES, empty = full + 16 * STAGES;
    if (threadIdx.x == 0) {
      for (int s = 0; s < STAGES; ++s) {
        mb_init(full + 8 * s, 1);
        mb_init(split + 8 * s, 128);
        mb_init(empty + 8 * s, 4 * kConsumers);
      }
      mb_init_fence();
    }
    __syncthreads();
  }

  // The producer warpgroup's thread tid: every slice of `tiles` in order (called once a block, or tile after tile:
  // the stages carry over, so a tile's first slices are issued while the consumers finish the tile before it).
  // Thread 0 issues slice q + 1's copies before the warpgroup splits slice q: a slice lands while the one before it
  // is split. (Issuing further ahead, or as soon as a stage frees, measured slower on the H100: the split then waits
  // on the consumers.)
  template <class I>
  __device__ __forceinline__ void produce(const F* a, const F* b, I Kp, const WgTiles<I>& tiles, int tid) {
    const I total = tiles.count * (Kp / kLine);
    const bool second = BN == 256 && tiles.b_left > 128;
    const unsigned bytes = kA + (BN == 256 && !second ? 128 * 128 : kB);
    I k = 0, a_line = tiles.a_line, b_line = tiles.b_line; // the next slice to issue
    auto issue = [&](I q) {
      const unsigned m = n + (unsigned)q, st = m % STAGES, stage = smem + st * kStage, bar = full + 8 * st;
      if (m >= STAGES) mb_wait(empty + 8 * st, (m / STAGES) % 2 ^ 1u); // the stage's previous slice is consumed
      mb_arrive_expect(bar, bytes);
      bulk_copy(stage, a + em_panel_at<kLine>(a_line, k, Kp), kA, bar);
      bulk_copy(stage + kA, b + em_panel_at<kLine>(b_line, k, Kp), BN == 256 ? 128 * 128 : kB, bar);
      if (second) bulk_copy(stage + kA + 128 * 128, b + em_panel_at<kLine>(b_line + 128, k, Kp), 128 * 128, bar);
      if ((k += kLine) == Kp) k = 0, a_line += tiles.a_step, b_line += tiles.b_step;
    };
    if (tid == 0 && total > 0) issue(0);
    for (I q = 0; q < total; ++q) {
      if (tid == 0 && q + 1 < total) issue(q + 1);
      if (SPLIT) {
        const unsigned m = n + (unsigned)q, st = m % STAGES;
        mb_wait(full + 8 * st, (m / STAGES) % 2);
        wg_split<kPart>(smem_ptr + st * kStage, tid);
        wg_fence_async_shared(); // the parts, written by ordinary stores, are read by the tensor cores next
        mb_arrive(split + 8 * st);
      }
    }
    n += (unsigned)total;
  }

  // Consumer warpgroup cg, one block tile: acc = its 64 lines of a × the BN lines of b (the fragment of hopper/wgmma.cuh).
  template <class I> __device__ __forceinline__ void consume(float (&acc)[kRegs], I Kp, int cg) {
    const unsigned a_rows = cg * 64 * 128, ready = SPLIT || MADE ? split : full;
    const bool leader = threadIdx.x % 32 == 0;
    float part[kRegs];
#pragma unroll
    for (int r = 0; r < kRegs; ++r) acc[r] = 0.f;
    unsigned held = 0; // without SPLIT: the stage whose products may still be in flight
    for (I s = 0; s < Kp / kLine; ++s, ++n) {
      const unsigned st = n % STAGES, stage = smem + st * kStage;
      mb_wait(ready + 8 * st, (n / STAGES) % 2);
      wg_fence();
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        const unsigned long long ah = wg_descriptor(stage + a_rows + 32 * kk),
                                 bh = MADE ? wg_descriptor_n_major(stage + kA + 2048 * kk)
                                           : wg_descriptor(stage + kA + 32 * kk);
        if (SPLIT) {
          const unsigned long long al = wg_descriptor(stage + kPart + a_rows + 32 * kk),
                                   bl = wg_descriptor(stage + kPart + kA + 32 * kk);
          Mma::template mma<BN>(part, al, bh, kk > 0);
          Mma::template mma<BN>(part, ah, bl, 1);
          Mma::template mma<BN>(part, ah, bh, 1);
        } else {
          Mma::template mma<BN, MADE>(acc, ah, bh, 1);
        }
      }
      wg_commit();
      if (SPLIT) {
        // Reading a wgmma's accumulators while any wgmma is in flight serialises them all (ptxas C7514), so the
        // slice's products complete first; the other consumer warpgroup keeps the tensor cores busy meanwhile.
        wg_wait<0>();
        if (leader) mb_arrive(empty + 8 * st);
        wg_pin(part);
#pragma unroll
        for (int r = 0; r < kRegs; ++r) acc[r] += part[r];
      } else if (MADE) {
        // The stage goes back as soon as its products are done, for the producer to copy the next slices into: it
        // is the slower side here, so keeping one slice's products in flight gains nothing.
        wg_wait<0>();
        if (leader) mb_arrive(empty + 8 * st);
      } else {
        wg_wait<1>(); // the previous slice's products are done: its stage goes back to the producer
        if (s > 0 && leader) mb_arrive(empty + 8 * held);
        held = st;
      }
    }
    if (!SPLIT && !MADE) {
      wg_wait<0>();
      if (Kp > 0 && leader) mb_arrive(empty + 8 * held);
    }
    wg_pin(acc);
  }

  // The consumer warpgroups' own barrier (barrier 0 is __syncthreads).
  static __device__ __forceinline__ void consumers_sync() {
    asm volatile("bar.sync 1, %0;" ::"n"(kConsumerThreads) : "memory");
  }
  // The same barrier, which also says whether x holds in every consumer thread.
  static __device__ __forceinline__ bool consumers_all(bool x) {
    int all;
    asm volatile("{\n.reg .pred p, q;\nsetp.ne.b32 p, %1, 0;\nbar.red.and.pred q, 1, %2, p;\nselp.b32 %0, 1, 0, q;\n}\n"
                 : "=r"(all)
                 : "r"((int)x), "n"(kConsumerThreads)
                 : "memory");
    return all;
  }
};

} // namespace jb
