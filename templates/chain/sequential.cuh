// The linear chain with one block per sequence, sequential along T: the messages stay in shared memory, and each
// step's C² terms are spread over the block, G lanes of a warp per target state combined by shuffles. The kernel is
// a skeleton of three parts: the step loader (StepTerms, templates/chain/step_terms.cuh) brings each round's
// potentials ahead of their use, the reduction (Op, templates/chain/reductions.cuh) forms a target state's ⊕, and
// the output policy (ChainOutputs, templates/chain/chain_outputs.cuh) writes what the caller asked for. The
// messages are kept near 0 with their offsets in double (templates/chain/params.cuh).
//
// The inputs' storage type S may be a half type (f16, bf16): every value read is widened to the accumulator type T
// (Acc<S>), which the messages, the score, alpha and grad_score have; only the inputs' gradients are in S.
//
// The backward messages beta depend on the potentials alone, not on alpha: when the forward saves its messages for
// a backward, a second block per sequence runs the same recursion over the reversed chain at the same time, on SMs
// one block per sequence leaves idle. What is left for the backward, the edge marginals, is independent per step
// and spreads over the whole GPU (templates/chain/marginals.cuh).
#pragma once

#include "chain/chain_outputs.cuh"
#include "chain/lengths.cuh"
#include "chain/params.cuh"
#include "chain/reductions.cuh"
#include "chain/shift.cuh"
#include "chain/step_terms.cuh"
#include "core/async_copy.cuh"
#include "core/cluster.cuh"
#include "core/dtypes.cuh"
#include "core/numbers.cuh"

namespace jb {

// The largest of n values in shared memory (NaN wins). Every warp of a block reads them after the step's barrier, so
// the depth of the comparisons is on each step's path: up to 16 (a block's warps) by a tree, more (a cluster's) in
// turn, as a tree of them would hold them all in registers at once.
template <class T, int n> __device__ __forceinline__ T largest(const T* x) {
  if constexpr (n == 1) {
    return x[0];
  } else if constexpr (n > 16) {
    T o = x[0];
#pragma unroll
    for (int i = 1; i < n; ++i) o = Num<T>::max(o, x[i]);
    return o;
  } else {
    return Num<T>::max(largest<T, n / 2>(x), largest<T, n - n / 2>(x + n / 2));
  }
}

// The largest of the per-warp maxima a step left (its shift; 0 where it is not finite: all −inf, +inf or NaN keep
// their values unshifted).
template <class T, int WARPS> __device__ __forceinline__ T step_shift(const T* warp_max) {
  return finite_or_zero(largest<T, WARPS>(warp_max));
}

// The forward: score[b], and what the caller asked for of saved (rel, offset, logz), alpha and the best path.
// One cluster of K blocks of NT threads per sequence (cluster blockIdx.x / K); C states; G lanes per target state.
// With BETA, cluster blockIdx.x / K − B (chain_saving launches 2B clusters) computes that sequence's backward
// messages into saved (beta_rel, beta_offset) instead: beta_{L−1} = 0 and beta_t[p] = ⊕_c potentials[t][c][p] ⊗
// beta_{t+1}[c], the forward's step with t reversed and the roles of c and p swapped.
//
// With K > 1 the blocks of a cluster split the target states, CK each, so that a step's potentials are read by K
// SMs instead of one: every block keeps all the messages, writes each result it computes into the shared memory of
// every block of the cluster, and the cluster's barrier ends the step where the block's would.
//
// With HMM the potentials are transitions[c][p] (s_t = 0) and emissions[t + 1][c], which, one value per target
// state, is ⊗-ed onto the step's result instead of onto each term; the first messages are initial[p] ⊗
// emissions[0][p]. Its backward messages carry their position's emissions as well (beta_{L−1}[c] = emissions[L −
// 1][c], and each step ⊗-es emissions[t][p] onto its result), which is what makes them the same recursion. The
// transitions do not change along the chain, so with PREFETCH they are loaded once and stay in registers.
template <class S, class Op, int C, int NT, int G, bool PREFETCH, int STAGES, bool STAGED, bool BETA = false,
          bool HMM = false, int K = 1>
__device__ __forceinline__ void chain_forward(const ChainParams& p) {
  using T = typename Acc<S>::type;
  constexpr int CK = (C + K - 1) / K, GROUPS = NT / G, ROUNDS = (CK + GROUPS - 1) / GROUPS, N = (C + G - 1) / G,
                WARPS = NT / 32;
  static_assert(NT % 32 == 0 && G <= 32 && 32 % G == 0, "a group is a power-of-two part of a warp");
  static_assert(K >= 1 && K <= 16, "a cluster has 1 to 16 blocks");
  static_assert(!(STAGED && HMM), "the HMM form's transitions are the same every step: nothing to stage");
  using Terms = StepTerms<S, C, NT, G, GROUPS, ROUNDS, PREFETCH, STAGES, STAGED, BETA, CK>;
  __shared__ T msg[2][C];
  // Every warp's maximum of a step's results, of all the cluster's blocks: [rank · WARPS + warp].
  __shared__ T warp_max[2][K * WARPS];
  const int tid = threadIdx.x, lane = tid % G, group = tid / G;
  const ClusterShare<C, K> share;
  const unsigned rank = share.rank;
  const int first = share.first, end = share.end; // this block's target states
  const ChainTargets<C, GROUPS> target{first, end, group};
  constexpr bool beta = BETA;
  const long long b = (long long)(blockIdx.x / K) - (beta ? p.B : 0), T_ = p.T;
  bool bad;
  const long long L = chain_length(p, b, bad);
  // The dynamic shared memory: the step loader's ring or slabs, then with EMIT_SHARED the emissions.
  extern __shared__ __align__(16) unsigned char dynamic_bytes[];
  // A step's target states run along s_to, its sources along s_from.
  Terms terms{static_cast<const S*>(p.potentials) + b * p.s_b,
              p.s_t,
              beta ? p.s_p : p.s_c,
              beta ? p.s_c : p.s_p,
              L,
              lane,
              target,
              reinterpret_cast<T*>(dynamic_bytes) + tid,
              reinterpret_cast<T*>(dynamic_bytes),
              tid};
  const ChainOutputs<T, C, NT, K, BETA> out{
      p, b, T_, L, tid, first, end, rank, static_cast<T*>(beta ? p.beta_rel : p.rel), beta ? p.beta_offset : p.offset};
  const S* const em = static_cast<const S*>(p.emissions) + b * p.e_b;
  auto emission = [&](long long position, int c) { return to_acc(em[position * p.e_t + (long long)c * p.e_c]); };

  // HMM: the emissions a step ⊗-es on. With PREFETCH in registers, loaded as the step starts; otherwise (large C,
  // where registers are short) copied into shared memory during the step before: step t's into emit + (t & 1) · C,
  // one copy group, complete by the barrier that ends the step before.
  constexpr bool EMIT_SHARED = HMM && !PREFETCH;
  T* const emit = reinterpret_cast<T*>(dynamic_bytes) + (STAGES > 1 ? STAGES : 0) * N * NT;
  auto fetch_emissions = [&](long long t) {
    if (EMIT_SHARED && t + 1 < L)
      for (int c = tid; c < C; c += NT)
        stage_element(emit + (t & 1) * C + c, &em[(beta ? L - 2 - t : t + 1) * p.e_t + (long long)c * p.e_c]);
    copy_commit();
  };

  T first_max = Num<T>::neg_inf();
  for (int c = tid; c < C; c += NT) {
    T v = T(0);
    if (HMM)
      v = beta ? emission(L - 1, c)
               : to_acc(static_cast<const S*>(p.initial)[b * p.i_b + (long long)c * p.i_c]) + emission(0, c);
    msg[0][c] = bad ? Num<T>::nan() : v;
    first_max = Num<T>::max(first_max, v);
  }
  // Every block of a cluster computes the same first messages, so each fills every block's slots itself.
  if (HMM) {
    first_max = group_reduce<32>(first_max, [](T x, T y) { return Num<T>::max(x, y); });
    if (tid % 32 == 0)
      for (int k = 0; k < K; ++k) warp_max[0][k * WARPS + tid / 32] = first_max;
  } else if (tid < K * WARPS) {
    warp_max[0][tid] = T(0);
  }
  if (EMIT_SHARED) {
    fetch_emissions(0);
    copy_wait_all();
  }
  if (STAGED && L > 1) {
    typename Terms::Share w;
    terms.gather(0, w);
    terms.place(0, w);
  }
  share.sync(); // with a cluster, also: no block writes into another's shared memory before that block has started

  terms.prime();

  // Step t (positions t → t + 1) reduces the potentials in `use` (with PREFETCH; else the loader brings them round
  // by round) and loads a later step's into `fill`: step t + 1's, the loop running two steps an iteration with the
  // buffers swapped, so no copy waits for the loads (the HMM form's transitions stay in one buffer); or, where
  // chain_loads_deep, step t + 2's, the loop running three steps an iteration with the buffers rotated, and step t +
  // kL2Steps's asked of L2, so that those loads find their lines there.
  constexpr bool DEEP = PREFETCH && !HMM && chain_loads_deep(Op::kLog, HMM, C, K);
  constexpr long long kL2Steps = 4;
  using Buffer = typename Terms::Buffer;
  double offset = 0;
  auto step = [&](long long t, Buffer& use, Buffer& fill) {
    const int from = int(t & 1), to = from ^ 1;
    const T shift = step_shift<T, K * WARPS>(warp_max[from]);
    if (EMIT_SHARED) fetch_emissions(t + 1);
    offset += double(shift);
    out.position(t, msg[from], shift, offset);
    T a[N];
#pragma unroll
    for (int k = 0; k < N; ++k) a[k] = lane + k * G < C ? msg[from][lane + k * G] - shift : Num<T>::neg_inf();
    // HMM: the emissions of the position this step reaches, one per round's target state.
    const long long reached = beta ? L - 2 - t : t + 1;
    T e[PREFETCH ? ROUNDS : 1];
    if (HMM && PREFETCH)
#pragma unroll
      for (int r = 0; r < ROUNDS; ++r) e[r] = target(r) < C ? emission(reached, target(r)) : T(0);
    if (PREFETCH && !HMM && !DEEP && t + 2 < L) terms.ahead(t + 1, fill);
    typename Terms::Share staged;
    if (STAGED && t + 2 < L) terms.gather(t + 1, staged);
    if (DEEP && t + 3 < L) terms.ahead(t + 2, fill);
    if (DEEP && t + kL2Steps + 1 < L) terms.to_l2(t + kL2Steps, tid);
    T best = Num<T>::neg_inf();
    // Without PREFETCH every round loads its own terms: two at a time overlap their loads without the registers
    // of every round at once (one at a time for HMM's widest rounds of doubles, which two would spill).
    constexpr int kRoundUnroll = PREFETCH ? ROUNDS : HMM && sizeof(T) == 8 && N >= 32 ? 1 : 2;
#pragma unroll kRoundUnroll
    for (int r = 0; r < ROUNDS; ++r) {
      const int c = target(r);
      const T er = !HMM ? T(0) : PREFETCH ? e[PREFETCH ? r : 0] : c < C ? emit[(t & 1) * C + c] : T(0);
      T x[N];
      terms.take(t, r, use, x);
#pragma unroll
      for (int k = 0; k < N; ++k) x[k] += a[k];
      int arg;
      T v = Op::template reduce<G>(x, lane, arg);
      if (HMM) v += er;
      if (c < C) {
        if (lane == 0) {
          msg[to][c] = v;
          for (int k = 1; k < K; ++k) cluster_store(&msg[to][c], (rank + k) % K, v);
          if (p.back) p.back[(b * T_ + t + 1) * C + c] = (unsigned short)arg;
        }
        best = Num<T>::max(best, v);
      }
    }
    best = across_groups<G>(best, [](T x, T y) { return Num<T>::max(x, y); });
    if (tid % 32 == 0) {
      T* slot = &warp_max[to][rank * WARPS + tid / 32];
      *slot = best;
      for (int k = 1; k < K; ++k) cluster_store(slot, (rank + k) % K, best);
    }
    // The next step's emissions: the groups committed after theirs are this step's rounds of the ring.
    if (EMIT_SHARED) copy_wait<(STAGES > 1 ? (ROUNDS < STAGES - 1 ? ROUNDS : STAGES - 1) : 0)>();
    // The next step's slab, into the one the step before read.
    if (STAGED && t + 2 < L) terms.place(t + 1, staged);
    share.sync();
  };
  Buffer b0, b1, b2;
  if (PREFETCH && L > 1) terms.ahead(0, b0);
  if constexpr (DEEP) {
    if (L > 2) terms.ahead(1, b1);
    for (long long s = 2; s < kL2Steps && s + 1 < L; ++s) terms.to_l2(s, tid); // the loop asks from step kL2Steps
    for (long long t = 0; t + 1 < L; t += 3) {
      step(t, b0, b2);
      if (t + 2 < L) step(t + 1, b1, b0);
      if (t + 3 < L) step(t + 2, b2, b1);
    }
  } else {
    for (long long t = 0; t + 1 < L; t += 2) {
      step(t, b0, b1);
      if (t + 2 < L) step(t + 1, HMM ? b0 : b1, b0);
    }
  }

  const int last = int((L - 1) & 1);
  const T shift = step_shift<T, K * WARPS>(warp_max[last]);
  offset += double(shift);
  out.position(L - 1, msg[last], shift, offset);
  out.template score<Op>(msg[last], shift, offset, bad);
  out.past_length();
}

// The forward that saves its messages for the backward (log): clusters of K blocks, 0 to B − 1 run the forward
// messages with G lanes per state, B to 2B − 1 the backward messages with GB lanes (their potentials are read
// transposed, and fewer lanes per state read more of each row at once; STAGED_B: through a slab, StepTerms).
template <class S, class Op, int C, int NT, int G, bool PREFETCH, int STAGES, bool STAGED, int GB, bool PREFETCH_B,
          int STAGES_B, bool STAGED_B, bool HMM = false, int K = 1>
__device__ __forceinline__ void chain_saving(const ChainParams& p) {
  if (blockIdx.x / K >= p.B)
    chain_forward<S, Op, C, NT, GB, PREFETCH_B, STAGES_B, STAGED_B, true, HMM, K>(p);
  else
    chain_forward<S, Op, C, NT, G, PREFETCH, STAGES, STAGED, false, HMM, K>(p);
}

} // namespace jb
