// The HMM form's backward: the gradients of its three tables from the messages the saving forward kept (log) or
// from the best path (max_plus). Every position's and every step's share is independent of the others, so these
// spread over the whole GPU: state marginals one thread per (b, t, c); the transitions' gradient, a sum over steps,
// as partial sums over ranges of steps (one block per range and tile of rows), then a fixed-order sum of the
// partials, so the result does not depend on the launch's timing. S is the tables' storage type, T = Acc<S> the
// accumulator's (the messages', grad_score's and the partial sums'); the gradients are written in S.
#pragma once

#include "chain/lengths.cuh"
#include "chain/params.cuh"
#include "core/dtypes.cuh"
#include "core/numbers.cuh"

namespace jb {

// What sequence b's gradients are: 0 zeros (grad_score 0, a log score of −inf), 1 the marginals or path counts, 2
// NaN (a bad length, or a log score of +inf or NaN: there is no distribution over paths to differentiate).
template <class T, bool LOG> struct HmmSequence {
  long long L = 1;
  T g = 0;
  double z = 0;
  int mode = 0;
  __device__ __forceinline__ HmmSequence(const ChainParams& p, long long b) {
    bool bad;
    L = chain_length(p, b, bad);
    g = static_cast<const T*>(p.grad_score)[b];
    if (LOG) z = p.logz[b];
    mode = g == T(0) ? 0 : bad ? 2 : !LOG ? 1 : z == double(Num<T>::neg_inf()) ? 0 : z < double(Num<T>::inf()) ? 1 : 2;
  }
};

// The share of sequence b's position t that its states' hmm_node values have in common: what they are (0 zeros, 1
// computed, 2 NaN) and, to compute them, the offsets less the score (log) or the best path's state (max_plus). Read
// whatever the mode, so that the loads do not wait on it.
template <class T, bool LOG> struct HmmRow {
  int mode;
  T k;       // LOG
  int state; // max_plus
  __device__ __forceinline__ HmmRow(const ChainParams& p, const HmmSequence<T, LOG>& s, long long b, long long t) {
    const long long at = b * p.T + t;
    mode = s.mode == 2 ? 2 : s.mode == 1 && t < s.L ? 1 : 0;
    k = LOG ? T(p.offset[at] + p.beta_offset[at] - s.z) : T(0);
    state = LOG ? -1 : p.path[at];
  }
  // A state's value of the row from what it computes there.
  __device__ __forceinline__ T of(T v) const { return mode == 2 ? Num<T>::nan() : mode == 0 ? T(0) : v; }
};

// The log state marginal of a position's state from what hmm_node reads there: its emission e and its two relative
// messages, alpha's a and beta's bt (which carries e, taken out again; a −inf emission's is 0), times grad_score.
template <class T>
__device__ __forceinline__ T hmm_log_node(const HmmSequence<T, true>& s, const HmmRow<T, true>& r, T e, T a, T bt) {
  return e == Num<T>::neg_inf() ? T(0) : s.g * Num<T>::exp2(((a + r.k) + (bt - e)) * Num<T>::log2e());
}

// d score[b] / d emissions[b][t][c], times grad_score[b]: the state marginal exp(alpha_t[c] + beta_t[c] − score)
// (log: hmm_log_node), or the best path's indicator (max_plus). Every value is read before any is tested (each inside
// its [B][T] or [B][T][C] array, whatever the row's mode), so that a loop over states or sequences keeps several of
// them in flight.
template <class S, bool LOG, class T = typename Acc<S>::type>
__device__ __forceinline__ T hmm_node(const ChainParams& p, const HmmSequence<T, LOG>& s, const HmmRow<T, LOG>& r,
                                      long long b, long long t, int c, int C) {
  const long long at = b * p.T + t;
  T v = T(0);
  if constexpr (LOG) {
    const T e = to_acc(static_cast<const S*>(p.emissions)[b * p.e_b + t * p.e_t + (long long)c * p.e_c]);
    v = hmm_log_node(s, r, e, static_cast<const T*>(p.rel)[at * C + c], static_cast<const T*>(p.beta_rel)[at * C + c]);
  } else {
    v = r.state == c ? s.g : T(0);
  }
  return r.of(v);
}

// grad_emissions [B][T][C], a warp a row (b, t) (hmm_row_threads), grid-strided.
// CT = 0: the states are p.states (the stepped strategy's one module for every C), else CT.
template <class S, bool LOG, int CT> __device__ __forceinline__ void hmm_nodes(const ChainParams& p) {
  using T = typename Acc<S>::type;
  const int C = CT > 0 ? CT : int(p.states), lane = int(threadIdx.x % kHmmLanes);
  const long long rows = p.B * p.T, warps = (long long)gridDim.x * blockDim.x / kHmmLanes;
  for (long long row = (blockIdx.x * (long long)blockDim.x + threadIdx.x) / kHmmLanes; row < rows; row += warps) {
    const long long b = row / p.T, t = row % p.T;
    const HmmSequence<T, LOG> s(p, b);
    const HmmRow<T, LOG> r(p, s, b, t);
#pragma unroll 4
    for (int c = lane; c < C; c += kHmmLanes)
      static_cast<S*>(p.grad_emissions)[row * C + c] = from_acc<S>(hmm_node<S, LOG>(p, s, r, b, t, c, C));
  }
}

// grad_initial[j] (j = b·C + c with batched_initial, else c) for every j < n: the state marginals (log) or the best
// path's states (max_plus) at position 0, summed over the sequences that share the table. A block takes kHmmLanes
// consecutive entries at a time (grid-strided), a lane each, so that a warp reads a line of states of a sequence at
// once: warp w of the block's W sums its lane's entry over the sequences w, w + W, … in order, reading kHmmAhead of
// them before adding any, then the first warp adds the W warps' sums in order, so the result does not depend on the
// launch's timing. Every thread of the block takes part (its barriers).
enum HmmAhead : int { kHmmAhead = 8 };
template <class S, bool LOG>
__device__ __forceinline__ void hmm_initial_grads(const ChainParams& p, long long n, int C) {
  using T = typename Acc<S>::type;
  static_assert(kHmmLanes == 32, "a warp's lanes: a line of entries");
  __shared__ T sums[32][kHmmLanes + 1];
  const int lane = int(threadIdx.x % kHmmLanes), warp = int(threadIdx.x / kHmmLanes);
  const int warps = int(blockDim.x) / kHmmLanes;
  for (long long tile = blockIdx.x; tile * kHmmLanes < n; tile += gridDim.x) {
    const long long j = tile * kHmmLanes + lane;
    const int c = int(j % C);
    const long long first = p.batched_initial ? j / C : 0, end = j >= n ? first : p.batched_initial ? first + 1 : p.B;
    T sum = T(0);
    for (long long b0 = first + warp; b0 < end; b0 += (long long)warps * kHmmAhead) {
      T v[kHmmAhead];
#pragma unroll
      for (int u = 0; u < kHmmAhead; ++u) {
        const long long b = b0 + (long long)u * warps;
        v[u] = T(0);
        if (b < end) {
          const HmmSequence<T, LOG> s(p, b);
          v[u] = hmm_node<S, LOG>(p, s, HmmRow<T, LOG>(p, s, b, 0), b, 0, c, C);
        }
      }
#pragma unroll
      for (int u = 0; u < kHmmAhead; ++u) sum += v[u];
    }
    sums[warp][lane] = sum;
    __syncthreads();
    if (warp == 0 && j < n) {
      T total = sums[0][lane];
      for (int w = 1; w < warps; ++w) total += sums[w][lane];
      static_cast<S*>(p.grad_initial)[j] = from_acc<S>(total);
    }
    __syncthreads(); // the sums are read before the next tile's are written
  }
}

// The transitions' gradient over one range of steps: block (x, y) = (group · chunks + chunk, tile) sums the steps
// [chunk · p.chunk, (chunk + 1) · p.chunk) of its group into rows [y · ROWS, (y + 1) · ROWS) of the table, each of
// NT threads holding PER elements and their transitions in registers; a step's share is grad_score · exp(alpha_t[p]
// + transitions[c][p] + beta_{t+1}[c] − score) (log: the backward messages carry emissions[t + 1][c]) or the best
// path's step indicator (max_plus). EB steps' messages are staged in shared memory at a time. With one chunk the
// sums are the gradient; otherwise partial sums for hmm_reduce.
template <class S, bool LOG, int C, int NT, int ROWS> __device__ __forceinline__ void hmm_edges(const ChainParams& p) {
  using T = typename Acc<S>::type;
  constexpr int E = ROWS * C, PER = (E + NT - 1) / NT;
  constexpr int EB = 16384 / (C * int(sizeof(T))) < 1 ? 1 : 16384 / (C * int(sizeof(T))) > 8 ? 8 : 16384 / (C * int(sizeof(T)));
  __shared__ T alpha[LOG ? EB : 1][LOG ? C : 1], beta[LOG ? EB : 1][ROWS];
  __shared__ T k_s[EB], g_s[EB];
  __shared__ int mode_s[EB], to_s[EB], from_s[EB];
  const int tid = threadIdx.x, c0 = blockIdx.y * ROWS;
  const long long group = blockIdx.x / p.chunks, chunk = blockIdx.x % p.chunks;
  const long long steps = p.batched_transitions ? p.T - 1 : p.B * (p.T - 1);
  const long long i0 = chunk * p.chunk, i1 = i0 + p.chunk < steps ? i0 + p.chunk : steps;

  const S* trans = static_cast<const S*>(p.potentials) + (p.batched_transitions ? group * p.s_b : 0);
  T tr[PER], acc[PER];
#pragma unroll
  for (int j = 0; j < PER; ++j) {
    const int e = tid + j * NT, c = c0 + e / C, q = e % C;
    tr[j] = i0 < i1 && e < E && c < C ? to_acc(trans[(long long)c * p.s_c + (long long)q * p.s_p]) : T(0);
    acc[j] = T(0);
  }
  for (long long i = i0; i < i1; i += EB) {
    const int n = i1 - i < EB ? int(i1 - i) : EB;
    __syncthreads(); // the previous steps' messages are read
    // Step u of the batch: sequence b, positions t → t + 1.
    auto where = [&](int u, long long& b, long long& t) {
      b = p.batched_transitions ? group : (i + u) / (p.T - 1);
      t = p.batched_transitions ? i + u : (i + u) % (p.T - 1);
    };
    if (tid < n) {
      long long b, t;
      where(tid, b, t);
      const HmmSequence<T, LOG> s(p, b);
      int mode = s.mode == 1 && t + 1 >= s.L ? 0 : s.mode;
      if (LOG) {
        if (mode == 1) k_s[tid] = T(p.offset[b * p.T + t] + p.beta_offset[b * p.T + t + 1] - s.z);
      } else {
        to_s[tid] = mode == 1 ? p.path[b * p.T + t + 1] : -1;
        from_s[tid] = mode == 1 ? p.path[b * p.T + t] : -1;
        if (to_s[tid] < 0 || from_s[tid] < 0 || to_s[tid] >= C || from_s[tid] >= C) mode = mode == 2 ? 2 : 0;
      }
      mode_s[tid] = mode;
      g_s[tid] = s.g;
    }
    if (LOG)
      for (int x = tid; x < n * (C + ROWS); x += NT) {
        const int u = x / (C + ROWS), y = x % (C + ROWS);
        long long b, t;
        where(u, b, t);
        if (y < C)
          alpha[u][y] = static_cast<const T*>(p.rel)[(b * p.T + t) * C + y];
        else if (c0 + y - C < C)
          beta[u][y - C] = static_cast<const T*>(p.beta_rel)[(b * p.T + t + 1) * C + c0 + y - C];
      }
    __syncthreads();
    for (int u = 0; u < n; ++u) {
      const int mode = mode_s[u];
      if (mode == 0) continue;
      const T g = g_s[u];
      if (mode == 2) {
#pragma unroll
        for (int j = 0; j < PER; ++j) acc[j] += Num<T>::nan();
        continue;
      }
      if (LOG) {
        const T k = k_s[u];
#pragma unroll
        for (int j = 0; j < PER; ++j) {
          const int e = tid + j * NT, r = e / C, q = e % C;
          if (e < E && c0 + r < C)
            acc[j] += g * Num<T>::exp2(((alpha[u][q] + k) + (tr[j] + beta[u][r])) * Num<T>::log2e());
        }
      } else {
        const int hit = (to_s[u] - c0) * C + from_s[u];
#pragma unroll
        for (int j = 0; j < PER; ++j)
          if (tid + j * NT == hit) acc[j] += g;
      }
    }
  }
  // The partial sums in T, the gradient itself in S.
  const long long at = (p.chunks > 1 ? blockIdx.x : group) * (long long)(C * C) + (long long)c0 * C;
#pragma unroll
  for (int j = 0; j < PER; ++j) {
    const int e = tid + j * NT;
    if (e < E && c0 + e / C < C) {
      if (p.chunks > 1)
        static_cast<T*>(p.partials)[at + e] = acc[j];
      else
        static_cast<S*>(p.grad)[at + e] = from_acc<S>(acc[j]);
    }
  }
}

// What the edges left to finish: the transitions' gradient as the sum of each group's chunks in order (with more
// than one chunk), a thread an element, and the initial table's gradient (hmm_initial_grads), a block to each line of
// entries (hmm_reduce_threads). Grid-strided over both.
template <class S, bool LOG, int CT> __device__ __forceinline__ void hmm_reduce(const ChainParams& p) {
  using T = typename Acc<S>::type;
  const long long C = CT > 0 ? CT : p.states; // as hmm_nodes
  const long long groups = p.batched_transitions ? p.B : 1;
  const long long n_trans = p.chunks > 1 && p.grad ? groups * C * C : 0;
  const long long n_init = p.grad_initial ? (p.batched_initial ? p.B * C : C) : 0;
  const long long id = blockIdx.x * (long long)blockDim.x + threadIdx.x, threads = (long long)gridDim.x * blockDim.x;
  for (long long i = id; i < n_trans; i += threads) {
    const long long group = i / (C * C), e = i % (C * C);
    const T* part = static_cast<const T*>(p.partials) + group * p.chunks * C * C + e;
    T sum = T(0);
    for (long long k = 0; k < p.chunks; ++k) sum += part[k * C * C];
    static_cast<S*>(p.grad)[i] = from_acc<S>(sum);
  }
  hmm_initial_grads<S, LOG>(p, n_init, int(C));
}

} // namespace jb
