// The chunked strategy's own kernels (runtime/chain_chunked.cpp): the chain's steps copied into chunks of L matrices
// (with the semiring's identity past a sequence's length), each matrix of a chunk's tree of products kept relative
// to its largest entry, the shifts summed back into the score, and the steps' gradients copied out. The products
// themselves are the bmm plans', and the chain of the chunks' products the sequential kernel's.
//
// S is the inputs' storage type, T its accumulator type (Acc<S>), in which every matrix of the tree is kept.
#pragma once

#include "chain/block_reduce.cuh"
#include "chain/chunk_params.cuh"
#include "chain/shift.cuh"
#include "core/dtypes.cuh"
#include "core/numbers.cuh"

namespace jb {

// Chunk g = b·chunks + k holds the steps kL .. kL + L − 1 of sequence b: the matrix of step t (with the HMM form's
// emissions of position t + 1, and with fold_first its first messages in step 0) if t + 1 < the sequence's length, else the identity (0 on the diagonal, −inf elsewhere); NaN for a length outside [1, T].
// A block per matrix, written relative to its largest entry.
template <class S, int C, int NT> __device__ __forceinline__ void chunk_pad(const ChunkParams& p) {
  using T = typename Acc<S>::type;
  __shared__ T scratch[NT / 32];
  const long long matrices = p.count * p.L;
  for (long long m = blockIdx.x; m < matrices; m += gridDim.x) {
    const long long g = p.first + m / p.L, b = g / p.chunks, t = (g % p.chunks) * p.L + m % p.L;
    const long long n = p.lengths ? p.lengths[b] : p.T;
    const bool bad = n < 1 || n > p.T, step = !bad && t + 1 < n;
    const S* pot = static_cast<const S*>(p.potentials) + b * p.s_b + t * p.s_t;
    const S* em = static_cast<const S*>(p.emissions) + b * p.e_b;
    const S* init = static_cast<const S*>(p.initial) + b * p.i_b;
    const bool fold = p.fold_first && t == 0;
    auto value = [&](int e) {
      const int c = e / C, q = e % C;
      if (bad) return Num<T>::nan();
      T v = c == q ? T(0) : Num<T>::neg_inf();
      if (step) {
        v = to_acc(pot[c * p.s_c + q * p.s_p]);
        if (p.emissions) v += to_acc(em[(t + 1) * p.e_t + c * p.e_c]);
      }
      return fold ? v + (to_acc(init[q * p.i_c]) + to_acc(em[q * p.e_c])) : v;
    };
    T x = Num<T>::neg_inf();
    for (int e = threadIdx.x; e < C * C; e += NT) x = Num<T>::max(x, value(e));
    const T shift = finite_or_zero(block_max<T, NT>(x, scratch));
    T* out = static_cast<T*>(p.matrices) + m * C * C;
    for (int e = threadIdx.x; e < C * C; e += NT) out[e] = value(e) - shift;
    if (threadIdx.x == 0) static_cast<T*>(p.shifts)[m] = shift;
  }
}

// A product just formed, made relative to its largest entry: a block per matrix.
template <class T, int C, int NT> __device__ __forceinline__ void chunk_normalize(const ChunkParams& p) {
  __shared__ T scratch[NT / 32];
  for (long long m = blockIdx.x; m < p.count; m += gridDim.x) {
    T* mat = static_cast<T*>(p.matrices) + m * C * C;
    T x = Num<T>::neg_inf();
    for (int e = threadIdx.x; e < C * C; e += NT) x = Num<T>::max(x, mat[e]);
    const T shift = finite_or_zero(block_max<T, NT>(x, scratch));
    for (int e = threadIdx.x; e < C * C; e += NT) mat[e] -= shift;
    if (threadIdx.x == 0) static_cast<T*>(p.shifts)[m] = shift;
  }
}

// The product as it was formed (its shift added back): what the product's backward reads as its output.
template <class T, int C> __device__ __forceinline__ void chunk_restore(const ChunkParams& p) {
  const long long n = p.count * C * C;
  T* mat = static_cast<T*>(p.matrices);
  const T* shifts = static_cast<const T*>(p.shifts);
  for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < n; e += (long long)gridDim.x * blockDim.x)
    mat[e] += shifts[e / (C * C)];
}

// Each chunk's offset: the shifts of its whole tree (L steps, L / 2 products of pairs, ... one), summed in double.
template <class T> __device__ __forceinline__ void chunk_offsets(const ChunkParams& p) {
  const T* shifts = static_cast<const T*>(p.shifts);
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < p.count;
       i += (long long)gridDim.x * blockDim.x) {
    double sum = 0;
    long long base = 0, per = p.L;
    for (int level = 0; level <= p.levels; ++level, base += p.count * per, per /= 2)
      for (long long m = i * per; m < (i + 1) * per; ++m) sum += double(shifts[base + m]);
    p.offsets[p.first + i] = sum;
  }
}

// The score of the chain of the chunks' relative products, plus their offsets: the chain's score.
template <class T> __device__ __forceinline__ void chunk_score(const ChunkParams& p) {
  T* score = static_cast<T*>(p.score);
  for (long long b = blockIdx.x * (long long)blockDim.x + threadIdx.x; b < p.B;
       b += (long long)gridDim.x * blockDim.x) {
    double s = double(score[b]);
    for (long long k = 0; k < p.chunks; ++k) s += p.offsets[b * p.chunks + k];
    score[b] = T(s);
  }
}

// The steps' gradients out of the chunks' (level 0 of the tree's gradient), in the storage type: 0 past a
// sequence's length, NaN for a length outside [1, T] (0 where its grad_score is 0); the identity steps that fill
// the last chunk are no step and are dropped.
template <class S, int C> __device__ __forceinline__ void chunk_unpad(const ChunkParams& p) {
  using T = typename Acc<S>::type;
  const T* in = static_cast<const T*>(p.matrices);
  S* grad = static_cast<S*>(p.grad);
  const long long n = p.count * p.L * C * C;
  for (long long e = blockIdx.x * (long long)blockDim.x + threadIdx.x; e < n; e += (long long)gridDim.x * blockDim.x) {
    const long long m = e / (C * C), g = p.first + m / p.L, b = g / p.chunks, t = (g % p.chunks) * p.L + m % p.L;
    if (t + 1 >= p.T) continue;
    const long long length = p.lengths ? p.lengths[b] : p.T;
    T v = t + 1 < length ? in[e] : T(0);
    if (length < 1 || length > p.T) v = static_cast<const T*>(p.grad_score)[b] == T(0) ? T(0) : Num<T>::nan();
    grad[(b * (p.T - 1) + t) * C * C + e % (C * C)] = from_acc<S>(v);
  }
}

} // namespace jb
