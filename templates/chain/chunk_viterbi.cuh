// The chunked strategy's best path (max_plus, runtime/chain_chunked.cpp): the tree of max_plus products gives each
// chunk's product (templates/chain/chunks.cuh); "_chain" runs the chain of those products per sequence to every
// chunk's first messages; "_rerun" runs every chunk's steps again from its first messages, all chunks at once, with
// the sequential kernels' arithmetic (templates/chain/sequential.cuh: the terms, the winner — the largest, NaN wins,
// ties to the smallest state — and the messages kept relative with their offsets in double), writing the
// back-pointers, the score and the path's last state at the sequence's end, and for each chunk which state its first
// position holds on the best path to each state of its last; "_compose" follows those maps from the end, a chunk a
// step (a thread per sequence), and "_expand" the back-pointers inside each chunk (a thread per chunk).
//
// So the path is the sequential kernels' wherever the chunks' first messages are theirs: always where the arithmetic
// is exact (integer scores, the ties), and otherwise unless two paths' scores are within the rounding of a long sum
// apart. S is the inputs' storage type, T = Acc<S> the accumulator's; C states; blocks of NT threads.
#pragma once

#include "chain/block_reduce.cuh"
#include "chain/chunk_params.cuh"
#include "chain/lengths.cuh"
#include "chain/reductions.cuh"
#include "chain/shift.cuh"
#include "core/dtypes.cuh"
#include "core/numbers.cuh"

namespace jb {

// The chunk whose steps reach a sequence's last position n − 1 (chunk k's steps go from position kL to kL + L).
__device__ __forceinline__ long long chunk_of_end(long long n, long long L) { return n >= 2 ? (n - 2) / L : 0; }

// A warp's share of a step from the relative messages `a` (lane l holds states l, l + 32, ...): the target states
// warp, warp + WARPS, ..., each one's C terms step(c, q) + a[q] reduced by the warp (the winner in arg), and
// out(c, value, arg, early(c)) the result to keep. The terms of RB targets, and early's values for them, are loaded
// before any is reduced, so that their loads are in flight together (at most 32 terms a lane); the largest result is
// returned.
template <class T, int C, int WARPS, class Step, class Early, class Out>
__device__ __forceinline__ T warp_step(const T (&a)[(C + 31) / 32], int warp, int lane, Step step, Early early,
                                       Out out) {
  constexpr int N = (C + 31) / 32, PER_WARP = (C + WARPS - 1) / WARPS, RB = N >= 32 ? 1 : 32 / N < PER_WARP ? 32 / N : PER_WARP;
  T best = Num<T>::neg_inf();
  for (int c0 = warp; c0 < C; c0 += WARPS * RB) {
    T x[RB][N], e[RB];
#pragma unroll
    for (int r = 0; r < RB; ++r) {
      const int c = c0 + r * WARPS;
      e[r] = c < C ? early(c) : T(0);
#pragma unroll
      for (int k = 0; k < N; ++k) {
        const int q = lane + 32 * k;
        x[r][k] = c < C && q < C ? step(c, q) + a[k] : Num<T>::neg_inf();
      }
    }
#pragma unroll
    for (int r = 0; r < RB; ++r) {
      const int c = c0 + r * WARPS;
      if (c >= C) continue; // the same in every lane of the warp
      int arg;
      const T v = out(c, ChainMax<T>::template reduce<32>(x[r], lane, arg), arg, e[r]);
      best = Num<T>::max(best, v);
    }
  }
  return best;
}

// "_chain": a block per sequence. Position 0's messages (0, or the HMM form's initial ⊗ emissions[0]) sent through
// the chunks' relative products (`matrices` [B·chunks][C][C], their offsets in `offsets`) up to the chunk that
// reaches the sequence's end; every chunk's first messages relative to their largest, in rel [B][chunks + 1][C],
// with what was taken out in starts [B][chunks + 1] (double).
template <class S, int C, int NT> __device__ __forceinline__ void chunk_chain(const ChunkParams& p) {
  using T = typename Acc<S>::type;
  constexpr int N = (C + 31) / 32, WARPS = NT / 32;
  __shared__ T msg[C];
  __shared__ T scratch[WARPS];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const T* const products = static_cast<const T*>(p.matrices);
  for (long long b = blockIdx.x; b < p.B; b += gridDim.x) {
    bool bad;
    const long long last = chunk_of_end(chain_length(p, b, bad), p.L);
    __syncthreads(); // the previous sequence's messages are read
    T top = Num<T>::neg_inf();
    for (int c = threadIdx.x; c < C; c += NT) {
      T v = T(0);
      if (p.emissions)
        v = to_acc(static_cast<const S*>(p.initial)[b * p.i_b + (long long)c * p.i_c]) +
            to_acc(static_cast<const S*>(p.emissions)[b * p.e_b + (long long)c * p.e_c]);
      msg[c] = bad ? Num<T>::nan() : v;
      top = Num<T>::max(top, msg[c]);
    }
    T shift = finite_or_zero(block_max<T, NT>(top, scratch));
    double offset = 0;
    for (long long k = 0;; ++k) {
      offset += double(shift);
      const long long at = b * (p.chunks + 1) + k;
      for (int c = threadIdx.x; c < C; c += NT) static_cast<T*>(p.rel)[at * C + c] = msg[c] - shift;
      if (threadIdx.x == 0) p.starts[at] = offset;
      if (k == last) break;
      T a[N];
#pragma unroll
      for (int j = 0; j < N; ++j) a[j] = lane + 32 * j < C ? msg[lane + 32 * j] - shift : Num<T>::neg_inf();
      __syncthreads(); // every message read before the next ones are written
      const T* const m = products + (b * p.chunks + k) * C * C;
      const T best = warp_step<T, C, WARPS>(
          a, warp, lane, [&](int to, int from) { return __ldg(m + to * C + from); }, [](int) { return T(0); },
          [&](int c, T v, int, T) {
            if (lane == 0) msg[c] = v;
            return v;
          });
      shift = finite_or_zero(block_max<T, NT>(best, scratch)); // its barriers publish the messages
      offset += p.offsets[b * p.chunks + k];
    }
  }
}

// "_rerun": a block per chunk up to the one reaching the sequence's end (without a path, a block per sequence for
// that one alone), from its
// first messages (rel, starts) through its steps as the sequential kernels take them. Writes the back-pointers
// back [B][T][C] of the positions it reaches (with a path), and for each state c of its last position the state
// its first position holds on the best path to c, ends [B·chunks][C]; the chunk at the end writes the score and
// the path's last state.
template <class S, int C, int NT> __device__ __forceinline__ void chunk_rerun(const ChunkParams& p) {
  using T = typename Acc<S>::type;
  constexpr int N = (C + 31) / 32, WARPS = NT / 32;
  __shared__ T msg[2][C];
  __shared__ T scratch[WARPS];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (long long i = blockIdx.x; i < (p.path ? p.B * p.chunks : p.B); i += gridDim.x) {
    const long long b = p.path ? i / p.chunks : i;
    bool bad;
    const long long n = chain_length(p, b, bad), last = chunk_of_end(n, p.L), k = p.path ? i % p.chunks : last;
    const long long g = b * p.chunks + k;
    if (k > last) continue;
    const long long first = k * p.L, end = first + p.L < n - 1 ? first + p.L : n - 1;
    const long long at = b * (p.chunks + 1) + k;
    __syncthreads(); // the previous chunk's messages are read
    T top = Num<T>::neg_inf();
    for (int c = threadIdx.x; c < C; c += NT) {
      msg[0][c] = static_cast<const T*>(p.rel)[at * C + c];
      top = Num<T>::max(top, msg[0][c]);
    }
    T shift = finite_or_zero(block_max<T, NT>(top, scratch));
    double offset = p.starts[at];
    const S* const pot = static_cast<const S*>(p.potentials) + b * p.s_b;
    const S* const em = static_cast<const S*>(p.emissions) + b * p.e_b;
    for (long long t = first; t < end; ++t) {
      const int from = int((t - first) & 1), to = from ^ 1;
      offset += double(shift);
      T a[N];
#pragma unroll
      for (int j = 0; j < N; ++j) a[j] = lane + 32 * j < C ? msg[from][lane + 32 * j] - shift : Num<T>::neg_inf();
      const S* const step = pot + t * p.s_t;
      const T best = warp_step<T, C, WARPS>(
          a, warp, lane,
          [&](int c, int q) { return to_acc(step[(long long)c * p.s_c + (long long)q * p.s_p]); },
          [&](int c) { return p.emissions ? to_acc(em[(t + 1) * p.e_t + (long long)c * p.e_c]) : T(0); },
          [&](int c, T v, int arg, T emission) {
            if (p.emissions) v += emission;
            if (lane == 0) {
              msg[to][c] = v;
              if (p.path) p.back[(b * p.T + t + 1) * C + c] = (unsigned short)arg;
            }
            return v;
          });
      shift = finite_or_zero(block_max<T, NT>(best, scratch)); // its barriers publish the messages
    }
    if (k == last && warp == 0) { // the score and the path's end, as the sequential kernels take them
      const int in = int((end - first) & 1);
      T x[N];
#pragma unroll
      for (int j = 0; j < N; ++j) x[j] = lane + 32 * j < C ? msg[in][lane + 32 * j] - shift : Num<T>::neg_inf();
      int arg;
      const T v = ChainMax<T>::template reduce<32>(x, lane, arg);
      const double z = v > Num<T>::neg_inf() && v < Num<T>::inf() ? offset + double(shift) + double(v) : double(v);
      if (lane == 0) {
        static_cast<T*>(p.score)[b] = T(z);
        if (p.path) p.path[b * p.T + n - 1] = v == Num<T>::neg_inf() || bad ? -1 : arg;
      }
    }
    if (p.path) {
      __syncthreads(); // the chunk's back-pointers are written
      for (int c = threadIdx.x; c < C; c += NT) {
        int state = c;
        for (long long t = end; t > first; --t) state = p.back[(b * p.T + t) * C + state];
        p.ends[g * C + c] = (unsigned short)state;
      }
    }
  }
}

// "_compose": a thread per sequence, from the path's last state back through each chunk's map to the state of every
// chunk's first position (−1 throughout where the path's end is −1).
template <int C> __device__ __forceinline__ void chunk_compose(const ChunkParams& p) {
  for (long long b = blockIdx.x * (long long)blockDim.x + threadIdx.x; b < p.B;
       b += (long long)gridDim.x * blockDim.x) {
    bool bad;
    const long long n = chain_length(p, b, bad);
    int state = p.path[b * p.T + n - 1];
    for (long long k = chunk_of_end(n, p.L); k >= 0; --k) {
      if (state >= 0) state = p.ends[(b * p.chunks + k) * C + state];
      p.path[b * p.T + k * p.L] = state;
    }
  }
}

// "_expand": a thread per chunk, the back-pointers from the state of its last position to those between its first
// and last; then −1 from each sequence's length on.
template <int C> __device__ __forceinline__ void chunk_expand(const ChunkParams& p) {
  const long long threads = (long long)gridDim.x * blockDim.x, me = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  for (long long g = me; g < p.B * p.chunks; g += threads) {
    const long long b = g / p.chunks, k = g % p.chunks;
    bool bad;
    const long long n = chain_length(p, b, bad);
    if (k > chunk_of_end(n, p.L)) continue;
    const long long first = k * p.L, end = first + p.L < n - 1 ? first + p.L : n - 1;
    int state = p.path[b * p.T + end];
    for (long long t = end; t > first + 1; --t) {
      if (state >= 0) state = p.back[(b * p.T + t) * C + state];
      p.path[b * p.T + t - 1] = state;
    }
  }
  for (long long i = me; i < p.B * p.T; i += threads) {
    bool bad;
    if (i % p.T >= chain_length(p, i / p.T, bad)) p.path[i] = -1;
  }
}

} // namespace jb
