// The sequential kernels' output policy (templates/chain/sequential.cuh): what a forward writes of each position it
// reaches, of its end, and past the sequence's length. Positions are counted along the recursion: for the backward
// messages (BETA) step t's position is L − 1 − t. A cluster of K blocks writes each position's target states from
// the block computing them, and its end from its first block.
#pragma once

#include "chain/params.cuh"
#include "core/numbers.cuh"

namespace jb {

template <class T, int C, int NT, int K, bool BETA> struct ChainOutputs {
  const ChainParams& p;
  long long b, T_, L; // the sequence, the positions it has room for, its length
  int tid, first, end; // the thread, and the block's target states [first, end)
  unsigned rank;       // the block in its cluster
  T* rel;              // saved: the relative messages (forward's or backward's), or null
  double* offsets;     // saved: their offsets

  // Position t's messages, now m − shift with the offset `offset`, to saved and alpha. shift is the messages'
  // largest where that is finite: the HMM form's transitions' gradient (templates/chain/hmm_edges.cuh) takes a
  // position's largest saved message to be 0 there.
  __device__ __forceinline__ void position(long long t, const T* m, T shift, double offset) const {
    const long long at = b * T_ + (BETA ? L - 1 - t : t);
    if (rel && tid == 0 && rank == 0) offsets[at] = offset;
    for (int c = first + tid; c < end; c += NT) {
      const T r = m[c] - shift;
      if (rel) rel[at * C + c] = r;
      if (p.alpha && !BETA) static_cast<T*>(p.alpha)[at * C + c] = T(offset + double(r));
    }
  }

  // The score and the path, from the last position's messages m − shift (offset `offset`): the cluster's first
  // block (the others' back-pointers are seen after the last step's barrier). `bad`: a length outside [1, T].
  template <class Op> __device__ __forceinline__ void score(const T* m, T shift, double offset, bool bad) const {
    __shared__ int last_state;
    if (tid < 32 && !BETA && rank == 0) {
      constexpr int N32 = (C + 31) / 32;
      T x[N32];
#pragma unroll
      for (int k = 0; k < N32; ++k) x[k] = tid + 32 * k < C ? m[tid + 32 * k] - shift : Num<T>::neg_inf();
      int arg;
      const T v = Op::template reduce<32>(x, tid, arg);
      const double z = v > Num<T>::neg_inf() && v < Num<T>::inf() ? offset + double(v) : double(v);
      if (tid == 0) {
        static_cast<T*>(p.score)[b] = T(z);
        if (p.rel) p.logz[b] = z;
        if (p.path) {
          // A sequence without a path (score −inf) gets −1 throughout; otherwise the back-pointers from its end.
          last_state = v == Num<T>::neg_inf() || bad ? -1 : arg;
          p.path[b * T_ + L - 1] = last_state;
        }
      }
    }
    if constexpr (Op::kPaths)
      if (!BETA && rank == 0 && p.path) walk_back(last_state);
  }

  // The best path before its last state, from the back-pointers: each state is read from the one after it, so one
  // thread walks them, from shared memory, where the block stages them chain_path_rows steps at a time (one load
  // each instead of a dependent load from global memory a step).
  __device__ __forceinline__ void walk_back(const int& end_state) const {
    constexpr int kPathRows = chain_path_rows(C);
    __shared__ unsigned short rows[kPathRows * C];
    __syncthreads(); // end_state, and the last step's back-pointers
    int state = end_state;
    for (long long hi = L - 1; hi > 0; hi -= kPathRows) {
      const long long lo = hi - kPathRows + 1 > 1 ? hi - kPathRows + 1 : 1, n = (hi - lo + 1) * C;
      const unsigned short* from = p.back + (b * T_ + lo) * C;
      for (long long i = tid; i < n; i += NT) rows[i] = from[i];
      __syncthreads();
      if (tid == 0)
        for (long long t = hi; t >= lo; --t) {
          if (state >= 0) state = rows[(t - lo) * C + state];
          p.path[b * T_ + t - 1] = state;
        }
      __syncthreads(); // the rows read before the next are staged
    }
  }

  // Past the sequence's length: no message, no state (saved too, so that its every byte is determined), spread over
  // the cluster's threads.
  __device__ __forceinline__ void past_length() const {
    const long long me = (long long)rank * NT + tid;
    for (long long i = (L * C) + me; i < T_ * C; i += K * NT) {
      if (p.alpha && !BETA) static_cast<T*>(p.alpha)[b * T_ * C + i] = Num<T>::neg_inf();
      if (rel) rel[b * T_ * C + i] = Num<T>::neg_inf();
    }
    if (rel)
      for (long long t = L + me; t < T_; t += K * NT) offsets[b * T_ + t] = 0;
    if (p.path && !BETA)
      for (long long t = L + me; t < T_; t += K * NT) p.path[b * T_ + t] = -1;
  }
};

} // namespace jb
