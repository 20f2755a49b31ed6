// Strategies that parallelise the K reduction itself (seeds 002/004): "warp" (a group of G lanes per output,
// combined with __shfl_xor_sync) and "block_tree" (a block per output, a shared-memory tree with sequential
// addressing, finished by a warp shuffle). Also "linear_two_pass": the log semiring as max, then Σ exp(t − max).
// Outputs are enumerated flat (batch, i, j) with grid-stride loops, so no grid dimension limits B, M or N.
#pragma once

#include "core/params.cuh"
#include "core/semirings.cuh"
#include "core/outputs.cuh"

namespace jb {

template <class S, class In, class I>
__device__ __forceinline__ void accumulate_strided(const BmmParams& p, typename S::State& st, I batch, I i, I j,
                                                   I k_first, I k_step) {
  const In* a = static_cast<const In*>(p.a) + batch * (I)p.a_batch + i * (I)p.a_row;
  const In* b = static_cast<const In*>(p.b) + batch * (I)p.b_batch + j * (I)p.b_col;
  for (I k = k_first; k < (I)p.K; k += k_step) S::add_term(st, to_acc(a[k * (I)p.a_col]), to_acc(b[k * (I)p.b_row]), k);
}


// blockDim = (G, outputs per block); G lanes (a power of two ≤ 32, inside one warp) share one output.
template <class S, class In, class Out, class I, int G> __device__ __forceinline__ void warp_kernel(const BmmParams p) {
  const I outputs = (I)p.B * (I)p.M * (I)p.N;
  const I stride = (I)gridDim.x * blockDim.y;
  // Every lane runs the same number of iterations, so the shuffles below always see their whole group.
  for (I base = (I)blockIdx.x * blockDim.y; base < outputs; base += stride) {
    const I o = base + threadIdx.y;
    const bool live = o < outputs;
    I batch = 0, i = 0, j = 0;
    if (live) unflatten(p, o, batch, i, j);
    typename S::State st = S::init();
    if (live) accumulate_strided<S, In, I>(p, st, batch, i, j, (I)threadIdx.x, (I)G);
#pragma unroll
    for (int lane_mask = G / 2; lane_mask > 0; lane_mask /= 2) {
      const typename S::State other = S::shfl_xor(st, lane_mask);
      S::combine(st, other);
    }
    if (live && threadIdx.x == 0) store_output<S, Out, I>(p, batch, i, j, S::finalize(st), S::arg(st));
  }
}

// blockDim = (THREADS) with THREADS a power of two ≥ 64: one block per output.
template <class S, class In, class Out, class I, int THREADS>
__device__ __forceinline__ void block_tree_kernel(const BmmParams p) {
  __shared__ typename S::State partial[THREADS];
  const I outputs = (I)p.B * (I)p.M * (I)p.N;
  const int tid = threadIdx.x;
  for (I o = blockIdx.x; o < outputs; o += gridDim.x) {
    I batch, i, j;
    unflatten(p, o, batch, i, j);
    typename S::State st = S::init();
    accumulate_strided<S, In, I>(p, st, batch, i, j, (I)tid, (I)THREADS);
    partial[tid] = st;
    __syncthreads();
    // Sequential addressing: active threads stay contiguous and read contiguous words (no bank conflicts).
    for (int half = THREADS / 2; half >= 32; half /= 2) {
      if (tid < half) S::combine(partial[tid], partial[tid + half]);
      __syncthreads();
    }
    if (tid < 32) {
      st = partial[tid];
#pragma unroll
      for (int lane_mask = 16; lane_mask > 0; lane_mask /= 2) S::combine(st, S::shfl_xor(st, lane_mask));
      if (tid == 0) store_output<S, Out, I>(p, batch, i, j, S::finalize(st), S::arg(st));
    }
    __syncthreads(); // partial[] is rewritten by the next output
  }
}

// The log semiring in two passes over K per output (seed 001's form): the max, then the sum of shifted exps.
// Same contract as the online form: NaN or (+inf)+(−inf) → NaN, +inf → +inf, all −inf (or K = 0) → −inf.
template <class In, class Out, class I> __device__ __forceinline__ void linear_two_pass_kernel(const BmmParams p) {
  typedef typename Acc<In>::type T;
  const I outputs = (I)p.B * (I)p.M * (I)p.N;
  for (I o = (I)blockIdx.x * blockDim.x + threadIdx.x; o < outputs; o += (I)gridDim.x * blockDim.x) {
    I batch, i, j;
    unflatten(p, o, batch, i, j);
    const In* a = static_cast<const In*>(p.a) + batch * (I)p.a_batch + i * (I)p.a_row;
    const In* b = static_cast<const In*>(p.b) + batch * (I)p.b_batch + j * (I)p.b_col;
    T m = Num<T>::neg_inf();
    bool nan = false;
    for (I k = 0; k < (I)p.K; ++k) {
      const T t = to_acc(a[k * (I)p.a_col]) + to_acc(b[k * (I)p.b_row]);
      nan |= is_nan(t);
      m = t > m ? t : m;
    }
    T value = m;
    if (nan) {
      value = m - m + Num<T>::nan();
    } else if (m != Num<T>::inf() && m != Num<T>::neg_inf()) {
      T s = 0;
      for (I k = 0; k < (I)p.K; ++k) s += exp_(to_acc(a[k * (I)p.a_col]) + to_acc(b[k * (I)p.b_row]) - m);
      value = m + log_(s);
    }
    store_output<LogSemiring<T>, Out, I>(p, batch, i, j, value, -1);
  }
}

} // namespace jb
