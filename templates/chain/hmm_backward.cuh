// The HMM form's backward: the gradients of its three tables from the messages the saving forward kept (log) or
// from the best path (max_plus). Every position's and every step's share is independent of the others, so these
// spread over the whole GPU: state marginals a warp a few positions (b, t); the transitions' gradient, a sum over
// steps, as partial sums over ranges of steps (templates/chain/hmm_edges.cuh), then a fixed-order sum of the
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
  __device__ __forceinline__ HmmSequence(const ChainParams& p, long long b)
      : HmmSequence(p, p.lengths ? p.lengths[b] : p.T, static_cast<const T*>(p.grad_score)[b], LOG ? p.logz[b] : 0.0) {}
  // From its values as loaded: its length as read (lengths[b], or T without lengths), grad_score[b] and logz[b].
  __device__ __forceinline__ HmmSequence(const ChainParams& p, long long n, T grad_score, double logz)
      : g(grad_score), z(LOG ? logz : 0.0) {
    bool bad;
    L = chain_length_of(n, p.T, bad);
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

// grad_emissions [B][T][C], grid-strided (hmm_node_threads). CT = 0 (the stepped strategy's one module for every C,
// p.states) or above kHmmGroupedStates: a warp a row (b, t), its states in rounds (kHmmRowRound). Otherwise a warp a
// group of GROUP consecutive positions of a sequence: SIDE = 32 / LANES positions side by side (lane / LANES), NR times
// over, NC states a lane (c = lane % LANES + j · LANES). A position or state past the last reads the last and writes
// nothing.
template <class S, bool LOG, int CT> __device__ __forceinline__ void hmm_nodes(const ChainParams& p) {
  using T = typename Acc<S>::type;
  const long long warps = (long long)gridDim.x * blockDim.x / kHmmLanes;
  const long long first = (blockIdx.x * (long long)blockDim.x + threadIdx.x) / kHmmLanes;
  const int lane = int(threadIdx.x % kHmmLanes);
  if constexpr (CT == 0 || CT > kHmmGroupedStates) {
    const int C = CT > 0 ? CT : int(p.states);
    const long long rows = p.B * p.T;
    for (long long row = first; row < rows; row += warps) {
      const long long b = row / p.T, t = row % p.T;
      const HmmSequence<T, LOG> s(p, b);
      const HmmRow<T, LOG> r(p, s, b, t);
      for (int c0 = lane; c0 < C; c0 += kHmmRowRound * kHmmLanes) {
        T v[kHmmRowRound];
#pragma unroll
        for (int j = 0; j < kHmmRowRound; ++j)
          v[j] = hmm_node<S, LOG>(p, s, r, b, t, c0 + j * kHmmLanes < C ? c0 + j * kHmmLanes : C - 1, C);
#pragma unroll
        for (int j = 0; j < kHmmRowRound; ++j)
          if (c0 + j * kHmmLanes < C)
            static_cast<S*>(p.grad_emissions)[row * C + c0 + j * kHmmLanes] = from_acc<S>(v[j]);
      }
    }
  } else {
    constexpr int LANES = hmm_node_lanes(CT), SIDE = kHmmLanes / LANES, NR = hmm_node_rows(CT);
    constexpr int NC = hmm_node_values(CT), GROUP = hmm_node_group(CT);
    const int c0 = lane % LANES, side = lane / LANES;
    const long long per_sequence = (p.T + GROUP - 1) / GROUP, groups = p.B * per_sequence;
    for (long long group = first; group < groups; group += warps) {
      const long long b = group / per_sequence, t0 = group % per_sequence * GROUP;
      const HmmSequence<T, LOG> s(p, b);
      T v[NR][NC];
#pragma unroll
      for (int jr = 0; jr < NR; ++jr) {
        const long long t = t0 + jr * SIDE + side;
        const HmmRow<T, LOG> r(p, s, b, t < p.T ? t : p.T - 1);
#pragma unroll
        for (int j = 0; j < NC; ++j) {
          const int c = c0 + j * LANES;
          v[jr][j] = hmm_node<S, LOG>(p, s, r, b, t < p.T ? t : p.T - 1, c < CT ? c : CT - 1, CT);
        }
      }
#pragma unroll
      for (int jr = 0; jr < NR; ++jr) {
        const long long t = t0 + jr * SIDE + side;
#pragma unroll
        for (int j = 0; j < NC; ++j) {
          const int c = c0 + j * LANES;
          if (t < p.T && c < CT) static_cast<S*>(p.grad_emissions)[(b * p.T + t) * CT + c] = from_acc<S>(v[jr][j]);
        }
      }
    }
  }
}

// Sums of n entries, entry j's over the items [first, end) that items(j, first, end) gives, in the items' order:
// a block takes kHmmLanes consecutive entries (a line) at a time, a lane each, so that a warp reads a line of
// entries an item (value(j, i)) at once: warp w of the block's W sums its lane's entry over the items w, w + W, … in
// order, reading AHEAD of them before adding any, then the first warp adds the W warps' sums in order and
// writes them (write(j, sum)), so the result does not depend on the launch's timing. The block takes the lines
// first, first + gridDim.x, … (a launch's blocks share its lines out). Every thread of the block takes part (its
// barriers).
template <class T, int AHEAD, class Items, class Value, class Write>
__device__ __forceinline__ void hmm_line_sums(long long n, long long first_line, Items items, Value value,
                                              Write write) {
  static_assert(kHmmLanes == 32, "a warp's lanes: a line of entries");
  __shared__ T sums[32][kHmmLanes + 1];
  const int lane = int(threadIdx.x % kHmmLanes), warp = int(threadIdx.x / kHmmLanes);
  const int warps = int(blockDim.x) / kHmmLanes;
  for (long long tile = first_line; tile * kHmmLanes < n; tile += gridDim.x) {
    const long long j = tile * kHmmLanes + lane;
    long long first = 0, end = 0;
    if (j < n) items(j, first, end);
    T sum = T(0);
    long long i0 = first + warp;
    // Whole rounds of AHEAD items as they are, then the last, part of which may lie past the end.
    for (; i0 + (long long)(AHEAD - 1) * warps < end; i0 += (long long)warps * AHEAD) {
      T v[AHEAD];
#pragma unroll
      for (int u = 0; u < AHEAD; ++u) v[u] = value(j, i0 + (long long)u * warps);
#pragma unroll
      for (int u = 0; u < AHEAD; ++u) sum += v[u];
    }
    if (i0 < end) {
      T v[AHEAD];
#pragma unroll
      for (int u = 0; u < AHEAD; ++u) { // every load issued: an item past the end reads the last, then counts 0
        const long long i = i0 + (long long)u * warps;
        v[u] = value(j, i < end ? i : end - 1);
        v[u] = i < end ? v[u] : T(0);
      }
#pragma unroll
      for (int u = 0; u < AHEAD; ++u) sum += v[u];
    }
    sums[warp][lane] = sum;
    __syncthreads();
    if (warp == 0 && j < n) {
      T total = sums[0][lane];
      for (int w = 1; w < warps; ++w) total += sums[w][lane];
      write(j, total);
    }
    __syncthreads(); // the sums are read before the next tile's are written
  }
}

// grad_initial[j] (j = b·C + c with batched_initial, else c) for every j < n: the state marginals (log) or the best
// path's states (max_plus) at position 0, summed over the sequences that share the table (hmm_line_sums, four
// sequences' reads in flight a lane: each is a row's messages, emission and offsets). Where grad_emissions is asked
// for in the accumulator's own type, each value is read back from its first position instead (the sequential and the
// stepped strategies launch this after the pass that writes it: hmm_node's value, or in the stepped strategy's
// step_nodes_operand the same hmm_log_node and HmmRow::of, which must stay so for the gradients asked for alone to
// equal those asked for together, bit for bit): one load, sixteen in flight. A block's line of sums then waits for
// memory once per sixteen sequences rather than once per four, which matters where the table is shared by thousands
// of sequences and its C / 32 lines are the launch's only blocks.
template <class S, bool LOG>
__device__ __forceinline__ void hmm_initial_grads(const ChainParams& p, long long n, int C, long long first_line) {
  using T = typename Acc<S>::type;
  auto items = [&](long long j, long long& first, long long& end) {
    first = p.batched_initial ? j / C : 0;
    end = p.batched_initial ? first + 1 : p.B;
  };
  auto write = [&](long long j, T v) { static_cast<S*>(p.grad_initial)[j] = from_acc<S>(v); };
  if (sizeof(S) == sizeof(T) && p.grad_emissions) {
    const S* nodes = static_cast<const S*>(p.grad_emissions);
    hmm_line_sums<T, 16>(
        n, first_line, items, [&](long long j, long long b) { return to_acc(nodes[b * p.T * C + j % C]); }, write);
    return;
  }
  hmm_line_sums<T, 4>(
      n, first_line, items,
      [&](long long j, long long b) {
        const HmmSequence<T, LOG> s(p, b);
        return hmm_node<S, LOG>(p, s, HmmRow<T, LOG>(p, s, b, 0), b, 0, int(j % C), C);
      },
      write);
}

// What the edges left to finish: the transitions' gradient as the sum of each group's chunks in order (with more
// than one chunk): from kHmmLineChunks chunks a block to each line of entries (hmm_line_sums, eight chunks' reads in
// flight a lane), a thread an element below that; and the initial table's gradient (hmm_initial_grads) in the lines
// after the transitions' (their blocks apart where the launch has blocks for both: hmm_reduce_threads). CT > 0: the
// sequential kernels' (C = CT); 0: the stepped strategy's one module (C = p.states). Both launch it after the state
// marginals' pass, whose grad_emissions it may read.
template <class S, bool LOG, int CT> __device__ __forceinline__ void hmm_reduce(const ChainParams& p) {
  using T = typename Acc<S>::type;
  const long long C = CT > 0 ? CT : p.states; // as hmm_nodes
  const long long groups = p.batched_transitions ? p.B : 1;
  const long long n_trans = p.chunks > 1 && p.grad ? groups * C * C : 0;
  const long long n_init = p.grad_initial ? (p.batched_initial ? p.B * C : C) : 0;
  const T* partials = static_cast<const T*>(p.partials);
  // Entry i of group i / C² sums partials[(group · chunks + k) · C² + i % C²] over the chunks k in order.
  auto partial = [&](long long i, long long k) {
    return partials[((i / (C * C)) * p.chunks + k) * C * C + i % (C * C)];
  };
  auto write = [&](long long i, T v) { static_cast<S*>(p.grad)[i] = from_acc<S>(v); };
  long long lines = 0; // the transitions' lines before the initial table's
  if (p.chunks >= kHmmLineChunks) {
    hmm_line_sums<T, 8>(
        n_trans, blockIdx.x, [&](long long, long long& first, long long& end) { first = 0, end = p.chunks; }, partial,
        write);
    lines = (n_trans + kHmmLanes - 1) / kHmmLanes;
  } else {
    const long long id = blockIdx.x * (long long)blockDim.x + threadIdx.x, threads = (long long)gridDim.x * blockDim.x;
    for (long long i = id; i < n_trans; i += threads) {
      T sum = T(0);
      for (long long k = 0; k < p.chunks; ++k) sum += partial(i, k);
      write(i, sum);
    }
  }
  // Line `lines + t` of the launch's is the block's where it is blockIdx.x modulo the grid.
  const long long grid = gridDim.x, first = ((blockIdx.x - lines) % grid + grid) % grid;
  hmm_initial_grads<S, LOG>(p, n_init, int(C), first);
}

} // namespace jb
