// The k best paths of a chain (max_plus), a block a sequence (runtime/chain_kbest.cpp): Viterbi that keeps for every
// state the K best paths ending there, in order (a path's best continuation keeps its prefix among the K best of the
// prefix's end, so nothing better is dropped), then the K best over the last position's states, each followed back
// through the back-pointers. In the HMM form the first position's lists start from initial ⊗ emissions[0] and a step
// chooses among the lists ⊗ transitions, then ⊗-es the emission of the state it goes to onto the K chosen, as the HMM
// form's Viterbi does: the same for each of a state's candidates, it changes none of their order.
//
// The order is reference::chain_kbest's: the larger score first, NaN before every number, then the source state,
// then its rank there (ChainMax::beats on the index source · K + rank), so the first path is Viterbi's. A list's
// entry of −inf is no path, and a candidate from it is none whatever the potential (−inf + inf would be NaN).
//
// S is the storage type, T its accumulator type (Acc<S>); C states, K paths, G lanes a target state, NT threads a
// block and the form are compile-time.
#pragma once

#include "chain/kbest_params.cuh"
#include "chain/lengths.cuh"
#include "chain/reductions.cuh"
#include "core/cluster.cuh"
#include "core/dtypes.cuh"
#include "core/numbers.cuh"

namespace jb {

// A candidate of a selection: its score and index s · K + rank, or (−inf, kNoCandidate) for none, which beats no
// candidate (a candidate's score is never −inf) and which none beats (ChainMax::beats).
template <class T> struct KCandidate {
  T v;
  int i;
};
constexpr int kNoCandidate = 0x7fffffff;

// Where kbest_select merges sorted lists instead of taking K rounds of the group's best head: few ranks (2 to 4), few
// sources a lane and groups of 4 lanes (up to 16 states), where a branch-free network of compare-and-swaps is shorter
// than K rounds of shuffles and rescans, whose branches serialise the group's lanes. With groups of 16 and 32 lanes
// (64 and 128 states) it was slower, each further round of shuffles merging whole lists; with groups of 8 faster, but
// not yet checked against the reference there (bench/RESULTS.md, "Structured distributions of chains").
JB_HD constexpr int kbest_padded(int k) { return k <= 1 ? 1 : 2 * kbest_padded((k + 1) / 2); }
JB_HD constexpr bool kbest_merges(int k, int lanes, int sources) {
  return k >= 2 && k <= 4 && lanes <= 4 && sources <= 4;
}

// a := the better (ChainMax::beats) of a and b first, the other second.
template <class T> __device__ __forceinline__ void kbest_order(KCandidate<T>& a, KCandidate<T>& b) {
  const bool swap = ChainMax<T>::beats(b.v, b.i, a.v, a.i);
  const KCandidate<T> first{swap ? b.v : a.v, swap ? b.i : a.i}, second{swap ? a.v : b.v, swap ? a.i : b.i};
  a = first, b = second;
}

// a := the KP best of a and b, both in order (best first), in order: the better of a[j] and b[KP − 1 − j] for each j
// are the KP best as a bitonic sequence, which half-cleaners put in order.
template <class T, int KP>
__device__ __forceinline__ void kbest_merge(KCandidate<T> (&a)[KP], const KCandidate<T> (&b)[KP]) {
#pragma unroll
  for (int j = 0; j < KP; ++j) {
    const KCandidate<T>& o = b[KP - 1 - j];
    const bool take = ChainMax<T>::beats(o.v, o.i, a[j].v, a[j].i);
    a[j] = {take ? o.v : a[j].v, take ? o.i : a[j].i};
  }
#pragma unroll
  for (int d = KP / 2; d > 0; d /= 2)
#pragma unroll
    for (int j = 0; j < KP; ++j)
      if ((j & d) == 0) kbest_order(a[j], a[j + d]);
}

// kbest_select where kbest_merges: each lane merges its sources' lists (each in order: adding a source's w keeps it
// so), then the group's lanes merge theirs pairwise over log2 G rounds of shuffles, each lane ending with the K best.
template <class T, int C, int K, int G, int N, class Out>
__device__ __forceinline__ void kbest_merge_select(const T* lists, int lane, const T (&w)[N], Out out) {
  constexpr int KP = kbest_padded(K);
  auto list = [&](int j, KCandidate<T>(&c)[KP]) {
    const int s = lane + j * G;
#pragma unroll
    for (int r = 0; r < KP; ++r) {
      c[r] = {Num<T>::neg_inf(), kNoCandidate};
      if (r < K && s < C) {
        const T entry = lists[r * C + s], x = entry + w[j];
        if (entry != Num<T>::neg_inf() && x != Num<T>::neg_inf()) c[r] = {x, s * K + r};
      }
    }
  };
  KCandidate<T> best[KP], other[KP];
  list(0, best);
#pragma unroll
  for (int j = 1; j < N; ++j) {
    list(j, other);
    kbest_merge(best, other);
  }
#pragma unroll
  for (int o = G / 2; o > 0; o >>= 1) {
#pragma unroll
    for (int r = 0; r < KP; ++r)
      other[r] = {__shfl_xor_sync(0xffffffffu, best[r].v, o), __shfl_xor_sync(0xffffffffu, best[r].i, o)};
    kbest_merge(best, other);
  }
#pragma unroll
  for (int r = 0; r < K; ++r) {
    const bool found = best[r].i != kNoCandidate;
    out(r, found ? best[r].v : Num<T>::neg_inf(), found ? best[r].i : -1);
  }
}

// The K best of the candidates lists[r][s] + w(s) over the C sources s (rank-major, so that the lanes' first reads,
// of consecutive sources at rank 0, are of consecutive words), chosen by a group of G lanes (lane l holds the sources
// l, l + G, ... and their w, −inf past C), every lane of the warp taking part: out(r, score, index) for r < K in order,
// index = s · K + rank, or −inf and −1 where fewer are left. Each list is in order, so a source's next candidate is
// its next rank: K rounds of the group's best head, the winning lane then reading its own sources' heads again (or,
// where kbest_merges, kbest_merge_select: the same K in the same order).
template <class T, int C, int K, int G, int N, class Out>
__device__ __forceinline__ void kbest_select(const T* lists, int lane, const T (&w)[N], Out out) {
  static_assert(N == (C + G - 1) / G, "a lane's sources");
  if constexpr (kbest_merges(K, G, N)) {
    kbest_merge_select<T, C, K, G>(lists, lane, w, out);
    return;
  }
  constexpr int kNone = kNoCandidate;
  int head[N];
#pragma unroll
  for (int j = 0; j < N; ++j) head[j] = 0;
  T v;
  int index;
  auto lane_best = [&] {
    v = Num<T>::neg_inf();
    index = kNone;
#pragma unroll
    for (int j = 0; j < N; ++j) {
      const int s = lane + j * G;
      if (s >= C || head[j] >= K) continue;
      const T entry = lists[head[j] * C + s];
      if (entry == Num<T>::neg_inf()) continue;
      const T x = entry + w[j];
      if (x != Num<T>::neg_inf() && ChainMax<T>::beats(x, s * K + head[j], v, index)) v = x, index = s * K + head[j];
    }
  };
  lane_best();
#pragma unroll 1
  for (int r = 0; r < K; ++r) {
    T best = v;
    int at = index;
#pragma unroll
    for (int o = G / 2; o > 0; o >>= 1) {
      const T other = __shfl_xor_sync(0xffffffffu, best, o);
      const int other_at = __shfl_xor_sync(0xffffffffu, at, o);
      if (ChainMax<T>::beats(other, other_at, best, at)) best = other, at = other_at;
    }
    const bool found = at != kNone;
    out(r, found ? best : Num<T>::neg_inf(), found ? at : -1);
    if (found && at == index) { // this lane's source: its next rank
#pragma unroll
      for (int j = 0; j < N; ++j)
        if ((lane + j * G) * K + head[j] == index) ++head[j];
      lane_best();
    }
  }
}

// The main entry: scores[b][i] and (unless null) paths[b][i][t] of the K best paths of each sequence; −inf and −1
// past the paths a sequence has (those of a score other than −inf), −1 past its length; NaN scores and −1 paths for a
// length outside [1, T]. A sequence is a cluster of CL blocks (CL = 1: a block), each choosing for its share of a
// step's target states and storing their lists into every block's, so that a step's potentials are read through CL
// SMs; the cluster's barrier ends the step where the block's would, and the first block chooses the K best at the
// end and follows them back.
template <class S, int C, int K, int G, int NT, int CL = 1, bool HMM = false>
__device__ __forceinline__ void chain_kbest(const KBestParams& p) {
  using T = typename Acc<S>::type;
  static_assert(NT % 32 == 0 && NT % G == 0 && G <= 32 && (G & (G - 1)) == 0, "groups of lanes within warps");
  static_assert(CL >= 1 && CL <= kMaxKBestCluster, "a cluster of 1 to kMaxKBestCluster blocks");
  constexpr int GROUPS = NT / G, CK = (C + CL - 1) / CL;
  constexpr int PASSES = (CK + GROUPS - 1) / GROUPS, N = (C + G - 1) / G;
  extern __shared__ __align__(16) unsigned char kbest_bytes[];
  T* lists = reinterpret_cast<T*>(kbest_bytes); // two positions' [K][C], each state's ranks in order
  int* chosen = reinterpret_cast<int*>(lists + 2 * C * K); // the K best paths' last entries
  const int tid = threadIdx.x, lane = tid % G, group = tid / G;
  const ClusterShare<C, CL> share;
  const unsigned rank = share.rank;
  const int first = share.first, end = share.end; // this block's target states
  for (long long b = blockIdx.x / CL; b < p.B; b += gridDim.x / CL) {
    bool bad;
    const long long L = chain_length(p, b, bad);
    T* scores = static_cast<T*>(p.scores) + b * K;
    int* paths = p.paths && rank == 0 ? p.paths + b * K * p.T : nullptr; // null: the scores alone
    if (paths)
      for (long long i = tid; i < K * p.T; i += NT) paths[i] = -1;
    if (bad) {
      if (tid < K && rank == 0) scores[tid] = Num<T>::nan();
      continue;
    }
    const S* emissions = HMM ? static_cast<const S*>(p.emissions) + b * p.emission_strides[0] : nullptr;
    auto emission = [&](long long t, int s) {
      return to_acc(emissions[t * p.emission_strides[1] + s * p.emission_strides[2]]);
    };
    for (int i = tid; i < C * K; i += NT) {
      T start = T(0); // a path of one position at state i
      if constexpr (HMM)
        if (i < C)
          start = to_acc(static_cast<const S*>(p.initial)[b * p.initial_strides[0] + i * p.initial_strides[1]]) +
                  emission(0, i);
      lists[i] = i < C ? start : Num<T>::neg_inf();
    }
    // With a cluster, also: no block writes into another's lists before that one has left the sequence before.
    share.sync();
    const S* potentials =
        static_cast<const S*>(p.potentials) + (HMM ? b * p.transition_strides[0] : b * (p.T - 1) * C * C);
    int* back = p.back + b * (p.T - 1) * C * K;
    // Each step's target states in PASSES rounds of GROUPS; every group runs every round, so that the warps'
    // shuffles stay whole (a group past the block's states chooses among no candidates and writes nothing). A
    // round's row of potentials is loaded AHEAD rounds before it, into a ring of registers, so no round waits for
    // memory: a round of few sources takes less time than a load from memory, so those look further ahead, unless
    // the round merges (kbest_merges), whose network is long enough that two rounds cover a load.
    constexpr int AHEAD = kbest_merges(K, G, N) || N > 8 ? 2 : N <= 4 ? 4 : 3;
    auto target = [&](long long round) { return first + int(round % PASSES) * GROUPS + group; };
    // A round's row, and in the HMM form the emission its target state adds (e).
    auto load_row = [&](long long round, T(&w)[N], T& e) {
      const long long t = round / PASSES;
      const int s = target(round);
      const bool live = s < end && t + 1 < L;
      if constexpr (HMM) {
        const S* row = potentials + (live ? s : 0) * p.transition_strides[1];
        const long long from = p.transition_strides[2];
#pragma unroll
        for (int j = 0; j < N; ++j)
          w[j] = live && lane + j * G < C ? to_acc(row[(lane + j * G) * from]) : Num<T>::neg_inf();
        e = live ? emission(t + 1, s) : T(0);
      } else {
        const S* row = potentials + (t * C + (live ? s : 0)) * C;
#pragma unroll
        for (int j = 0; j < N; ++j) w[j] = live && lane + j * G < C ? to_acc(row[lane + j * G]) : Num<T>::neg_inf();
      }
    };
    T ring[AHEAD][N], ring_e[AHEAD]; // round r's row in ring[r % AHEAD]
#pragma unroll
    for (int i = 0; i < AHEAD; ++i) load_row(i, ring[i], ring_e[i]);
    const long long rounds = (L - 1) * PASSES;
    auto run_round = [&](long long round, T(&w)[N], T& e) {
      const long long t = round / PASSES;
      const int s = target(round);
      int* from_of = back + (t * C + s) * K;
      T* to = lists + ((t + 1) & 1) * C * K;
      kbest_select<T, C, K, G>(lists + (t & 1) * C * K, lane, w, [&](int r, T score, int at) {
        if (lane == 0 && s < end) {
          // A chosen path takes its emission; none (−inf) stays none, whatever the emission.
          if (HMM && score != Num<T>::neg_inf()) score = e + score;
          to[r * C + s] = score, from_of[r] = at;
          for (int k = 1; k < CL; ++k) cluster_store(&to[r * C + s], (rank + k) % CL, score);
        }
      });
      load_row(round + AHEAD, w, e); // its registers are free again
      if (round % PASSES == PASSES - 1) share.sync();
    };
    for (long long round = 0; round < rounds; round += AHEAD) {
#pragma unroll
      for (int i = 0; i < AHEAD; ++i)
        if (round + i < rounds) run_round(round + i, ring[i], ring_e[i]);
    }
    // The K best over the last position's lists, by the same order with the last state in the source's place: the
    // first block's first warp (each of its groups the same choice; the first writes it).
    if (rank == 0 && tid < 32) {
      T w[N];
#pragma unroll
      for (int j = 0; j < N; ++j) w[j] = lane + j * G < C ? T(0) : Num<T>::neg_inf();
      kbest_select<T, C, K, G>(lists + ((L - 1) & 1) * C * K, lane, w, [&](int r, T score, int at) {
        if (tid == 0) scores[r] = score, chosen[r] = at;
      });
    }
    __syncthreads();
    if (paths && tid < K)
      for (long long t = L - 1, at = chosen[tid]; at >= 0; --t) {
        const int s = int(at / K);
        paths[tid * p.T + t] = s;
        at = t > 0 ? back[((t - 1) * C + s) * K + at % K] : -1;
      }
    __syncthreads(); // the lists are the next sequence's
  }
}

} // namespace jb
