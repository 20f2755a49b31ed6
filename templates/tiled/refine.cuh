// Strategy "tiled_refine" (max_plus, min_plus, max_times with argmax, f32 accumulators): the argmax in two passes,
// so that the product runs the fast term of the one without argmax, plus a note every GK k.
//
// Pass 1, the product (tiled_groups_kernel): the tiled kernel with the fast policy (one ⊗ and one NaN-propagating
// max/min a term, tiled/tiled.cuh), which also notes, for every output, the group of GK consecutive k in which its
// value last changed. The value changes only when a term is strictly better or the first NaN arrives, so that group
// is the first that holds a term equal to the final value (or the first NaN), and no term before it does. The note
// goes to the output's argmax slot.
//
// Pass 2, the refinement (refine_argmax_kernel): within that group alone, the first k of the group's best term, or
// its first NaN, is the one-pass kernel's argmax (Select, core/semirings.cuh). An output whose value never changed
// (every term the worst) keeps group 0 and gets k = 0, as Select does. A block takes a tile of outputs, sorts them
// by group in shared memory, then stages each group's slices of a and b once and refines that group's outputs, a
// thread each.
#pragma once

#include "core/limits.cuh"
#include "tiled/tiled.cuh"

namespace jb {

// Group notes are 16 bits, two outputs a register: column c's in the low half when c is even, the high half when odd.
__device__ __forceinline__ unsigned with_group(unsigned notes, int c, unsigned g) {
  return __byte_perm(notes, g, (c & 1) ? 0x5410 : 0x3254);
}
__device__ __forceinline__ int group_of(unsigned notes, int c) { return (c & 1) ? notes >> 16 : notes & 0xFFFFu; }

// At the end of group g: the outputs whose value changed since the last group's end note g. The values only improve
// or turn NaN, so "changed" is "differs, and was not NaN" (−0 and +0 do not differ).
template <int TM, int TN>
__device__ __forceinline__ void note_changes(const float (&acc)[TM][TN], float (&snap)[TM][TN],
                                             unsigned (&notes)[TM][(TN + 1) / 2], unsigned g) {
#pragma unroll
  for (int r = 0; r < TM; ++r)
#pragma unroll
    for (int c = 0; c < TN; ++c) {
      if (acc[r][c] != snap[r][c] && snap[r][c] == snap[r][c]) notes[r][c / 2] = with_group(notes[r][c / 2], c, g);
      snap[r][c] = acc[r][c];
    }
}

// The group length GK and the most groups a K has (MAX_GROUPS, as many as 4 × the refinement's threads) are the
// strategy's (generator/strategies/tiled_refine.cpp).
//
// Pass 1: P is the semiring's fast policy (float accumulators). No split-K (the strategy's check).
template <class P, class S, class In, class Out, class I, int BM, int BN, int BK, int TM, int TN, int GK>
__device__ __forceinline__ void tiled_groups_kernel(const BmmParams p) {
  typedef typename Acc<In>::type T;
  typedef Tile<T, BM, BN, BK, TM, TN> G;
  static_assert(GK % BK == 0, "a group is whole slices");
  __shared__ __align__(16) typename G::Smem sm;
  const In* A0 = static_cast<const In*>(p.a);
  const In* B0 = static_cast<const In*>(p.b);
  const T pad_a = S::pad_a(), pad_b = S::pad_b();
  // The next slice's loads ahead of the terms only at 16 outputs a thread or fewer, or 32 for 2-byte inputs, whose
  // chunks stay packed in half the registers until they land: the snapshots and notes take the registers (f32 at 8×4
  // with them ahead spills 12 bytes and is 3% slower; bf16 at 8×4 spills nothing and is 7% faster; H100).
  constexpr KSliceFetch kTileFetch =
      P::kFetch == kFetchBeforeUse && TM * TN <= (sizeof(In) == 2 ? 32 : 16) ? kFetchBeforeUse : kFetchAfterUse;
  for (I z = blockIdx.z; z < (I)p.B; z += gridDim.z) {
    const TileCoords<I> t = tile_coords<I, BM, BN>(p, z);
    float acc[TM][TN], snap[TM][TN];
    unsigned notes[TM][(TN + 1) / 2];
#pragma unroll
    for (int r = 0; r < TM; ++r) {
#pragma unroll
      for (int c = 0; c < TN; ++c) snap[r][c] = acc[r][c] = P::init(0);
#pragma unroll
      for (int c = 0; c < (TN + 1) / 2; ++c) notes[r][c] = 0;
    }
    typedef TileRegs<G, In> Regs;
    typename Regs::Word ra[Regs::kA], rb[Regs::kB];
    TileLoader<G, In, I> ld(sm, A0 + t.batch * (I)p.a_batch, B0 + t.batch * (I)p.b_batch, t, pad_a, pad_b, ra, rb);
    int slices = 0;
    unsigned group = 0;
    for (auto slice = kslice_loop<kTileFetch, kBarrierBetweenSlices>(ld, p, t.k_begin, t.k_end); slice.valid();
         slice.finish(p)) {
      slice.start(p);
      tile_terms<false, P, G>(sm, slice.buf, slice.k0, acc);
      if (++slices == GK / BK) {
        note_changes(acc, snap, notes, group++);
        slices = 0;
      }
    }
    if (slices) note_changes(acc, snap, notes, group); // the last group, short
    const I r0 = t.m0 + (threadIdx.x / (BN / TN)) * TM, c0 = t.n0 + (threadIdx.x % (BN / TN)) * TN;
    const bool empty = t.k_begin >= t.k_end; // K = 0: the semiring zero and argmax −1, and no second pass
#pragma unroll
    for (int r = 0; r < TM; ++r)
#pragma unroll
      for (int c = 0; c < TN; ++c)
        if (r0 + r < (I)p.M && c0 + c < (I)p.N)
          emit<T, Out, I>(p, t, r0 + r, c0 + c, empty ? S::finalize(S::init()) : P::value(acc[r][c]),
                          empty ? -1 : group_of(notes[r][c / 2], c));
  }
}

// The exclusive prefix sums of v[0..n) into out[0..n), n ≤ 4 · blockDim.x, blockDim.x = THREADS. Every thread calls
// it; shared memory `warp_sums` holds THREADS / 32 ints. Ends with a barrier.
template <int THREADS>
__device__ __forceinline__ void block_exclusive_scan(const int* v, int* out, int n, int* warp_sums) {
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  int own[4], sum = 0;
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    own[e] = 4 * tid + e < n ? v[4 * tid + e] : 0;
    sum += own[e];
  }
  int inclusive = sum;
#pragma unroll
  for (int d = 1; d < 32; d *= 2) {
    const int x = __shfl_up_sync(0xffffffffu, inclusive, d);
    if (lane >= d) inclusive += x;
  }
  if (lane == 31) warp_sums[warp] = inclusive;
  __syncthreads();
  int before = inclusive - sum;
  for (int w = 0; w < warp; ++w) before += warp_sums[w];
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    if (4 * tid + e < n) out[4 * tid + e] = before;
    before += own[e];
  }
  __syncthreads();
}

// Pass 2: a BM × BN tile of outputs a block of THREADS threads. P is pass 1's fast policy and Op the semiring's
// Select operation. An output's group is found again in two sweeps of its GK terms held in registers: the group's
// value by P's own arithmetic, then the first term equal to it, or the first NaN (if the value is not NaN no term
// is). Past K the operands are Op's pads, whose product is the worst value: never before a real term.
template <class P, class Op, class In, class I, int BM, int BN, int THREADS, int GK, int MAX_GROUPS>
__device__ __forceinline__ void refine_argmax_kernel(const BmmParams p) {
  static_assert(BM * BN % THREADS == 0 && BM * BN <= 65536 && 4 * THREADS >= MAX_GROUPS, "refine tile");
  static_assert(GK % 4 == 0 && THREADS % GK == 0 && THREADS % (4 * BN) == 0 && BM * GK % THREADS == 0 &&
                    BN * GK % THREADS == 0,
                "refine staging");
  constexpr int kItems = BM * BN / THREADS, kLoadA = BM * GK / THREADS, kLoadB = BN * GK / THREADS;
  constexpr int kRow = GK + 4;               // 16-byte rows; 8 consecutive rows start in 8 different bank quads
  constexpr int kFewGroups = 16, kChunk = 8; // kChunk: the outputs' groups a thread loads at once
  static_assert(kItems % kChunk == 0, "refine chunks");
  // Two staging buffers where they fit the static shared memory with the rest, else one.
  constexpr int kBuffers =
      2 * (BM + BN) * kRow * 4 + BM * BN * 2 + (2 * MAX_GROUPS + THREADS / 32) * 4 <= kMaxStaticSharedBytes ? 2 : 1;
  __shared__ __align__(16) float sa[kBuffers][BM][kRow], sb[kBuffers][BN][kRow];
  __shared__ unsigned short order[BM * BN]; // the tile's outputs (r · BN + c), by group
  __shared__ int count[MAX_GROUPS], end[MAX_GROUPS], warp_sums[THREADS / 32];
  const int tid = threadIdx.x, lane = tid % 32;
  const I K = (I)p.K, groups = (K + GK - 1) / GK; // ≤ MAX_GROUPS (the strategy's check)
  const I m0 = (I)blockIdx.y * BM, n0 = (I)blockIdx.x * BN;
  for (I z = blockIdx.z; z < (I)p.B; z += gridDim.z) {
    const In* A = static_cast<const In*>(p.a) + z * (I)p.a_batch;
    const In* B = static_cast<const In*>(p.b) + z * (I)p.b_batch;
    int* arg = p.argmax + z * (I)p.M * (I)p.N;
    // A group's slices of a (k fastest: a row's k are consecutive in a) and b (8 columns of 4 rows a warp: 32-byte
    // pieces of b, conflict-free stores), through registers; past K Op's pads. Load l of a thread: a's row
    // a_r + l · THREADS / GK at k a_t (a_step further in a than load l − 1), b's column b_c at k b_t + l · THREADS / BN
    // (b_step further). Whether a load's row (column) exists is the same for every group; a tile whose rows and
    // columns all exist (`whole`) loads a group inside K without any test.
    const int a_r = tid / GK, a_t = tid % GK, b_c = (tid / 4) % BN, b_t = tid % 4 + 4 * (tid / (4 * BN));
    const bool whole = m0 + BM <= (I)p.M && n0 + BN <= (I)p.N;
    const In* a_at = A + (m0 + a_r) * (I)p.a_row + (I)a_t * (I)p.a_col;
    const In* b_at = B + (I)b_t * (I)p.b_row + (n0 + b_c) * (I)p.b_col;
    const I a_step = (I)(THREADS / GK) * (I)p.a_row, b_step = (I)(THREADS / BN) * (I)p.b_row;
    unsigned rows_in = 0;
#pragma unroll
    for (int l = 0; l < kLoadA; ++l) rows_in |= (m0 + a_r + l * (THREADS / GK) < (I)p.M ? 1u : 0u) << l;
    const bool col_in = n0 + b_c < (I)p.N;
    float ra[kLoadA], rb[kLoadB];
    const auto fetch = [&](int g) {
      const I k0 = (I)g * GK, left = K - k0; // k - k0 < left: inside K
      const In* Ag = a_at + k0 * (I)p.a_col;
      const In* Bg = b_at + k0 * (I)p.b_row;
      if (whole && left >= GK) { // the same for every thread
#pragma unroll
        for (int l = 0; l < kLoadA; ++l) ra[l] = to_acc(Ag[l * a_step]);
#pragma unroll
        for (int l = 0; l < kLoadB; ++l) rb[l] = to_acc(Bg[l * b_step]);
        return;
      }
#pragma unroll
      for (int l = 0; l < kLoadA; ++l)
        ra[l] = a_t < left ? ((rows_in >> l) & 1u ? to_acc(Ag[l * a_step]) : 0.0f) : Op::pad_a();
#pragma unroll
      for (int l = 0; l < kLoadB; ++l)
        rb[l] = b_t + l * (THREADS / BN) < left ? (col_in ? to_acc(Bg[l * b_step]) : 0.0f) : Op::pad_b();
    };
    const auto land = [&](int buf) {
#pragma unroll
      for (int l = 0; l < kLoadA; ++l) sa[buf][a_r + l * (THREADS / GK)][a_t] = ra[l];
#pragma unroll
      for (int l = 0; l < kLoadB; ++l) sb[buf][b_c][b_t + l * (THREADS / BN)] = rb[l];
    };
    for (int g = tid; g < groups; g += THREADS) count[g] = 0;
    __syncthreads();
    // Count the groups, then place each output after its group's start (`end` moves from each group's start to its
    // end; the groups are read again, kChunk at a time, rather than held in registers). With few groups the lanes of
    // a warp that share one add once (else thousands of adds land on one word); with many, each adds its own (MATCH
    // is slow).
    // Item l of a thread is the tile's output tid + l · THREADS: column tid % BN, row tid / BN + l · THREADS / BN.
    const int* arg_at = arg + (m0 + tid / BN) * (I)p.N + n0 + tid % BN;
    const I arg_step = (I)(THREADS / BN) * (I)p.N;
    const bool out_col = n0 + tid % BN < (I)p.N;
    // One sweep over the items, their groups loaded kChunk at a time so that the loads are in flight together (−1
    // outside the outputs): counting them (place = false), or placing them (true).
    const bool few = groups <= kFewGroups; // the same for every thread
    const auto sweep = [&](bool place) {
      for (int l0 = 0; l0 < kItems; l0 += kChunk) {
        int gs[kChunk];
#pragma unroll
        for (int u = 0; u < kChunk; ++u) gs[u] = -1;
#pragma unroll
        for (int u = 0; u < kChunk; ++u)
          if (whole || (out_col && m0 + tid / BN + (l0 + u) * (THREADS / BN) < (I)p.M))
            gs[u] = arg_at[(l0 + u) * arg_step];
#pragma unroll
        for (int u = 0; u < kChunk; ++u) {
          const int g = gs[u];
          int* const counter = place ? end : count;
          int at = 0;
          if (few) {
            const unsigned peers = __match_any_sync(0xffffffffu, g);
            const int leader = __ffs(peers) - 1;
            if (g >= 0 && lane == leader) at = atomicAdd(&counter[g], __popc(peers));
            if (place) at = __shfl_sync(0xffffffffu, at, leader) + __popc(peers & ((1u << lane) - 1u));
          } else if (g >= 0) {
            at = atomicAdd(&counter[g], 1);
          }
          if (place && g >= 0) order[at] = (unsigned short)(tid + (l0 + u) * THREADS);
        }
      }
    };
    sweep(false);
    __syncthreads();
    block_exclusive_scan<THREADS>(count, end, (int)groups, warp_sums);
    sweep(true);
    __syncthreads();
    // The groups with outputs, in order: each one's slices staged in one buffer while the previous one's outputs are
    // refined from the other.
    const auto next_group = [&](int g) {
      while (g < (int)groups && count[g] == 0) ++g; // the same for every thread
      return g;
    };
    int g = next_group(0), buf = 0;
    fetch(g);
    land(0);
    __syncthreads();
    while (g < (int)groups) {
      const int after = next_group(g + 1);
      if (after < (int)groups) fetch(after);
      const int n = count[g];
      for (int q = tid; q < n; q += THREADS) {
        const int f = order[end[g] - n + q], r = f / BN, c = f % BN;
        float av[GK], bv[GK];
#pragma unroll
        for (int t = 0; t < GK; t += 4) {
          const float4 x = *reinterpret_cast<const float4*>(&sa[buf][r][t]);
          const float4 y = *reinterpret_cast<const float4*>(&sb[buf][c][t]);
          av[t] = x.x, av[t + 1] = x.y, av[t + 2] = x.z, av[t + 3] = x.w;
          bv[t] = y.x, bv[t + 1] = y.y, bv[t + 2] = y.z, bv[t + 3] = y.w;
        }
        typename P::Acc value = P::init(0);
#pragma unroll
        for (int t = 0; t < GK; ++t) P::update(value, av[t], bv[t], t);
        int at = 0;
        if (value == value) { // no term is NaN
#pragma unroll
          for (int t = GK - 1; t >= 0; --t) at = Op::times(av[t], bv[t]) == value ? t : at;
        } else {
#pragma unroll
          for (int t = GK - 1; t >= 0; --t) at = Op::times(av[t], bv[t]) != Op::times(av[t], bv[t]) ? t : at;
        }
        arg[(m0 + r) * (I)p.N + n0 + c] = g * GK + at;
      }
      if (kBuffers == 1) __syncthreads();                  // the group's reads, before its buffer is overwritten
      if (after < (int)groups) land(buf ^ (kBuffers - 1)); // two buffers: last read before the previous barrier
      __syncthreads();
      buf ^= kBuffers - 1;
      g = after;
    }
    __syncthreads(); // the counts are read to the last group before the next batch clears them
  }
}

} // namespace jb
