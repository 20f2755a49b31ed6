// The chunked strategy's gradients of the HMM form's tables (log, runtime/chain_chunked.cpp). The tree's backward
// leaves, pass by pass, each step's gradient G[t][c][p] (its level 0, `matrices` [count·L][C][C] for the pass's
// `count` chunks): the gradient of transitions[c][p] + emissions[t + 1][c], with initial[p] + emissions[0][p] folded
// into step 0. So emissions[t + 1][c] gets step t's row sums, emissions[0][p] and initial[p] step 0's column sums, and
// the transitions every step's within its sequence's length: each chunk's sum into `partials`, then the pass's
// chunks added in order into `sums`, then cast. Every sum runs in a fixed order, so a run repeats bit for bit.
//
// S is the inputs' storage type, T = Acc<S> the accumulator's; C states. Grid-strided, a thread per element.
#pragma once

#include "chain/chunk_params.cuh"
#include "core/dtypes.cuh"
#include "core/numbers.cuh"

namespace jb {

// Whether sequence b's length n is outside [1, T], and what such a sequence's gradients are: NaN, or 0 where its
// grad_score is 0 (as the sequential kernels give them).
__device__ __forceinline__ bool chunk_bad(const ChunkParams& p, long long b, long long& n) {
  n = p.lengths ? p.lengths[b] : p.T;
  return n < 1 || n > p.T;
}
template <class T> __device__ __forceinline__ T chunk_bad_gradient(const ChunkParams& p, long long b) {
  return static_cast<const T*>(p.grad_score)[b] == T(0) ? T(0) : Num<T>::nan();
}

// "_hmm_nodes": the emissions' gradient at every position the pass's steps reach (position t + 1 of step t: its row
// sums, 0 from the sequence's length on) and at position 0 (step 0's column sums).
template <class S, int C> __device__ __forceinline__ void chunk_hmm_nodes(const ChunkParams& p) {
  using T = typename Acc<S>::type;
  const T* const steps = static_cast<const T*>(p.matrices);
  S* const grad = static_cast<S*>(p.grad_emissions);
  for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < p.count * p.L * C;
       e += (long long)gridDim.x * blockDim.x) {
    const long long m = e / C, g = p.first + m / p.L, b = g / p.chunks, t = (g % p.chunks) * p.L + m % p.L;
    const int c = int(e % C);
    long long n;
    const bool bad = chunk_bad(p, b, n);
    const T* const step = steps + m * C * C;
    if (t + 1 < p.T) {
      T v = T(0);
      if (t + 1 < n)
        for (int q = 0; q < C; ++q) v += step[c * C + q];
      grad[(b * p.T + t + 1) * C + c] = from_acc<S>(bad ? chunk_bad_gradient<T>(p, b) : v);
    }
    if (t == 0) {
      T v = T(0);
      for (int q = 0; q < C; ++q) v += step[q * C + c];
      grad[b * p.T * C + c] = from_acc<S>(bad ? chunk_bad_gradient<T>(p, b) : v);
    }
  }
}

// "_hmm_edges": each of the pass's chunks' sum of its steps' gradients within its sequence's length, partials
// [count][C][C].
template <class S, int C> __device__ __forceinline__ void chunk_hmm_edges(const ChunkParams& p) {
  using T = typename Acc<S>::type;
  const T* const steps = static_cast<const T*>(p.matrices);
  T* const partials = static_cast<T*>(p.partials);
  for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < p.count * C * C;
       e += (long long)gridDim.x * blockDim.x) {
    const long long k = e / (C * C), cp = e % (C * C), g = p.first + k, b = g / p.chunks;
    long long n;
    const bool bad = chunk_bad(p, b, n);
    T v = T(0);
    for (long long j = 0, t = (g % p.chunks) * p.L; j < p.L && t + 1 < n; ++j, ++t)
      v += steps[(k * p.L + j) * C * C + cp];
    partials[e] = bad ? chunk_bad_gradient<T>(p, b) : v;
  }
}

// "_hmm_sums": the pass's chunks added in order into sums: the transitions' (one group for a shared table, else one
// per sequence the pass holds), then the initial table's (step 0's column sums of each sequence whose first chunk
// the pass holds).
template <class S, int C> __device__ __forceinline__ void chunk_hmm_sums(const ChunkParams& p) {
  using T = typename Acc<S>::type;
  const T* const steps = static_cast<const T*>(p.matrices);
  const T* const partials = static_cast<const T*>(p.partials);
  T* const transitions = static_cast<T*>(p.sums);
  T* const initial = transitions + (p.batched_transitions ? p.B : 1) * C * C;
  const long long b_lo = p.first / p.chunks, b_hi = (p.first + p.count - 1) / p.chunks;
  const long long edge_groups = p.grad ? (p.batched_transitions ? b_hi - b_lo + 1 : 1) : 0;
  const long long node_groups = p.grad_initial ? (p.batched_initial ? b_hi - b_lo + 1 : 1) : 0;
  for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < edge_groups * C * C + node_groups * C;
       e += (long long)gridDim.x * blockDim.x) {
    if (e < edge_groups * C * C) {
      const long long i = e / (C * C), cp = e % (C * C), group = p.batched_transitions ? b_lo + i : 0;
      // The pass's chunks of this group: all of them for a shared table, else its sequence's.
      long long k = 0, end = p.count;
      if (p.batched_transitions) {
        k = group * p.chunks - p.first > 0 ? group * p.chunks - p.first : 0;
        end = (group + 1) * p.chunks - p.first < p.count ? (group + 1) * p.chunks - p.first : p.count;
      }
      T v = transitions[group * C * C + cp];
      for (; k < end; ++k) v += partials[k * C * C + cp];
      transitions[group * C * C + cp] = v;
    } else {
      const long long i = (e - edge_groups * C * C) / C, q = (e - edge_groups * C * C) % C;
      const long long group = p.batched_initial ? b_lo + i : 0;
      T v = initial[group * C + q];
      for (long long b = p.batched_initial ? group : b_lo; b <= (p.batched_initial ? group : b_hi); ++b) {
        const long long k = b * p.chunks - p.first; // the sequence's first chunk, if the pass holds it
        if (k < 0 || k >= p.count) continue;
        long long n;
        T s = T(0);
        for (int c = 0; c < C; ++c) s += steps[k * p.L * C * C + c * C + q];
        v += chunk_bad(p, b, n) ? chunk_bad_gradient<T>(p, b) : s;
      }
      initial[group * C + q] = v;
    }
  }
}

// "_hmm_cast": the sums into the tables' gradients, in the storage type.
template <class S, int C> __device__ __forceinline__ void chunk_hmm_cast(const ChunkParams& p) {
  using T = typename Acc<S>::type;
  const T* const transitions = static_cast<const T*>(p.sums);
  const T* const initial = transitions + (p.batched_transitions ? p.B : 1) * C * C;
  const long long edges = p.grad ? (p.batched_transitions ? p.B : 1) * C * C : 0;
  const long long nodes = p.grad_initial ? (p.batched_initial ? p.B : 1) * C : 0;
  for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < edges + nodes;
       e += (long long)gridDim.x * blockDim.x) {
    if (e < edges)
      static_cast<S*>(p.grad)[e] = from_acc<S>(transitions[e]);
    else
      static_cast<S*>(p.grad_initial)[e - edges] = from_acc<S>(initial[e - edges]);
  }
}

} // namespace jb
