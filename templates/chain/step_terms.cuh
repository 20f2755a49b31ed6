// The sequential kernels' step loader (templates/chain/sequential.cuh): where the terms a thread reduces come from.
// Step t's potentials of round r (the target state target(r) of the thread's group, its N sources lane, lane + G,
// …) are fetched ahead of their use, since they do not depend on the messages: a whole step's into registers during
// the step before (PREFETCH) where they fit there, else round by round through a ring of STAGES slots of shared
// memory that cp.async fills (each thread copies the terms it reduces itself, so no barrier guards the ring), else
// (STAGES ≤ 1) by the round itself. BETA reads the chain reversed: step t is the potentials of step L − 2 − t.
//
// A group's lanes read one target state's row of sources, so where a step's rows run along the sources (the
// forward's) a warp's loads take few lines of memory; where they run along the targets (the backward messages' of the
// CRF form) each lane's source is a line of its own, up to 32 a load. STAGED instead has the whole block load a
// step's slab (chain_slab_pitch) a step ahead, each thread its share along the targets (whole lines a warp), into
// registers, and store it into shared memory before the barrier that ends the step; a round then reads its terms
// there.
#pragma once

#include "chain/params.cuh"
#include "core/async_copy.cuh"
#include "core/dtypes.cuh"
#include "core/numbers.cuh"

namespace jb {

// One input element into shared memory as the accumulator type: an asynchronous copy where S is T, else (half
// types, whose 2 bytes cp.async cannot copy) a load, widened, and a store.
template <class S, class T> __device__ __forceinline__ void stage_element(T* dst, const S* src) {
  if constexpr (sizeof(S) == sizeof(T))
    copy_async<int(sizeof(T))>(dst, src);
  else
    *dst = to_acc(*src);
}

// A block's target states [first, end), GROUPS groups of a thread each round: round r's target state of this
// thread's group, or C for none.
template <int C, int GROUPS> struct ChainTargets {
  int first, end, group;
  __device__ __forceinline__ int operator()(int r) const {
    const int c = first + group + r * GROUPS;
    return c < end ? c : C;
  }
};

template <class S, int C, int NT, int G, int GROUPS, int ROUNDS, bool PREFETCH, int STAGES, bool STAGED, bool BETA,
          int CK>
struct StepTerms {
  using T = typename Acc<S>::type;
  static_assert(!STAGED || (!PREFETCH && STAGES == 0), "a staged loop's terms come from its slab alone");
  // N: a thread's terms of a round; P, SHARE: a staged slab's pitch and a thread's share of its C × CK elements
  // (enumerators: NVRTC emits constexpr members).
  enum : int { N = (C + G - 1) / G, P = chain_slab_pitch(CK, G), SHARE = (C * CK + NT - 1) / NT };
  // The stored terms of a step (PREFETCH: every round's, held a step ahead; else unused).
  using Buffer = S[PREFETCH ? ROUNDS : 1][N];
  // STAGED: a thread's share of a step's slab, from its loads to its stores.
  using Share = S[STAGED ? SHARE : 1];

  const S* pot;                   // the sequence's potentials
  long long s_t, s_to, s_from, L; // a step's stride, its target states' and its sources', the sequence's length
  int lane;                         // the thread's place in its group
  ChainTargets<C, GROUPS> target;
  // The ring (STAGES ≥ 2, dynamic shared memory from `ring`): slot s holds a round's N terms of every thread,
  // [s][k][tid]. Rounds are numbered along the chain (step t's round r is t · ROUNDS + r); fetch() copies the next
  // unfetched one, STAGES − 1 rounds ahead of the one reduced, as one group (empty past the last step).
  T* ring;
  // STAGED: two steps' slabs (dynamic shared memory), step t's at slab + (t & 1) · C · P; the thread's index.
  T* slab;
  int tid;
  long long fetch_t = 0;
  int fetch_r = 0, fetch_slot = 0, use_slot = 0;

  // Step t's row of target state c (of state 0 for none).
  __device__ __forceinline__ const S* row(long long t, int c) const {
    return pot + (BETA ? L - 2 - t : t) * s_t + (long long)(c < C ? c : 0) * s_to;
  }
  // Round r of step t as stored: widened only where reduced, so that a load a step ahead stays in flight until then.
  __device__ __forceinline__ void load(long long t, int r, S (&w)[N]) const {
    const S none = from_acc<S>(Num<T>::neg_inf());
    const int c = target(r);
    const S* at = row(t, c);
#pragma unroll
    for (int k = 0; k < N; ++k) {
      const int q = lane + k * G;
      w[k] = c < C && q < C ? at[(long long)q * s_from] : none;
    }
  }
  // Step t's C × C potentials into L2, where one of their two axes is contiguous (nothing otherwise): a line of 128
  // bytes per thread, each row's lines and its last byte's. Issued some steps ahead, so that the loads of ahead()
  // wait for L2 rather than for memory.
  __device__ __forceinline__ void to_l2(long long t, int tid) const {
    constexpr int kParts = (C * int(sizeof(S)) + 127) / 128 + 1;
    const bool by_from = s_from == 1;
    if (!by_from && s_to != 1) return;
    const char* const step = reinterpret_cast<const char*>(pot + (BETA ? L - 2 - t : t) * s_t);
    for (int i = tid; i < C * kParts; i += NT) {
      const int line = i / kParts, part = i % kParts;
      const long long at = (long long)line * (by_from ? s_to : s_from) * (long long)sizeof(S);
      const int offset = part + 1 < kParts ? part * 128 : C * int(sizeof(S)) - 1;
      asm volatile("prefetch.global.L2 [%0];" ::"l"(step + at + offset));
    }
  }
  __device__ __forceinline__ void fetch() {
    if (fetch_t + 1 < L) {
      const int c = target(fetch_r);
      const S* at = row(fetch_t, c);
      T* slot = ring + fetch_slot * N * NT;
#pragma unroll
      for (int k = 0; k < N; ++k) {
        const int q = lane + k * G;
        if (c < C && q < C)
          stage_element(slot + k * NT, at + (long long)q * s_from);
        else
          slot[k * NT] = Num<T>::neg_inf();
      }
    }
    copy_commit();
    if (++fetch_r == ROUNDS) fetch_r = 0, ++fetch_t;
    fetch_slot = fetch_slot + 1 == STAGES ? 0 : fetch_slot + 1;
  }
  // Before the first step: the ring's first STAGES − 1 rounds.
  __device__ __forceinline__ void prime() {
    if (STAGES > 1)
      for (int s = 0; s + 1 < STAGES; ++s) fetch();
  }
  // PREFETCH: step t's rounds into `fill`, a step ahead of their use.
  __device__ __forceinline__ void ahead(long long t, Buffer& fill) const {
#pragma unroll
    for (int r = 0; r < ROUNDS; ++r) load(t, r, fill[r]);
  }
  // STAGED: the thread's share of step t's slab, element i = tid + m · NT being source i / CK, target first + i % CK
  // (the targets run along consecutive threads); −inf past the block's last target.
  __device__ __forceinline__ void gather(long long t, Share& w) const {
    const S none = from_acc<S>(Num<T>::neg_inf());
    const S* const step = pot + (BETA ? L - 2 - t : t) * s_t;
#pragma unroll
    for (int m = 0; m < SHARE; ++m) {
      const int i = tid + m * NT, q = i / CK, c = target.first + i % CK;
      w[m] = i < C * CK && c < target.end ? step[(long long)c * s_to + (long long)q * s_from] : none;
    }
  }
  // STAGED: the share into step t's slab; seen by the block after the barrier that ends the step before step t.
  __device__ __forceinline__ void place(long long t, const Share& w) const {
    T* const at = slab + (t & 1) * (C * P);
#pragma unroll
    for (int m = 0; m < SHARE; ++m) {
      const int i = tid + m * NT;
      if (i < C * CK) at[(i / CK) * P + i % CK] = to_acc(w[m]);
    }
  }
  // Round r of step t, widened: from `use` (PREFETCH), the slab, the ring, or loaded now.
  __device__ __forceinline__ void take(long long t, int r, const Buffer& use, T (&x)[N]) {
    if (STAGED) {
      const int c = target(r);
      const T* const at = slab + (t & 1) * (C * P) + (c < C ? c - target.first : 0);
#pragma unroll
      for (int k = 0; k < N; ++k) {
        const int q = lane + k * G;
        x[k] = c < C && q < C ? at[q * P] : Num<T>::neg_inf();
      }
    } else if (PREFETCH) {
#pragma unroll
      for (int k = 0; k < N; ++k) x[k] = to_acc(use[r][k]);
    } else if (STAGES > 1) {
      fetch(); // into the slot the previous round emptied
      copy_wait<(STAGES > 1 ? STAGES - 1 : 0)>();
      const T* slot = ring + use_slot * N * NT;
#pragma unroll
      for (int k = 0; k < N; ++k) x[k] = slot[k * NT];
      use_slot = use_slot + 1 == STAGES ? 0 : use_slot + 1;
    } else {
      S w[N];
      load(t, r, w);
#pragma unroll
      for (int k = 0; k < N; ++k) x[k] = to_acc(w[k]);
    }
  }
};

} // namespace jb
