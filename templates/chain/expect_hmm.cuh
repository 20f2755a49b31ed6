// The HMM form's gradients of a chain expectation (templates/chain/expectation.cuh, whose HMM instances give the
// messages): those of p's tables and of the field's, no potential ever formed. In the HMM form state c's emission at
// position t is part of every edge into it (of the first position's score, initial[c] + emissions[0][c], at t = 0),
// so its gradients are the sums of those edges': with μ_t(c) the state's marginal and E_p[F | z_t = c] = before_t(c)
// + after_t(c), the same terms as an edge's ("_nodes", a thread a state and position). The first position's are also
// the initial table's. A transition is part of one edge a step, so its gradients are the edges' summed over the
// steps ("_transitions", a block a tile of the table and a part of the steps; a shared table's parts into scratch,
// which "_reduce" adds in a fixed order, with the sequences' first positions for a shared initial table).
#pragma once

#include "chain/expectation.cuh"

namespace jb {

// "_nodes": the emissions' gradients [B][T][C] (0 past a length), the initial table's where it is per sequence, and
// where it is shared the first positions' into p.first ([2][B][C]: p's, then the field's).
template <class S, int C, int FIELD = kExpectGiven>
__device__ __forceinline__ void expect_hmm_nodes(const ExpectParams& p) {
  using T = typename Acc<S>::type;
  constexpr bool Q = FIELD != kExpectGiven;
  const long long n = p.B * p.T * C;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    const long long b = i / (p.T * C), t = i / C % p.T;
    const int c = int(i % C);
    const ExpectSequence<T, Q> seq(p, b);
    const bool inside = seq.bad || t < seq.L;
    const T* const alpha = static_cast<const T*>(p.alpha);
    const T* const beta = static_cast<const T*>(p.beta);
    T dp = T(0), df = T(0);
    expect_term_grads<T, FIELD>(
        seq, inside, [&] { return alpha[i] + beta[i] - seq.z; },
        [&] { return static_cast<const T*>(p.before)[i] + static_cast<const T*>(p.after)[i] - seq.mean; },
        [&] { return static_cast<const T*>(p.alpha_q)[i] + static_cast<const T*>(p.beta_q)[i] - seq.zq; }, dp, df);
    if (p.grad_emissions) static_cast<S*>(p.grad_emissions)[i] = from_acc<S>(dp);
    if (p.grad_field_emissions) static_cast<S*>(p.grad_field_emissions)[i] = from_acc<S>(df);
    if (t != 0) continue;
    if (p.batched_initial) {
      if (p.grad_initial) static_cast<S*>(p.grad_initial)[b * C + c] = from_acc<S>(dp);
      if (p.grad_field_initial) static_cast<S*>(p.grad_field_initial)[b * C + c] = from_acc<S>(df);
    } else {
      static_cast<T*>(p.first)[b * C + c] = dp;
      static_cast<T*>(p.first)[(p.B + b) * C + c] = df;
    }
  }
}

// "_transitions": block (tile, part) sums its tile's entries (c, q) over the part's steps, a thread
// kExpectEntriesPerThread entries: the part is a sequence's steps where the table is per sequence (written as its
// gradient), else a range of the B·(T − 1) steps of all of them (written to p.partials).
template <class S, int C, int FIELD = kExpectGiven>
__device__ __forceinline__ void expect_hmm_transitions(const ExpectParams& p) {
  using T = typename Acc<S>::type;
  constexpr bool Q = FIELD != kExpectGiven;
  constexpr long long E = (long long)C * C;
  constexpr int J = kExpectEntriesPerThread;
  const long long tiles = expect_tiles(C), steps = p.T - 1, parts = p.batched_transitions ? p.B : p.parts;
  const long long* const es = p.emission_strides;
  const long long* const ts = p.transition_strides;
  const bool same = !Q && p.field == p.potentials && p.field_emissions == p.emissions && p.field_initial == p.initial;
  for (long long block = blockIdx.x; block < tiles * parts; block += gridDim.x) {
    const long long tile = block % tiles, part = block / tiles;
    const long long from = p.batched_transitions ? part * steps : p.B * steps * part / parts,
                    to = p.batched_transitions ? from + steps : p.B * steps * (part + 1) / parts;
    const long long table = p.batched_transitions ? part * ts[0] : 0;
    T dp[J], df[J], r[J], f[J];
    int cs[J], qs[J];
#pragma unroll
    for (int j = 0; j < J; ++j) {
      const long long e = tile * kExpectTileEntries + threadIdx.x + j * kExpectEdgeThreads;
      cs[j] = e < E ? int(e / C) : 0, qs[j] = e < E ? int(e % C) : 0;
      const long long at = table + cs[j] * ts[1] + qs[j] * ts[2];
      // Chains of one position have no steps, and their transitions need not be given.
      r[j] = steps > 0 ? to_acc(static_cast<const S*>(p.potentials)[at]) : T(0);
      f[j] = same || steps == 0 ? r[j] : to_acc(static_cast<const S*>(p.field)[at]);
      dp[j] = df[j] = T(0);
    }
    // A thread whose entries are all past the table's (the last tile's) sums nothing.
    const bool entries = tile * kExpectTileEntries + threadIdx.x < E;
    for (long long row = entries ? from : to; row < to; ++row) {
      const long long b = row / steps, t = row % steps;
      const ExpectSequence<T, Q> seq(p, b);
      const bool inside = seq.bad || t + 1 < seq.L;
      if (!seq.asked(inside) && !seq.asked_q(inside)) continue;
      const long long at = (b * p.T + t) * C, next = at + C, em = b * es[0] + (t + 1) * es[1];
#pragma unroll
      for (int j = 0; j < J; ++j) {
        const int c = cs[j], q = qs[j];
        const T e = to_acc(static_cast<const S*>(p.emissions)[em + c * es[2]]);
        const T fe = same ? e : to_acc(static_cast<const S*>(p.field_emissions)[em + c * es[2]]);
        const T rt = r[j] + e, ft = f[j] + fe;
        expect_term_grads<T, FIELD>(
            seq, inside,
            [&] {
              return static_cast<const T*>(p.alpha)[at + q] + rt + static_cast<const T*>(p.beta)[next + c] - seq.z;
            },
            [&] {
              return static_cast<const T*>(p.before)[at + q] + (FIELD == kExpectDifference ? rt - ft : ft) +
                     static_cast<const T*>(p.after)[next + c] - seq.mean;
            },
            [&] {
              return static_cast<const T*>(p.alpha_q)[at + q] + ft + static_cast<const T*>(p.beta_q)[next + c] - seq.zq;
            },
            dp[j], df[j]);
      }
    }
#pragma unroll
    for (int j = 0; j < J; ++j) {
      const long long e = tile * kExpectTileEntries + threadIdx.x + j * kExpectEdgeThreads;
      if (e >= E) continue;
      if (p.batched_transitions) {
        if (p.grad_transitions) static_cast<S*>(p.grad_transitions)[part * E + e] = from_acc<S>(dp[j]);
        if (p.grad_field_transitions) static_cast<S*>(p.grad_field_transitions)[part * E + e] = from_acc<S>(df[j]);
      } else {
        static_cast<T*>(p.partials)[2 * part * E + e] = dp[j];
        static_cast<T*>(p.partials)[(2 * part + 1) * E + e] = df[j];
      }
    }
  }
}

// "_reduce": a shared transition table's gradients, a thread an entry adding its parts in order, and a shared
// initial table's, a warp a state adding the sequences' first positions: each lane every 32nd sequence, then the
// lanes in a fixed tree, so that the sum over many sequences takes B / 32 steps and the same order every time.
template <class S, int C> __device__ __forceinline__ void expect_hmm_reduce(const ExpectParams& p) {
  using T = typename Acc<S>::type;
  constexpr long long E = (long long)C * C, E32 = (E + 31) / 32 * 32;
  const T* const partials = static_cast<const T*>(p.partials);
  const T* const firsts = static_cast<const T*>(p.first);
  const long long n = expect_reduce_items(C);
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    T sp = T(0), sf = T(0);
    if (i < E32) {
      if (i >= E || p.batched_transitions || (!p.grad_transitions && !p.grad_field_transitions)) continue;
      for (long long part = 0; part < p.parts; ++part)
        sp += partials[2 * part * E + i], sf += partials[(2 * part + 1) * E + i];
      if (p.grad_transitions) static_cast<S*>(p.grad_transitions)[i] = from_acc<S>(sp);
      if (p.grad_field_transitions) static_cast<S*>(p.grad_field_transitions)[i] = from_acc<S>(sf);
    } else { // a whole warp of one state: the same branch for all of its lanes
      if (p.batched_initial || (!p.grad_initial && !p.grad_field_initial)) continue;
      const long long c = (i - E32) / 32;
      const int lane = int((i - E32) % 32);
      for (long long b = lane; b < p.B; b += 32) sp += firsts[b * C + c], sf += firsts[(p.B + b) * C + c];
#pragma unroll
      for (int d = 16; d > 0; d /= 2)
        sp += __shfl_down_sync(0xffffffffu, sp, d), sf += __shfl_down_sync(0xffffffffu, sf, d);
      if (lane != 0) continue;
      if (p.grad_initial) static_cast<S*>(p.grad_initial)[c] = from_acc<S>(sp);
      if (p.grad_field_initial) static_cast<S*>(p.grad_field_initial)[c] = from_acc<S>(sf);
    }
  }
}

} // namespace jb
