// The expectation (entropy) semiring's product of pairs (torch-struct's EntropySemiring.matmul): with x0_k = a0[i][k]
// + b0[k][j] and x1_k = a1[i][k] + b1[k][j],
//   out0 = log Σ_k e^{x0_k},   out1 = Σ_k p_k (x1_k − log p_k),   p_k = e^{x0_k − out0},
// a term of weight 0 adding nothing to out1 whatever its x1 (no term: out0 −inf, out1 0; out0 +inf or NaN: out1
// NaN). The gradients: ∂out0/∂x0_k = p_k, ∂out1/∂x1_k = p_k and ∂out1/∂x0_k = p_k (x1_k − log p_k − out1), each summed over the
// outputs a term enters (runtime/entropy_product.cpp). One thread an output, or an input for a gradient; every loop
// runs in index order, so results repeat bit for bit.
//
// T is the storage type and its accumulator (float or double).
#pragma once

#include "core/dtypes.cuh"
#include "core/expect.cuh"
#include "core/numbers.cuh"
#include "structured/entropy_params.cuh"

namespace jb {

// The main entry: out for every (b, i, j), a block of kEntropyTile² outputs. Two passes over k: the log-sum first,
// then out1 from each term's x1 − (x0 − out0), never from x1 − x0 and out0 apart (for terms far below 0, such as
// torch-struct's −1e5 zeros, those two would cancel).
template <class T> __device__ __forceinline__ void entropy_product(const EntropyProductParams& p) {
  const long long i = (long long)blockIdx.y * kEntropyTile + threadIdx.y,
                  j = (long long)blockIdx.x * kEntropyTile + threadIdx.x;
  if (i >= p.M || j >= p.N) return;
  const long long pair_a = p.B * p.M * p.K, pair_b = p.B * p.K * p.N, pair_out = p.B * p.M * p.N;
  for (long long b = blockIdx.z; b < p.B; b += gridDim.z) {
    const T* a = static_cast<const T*>(p.a) + (b * p.M + i) * p.K;
    const T* bb = static_cast<const T*>(p.b) + b * p.K * p.N + j;
    Expect<T> e = Expect<T>::none();
    for (long long k = 0; k < p.K; ++k) e.add(a[k] + bb[k * p.N], T(0));
    const T z = e.log_sum();
    T h = 0;
    if (z - z == T(0)) // finite: each term's p (x1 − log p)
      for (long long k = 0; k < p.K; ++k) {
        const T x0 = a[k] + bb[k * p.N];
        if (x0 == Num<T>::neg_inf()) continue;
        const T log_p = x0 - z, q = Num<T>::exp2(log_p * Num<T>::log2e());
        if (q > T(0)) h += q * ((a[pair_a + k] + bb[pair_b + k * p.N]) - log_p);
      }
    else if (z != Num<T>::neg_inf()) // +inf or NaN
      h = Num<T>::nan();
    T* out = static_cast<T*>(p.out) + (b * p.M + i) * p.N + j;
    out[0] = z;
    out[pair_out] = h;
  }
}

// One term's share of the gradients of its output (i, j): (∂ to x0, ∂ to x1), zeros for a term of weight 0.
template <class T>
__device__ __forceinline__ void entropy_term(T x0, T x1, T z, T h, T g0, T g1, T& d0, T& d1) {
  if (x0 == Num<T>::neg_inf()) return;
  const T log_p = x0 - z, q = Num<T>::exp2(log_p * Num<T>::log2e());
  if (q == T(0)) return; // a weight too small for the type: nothing, whatever x1
  d0 += q * (g0 + g1 * (x1 - log_p - h));
  d1 += q * g1;
}

// "_grad_a": grad_a[c][b][i][k] over j, a block of kEntropyTile² (i, k).
template <class T> __device__ __forceinline__ void entropy_product_grad_a(const EntropyProductParams& p) {
  const long long i = (long long)blockIdx.y * kEntropyTile + threadIdx.y,
                  k = (long long)blockIdx.x * kEntropyTile + threadIdx.x;
  if (i >= p.M || k >= p.K) return;
  const long long pair_a = p.B * p.M * p.K, pair_b = p.B * p.K * p.N, pair_out = p.B * p.M * p.N;
  for (long long b = blockIdx.z; b < p.B; b += gridDim.z) {
    const long long at = (b * p.M + i) * p.K + k;
    const T a0 = static_cast<const T*>(p.a)[at], a1 = static_cast<const T*>(p.a)[pair_a + at];
    const T* bb = static_cast<const T*>(p.b) + (b * p.K + k) * p.N;
    const long long row = (b * p.M + i) * p.N;
    const T* out = static_cast<const T*>(p.out) + row;
    const T* g = static_cast<const T*>(p.grad_out) + row;
    T d0 = 0, d1 = 0;
    for (long long j = 0; j < p.N; ++j)
      entropy_term(a0 + bb[j], a1 + bb[pair_b + j], out[j], out[pair_out + j], g[j], g[pair_out + j], d0, d1);
    static_cast<T*>(p.grad_a)[at] = d0;
    static_cast<T*>(p.grad_a)[pair_a + at] = d1;
  }
}

// "_grad_b": grad_b[c][b][k][j] over i, a block of kEntropyTile² (k, j).
template <class T> __device__ __forceinline__ void entropy_product_grad_b(const EntropyProductParams& p) {
  const long long k = (long long)blockIdx.y * kEntropyTile + threadIdx.y,
                  j = (long long)blockIdx.x * kEntropyTile + threadIdx.x;
  if (k >= p.K || j >= p.N) return;
  const long long pair_a = p.B * p.M * p.K, pair_b = p.B * p.K * p.N, pair_out = p.B * p.M * p.N;
  for (long long b = blockIdx.z; b < p.B; b += gridDim.z) {
    const long long at = (b * p.K + k) * p.N + j;
    const T b0 = static_cast<const T*>(p.b)[at], b1 = static_cast<const T*>(p.b)[pair_b + at];
    const T* a = static_cast<const T*>(p.a) + b * p.M * p.K + k;
    const T* out = static_cast<const T*>(p.out) + b * p.M * p.N + j;
    const T* g = static_cast<const T*>(p.grad_out) + b * p.M * p.N + j;
    T d0 = 0, d1 = 0;
    for (long long i = 0; i < p.M; ++i)
      entropy_term(a[i * p.K] + b0, a[pair_a + i * p.K] + b1, out[i * p.N], out[pair_out + i * p.N], g[i * p.N],
                   g[pair_out + i * p.N], d0, d1);
    static_cast<T*>(p.grad_b)[at] = d0;
    static_cast<T*>(p.grad_b)[pair_b + at] = d1;
  }
}

} // namespace jb
