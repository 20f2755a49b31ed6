// The k-max semiring's product (torch-struct's KMaxSemiring(k).matmul): out[·][i][j] = the k largest of a[r1][i][kk] +
// b[r2][kk][j] over every kk, r1 and r2, in non-increasing order, NaN before every number, equal values in the order
// of (kk, r1, r2); index[r][i][j] = (kk·k + r1)·k + r2 of the r-th, what its gradient flows to. A candidate of −inf
// is none: −inf and −1 where fewer than k are left. One thread an output, its k best in registers.
//
// S is the storage type and its accumulator (float or double); K values a vector (1 to kMaxKMax).
#pragma once

#include "core/dtypes.cuh"
#include "core/numbers.cuh"
#include "structured/kmax_params.cuh"

namespace jb {

// Whether x goes before y: NaN before every number, then the larger; equal values keep their order.
template <class T> __device__ __forceinline__ bool kmax_before(T x, T y) { return x != x ? y == y : x > y; }

template <class S, int K> __device__ __forceinline__ void kmax_product(const KMaxProductParams& p) {
  const long long i = (long long)blockIdx.y * kKMaxTile + threadIdx.y,
                  j = (long long)blockIdx.x * kKMaxTile + threadIdx.x;
  if (i >= p.M || j >= p.N) return;
  const long long vec_a = p.B * p.M * p.K, vec_b = p.B * p.K * p.N, vec_out = p.B * p.M * p.N;
  for (long long b = blockIdx.z; b < p.B; b += gridDim.z) {
    const S* a = static_cast<const S*>(p.a) + (b * p.M + i) * p.K;
    const S* bb = static_cast<const S*>(p.b) + b * p.K * p.N + j;
    S top[K];
    int from[K];
#pragma unroll
    for (int r = 0; r < K; ++r) top[r] = Num<S>::neg_inf(), from[r] = -1;
    for (long long kk = 0; kk < p.K; ++kk) {
      S y[K];
#pragma unroll
      for (int r = 0; r < K; ++r) y[r] = bb[r * vec_b + kk * p.N];
      // Past k = 4, a's entries one at a time in a loop: unrolled with r2 and the insertion, the code holds K³
      // insertions, which NVRTC took about a minute to compile at k = 16 (a first call's wait).
#pragma unroll(K <= 4 ? K : 1)
      for (int r1 = 0; r1 < K; ++r1) {
        const S x = a[r1 * vec_a + kk];
#pragma unroll
        for (int r2 = 0; r2 < K; ++r2) {
          S v = x + y[r2];
          if (!kmax_before(v, top[K - 1])) continue; // most candidates: not among the k so far
          int at = int((kk * K + r1) * K + r2);
          bool placed = false;
#pragma unroll
          for (int r = 0; r < K; ++r) // insertion: the candidate takes its place, the rest move down one
            if (placed || kmax_before(v, top[r])) {
              const S tv = top[r];
              const int ta = from[r];
              top[r] = v, from[r] = at;
              v = tv, at = ta;
              placed = true;
            }
        }
      }
    }
    const long long o = (b * p.M + i) * p.N + j;
#pragma unroll
    for (int r = 0; r < K; ++r) {
      static_cast<S*>(p.out)[r * vec_out + o] = top[r];
      p.index[r * vec_out + o] = from[r];
    }
  }
}

} // namespace jb
