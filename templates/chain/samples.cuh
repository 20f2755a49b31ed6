// Exact samples of a chain's paths by backward sampling from its forward messages: the last state drawn with
// probability e^{alpha[L − 1][c] − log Z}, then each earlier one given the next, z_t ∝ e^{alpha[t][p] +
// potentials[t][z_{t+1}][p]} (in the HMM form transitions[z_{t+1}][p]), a warp a path (runtime/chain_samples.cpp).
// Each draw takes its uniform number from a hash of (seed, sequence, path, position), so a path depends on the seed,
// its place and its own chain alone, and a run repeats exactly.
//
// S is the storage type, T its accumulator type (Acc<S>); C states are compile-time.
#pragma once

#include "chain/lengths.cuh"
#include "chain/sample_params.cuh"
#include "core/dtypes.cuh"
#include "core/numbers.cuh"

namespace jb {

// A uniform number in [0, 1) with 53 random bits, from a 64-bit mix (splitmix64's finaliser) of the draw's place.
__device__ __forceinline__ double sample_uniform(unsigned long long seed, long long b, long long i, long long t) {
  unsigned long long x = seed ^ (0x9e3779b97f4a7c15ull * (unsigned long long)(b + 1));
  x += 0xbf58476d1ce4e5b9ull * (unsigned long long)(i + 1);
  x ^= 0x94d049bb133111ebull * (unsigned long long)(t + 1);
  for (int round = 0; round < 2; ++round) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
  }
  return double(x >> 11) * 0x1p-53;
}

// One draw among the C states of weights e^{x(s) − m}, x(s) = term(s) (−inf: weight 0), every lane of the warp
// taking part: the states in order, lanes over 32 at a time; the first state whose running sum passes u times the
// total. Where rounding leaves the running sums short of it, the last state of weight. -1 where no state has weight.
template <class T, int C, class Term> __device__ __forceinline__ int sample_state(double u, Term term) {
  const int lane = threadIdx.x & 31;
  T m = Num<T>::neg_inf();
  for (int s = lane; s < C; s += 32) m = Num<T>::max(m, term(s));
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) m = Num<T>::max(m, __shfl_xor_sync(0xffffffffu, m, o));
  if (!(m > Num<T>::neg_inf()) || m != m) return -1; // no state of weight, or a NaN term
  auto weight = [&](int s) {
    const T x = s < C ? term(s) : Num<T>::neg_inf();
    return x == Num<T>::neg_inf() ? T(0) : Num<T>::exp2((x - m) * Num<T>::log2e());
  };
  T total = 0;
  for (int s = lane; s < C; s += 32) total += weight(s);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) total += __shfl_xor_sync(0xffffffffu, total, o);
  const T goal = T(u) * total;
  T before = 0; // the running sum of the rounds before
  int last = -1;
  for (int base = 0; base < C; base += 32) {
    const T w = weight(base + lane);
    T upto = w; // inclusive scan over the round's lanes
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const T y = __shfl_up_sync(0xffffffffu, upto, o);
      if (lane >= o) upto += y;
    }
    const unsigned past = __ballot_sync(0xffffffffu, w > T(0) && before + upto > goal);
    if (past) return base + __ffs(past) - 1;
    const unsigned weighed = __ballot_sync(0xffffffffu, w > T(0));
    if (weighed) last = base + 31 - __clz(weighed);
    before += __shfl_sync(0xffffffffu, upto, 31);
  }
  return last;
}

// The main entry: a warp a path, paths[b][i][t] for i < n; −1 past a sequence's length, and throughout for a sequence
// of a length outside [1, T] or without a distribution (log Z −inf, +inf or NaN).
template <class S, int C> __device__ __forceinline__ void chain_sample(const SampleParams& p) {
  using T = typename Acc<S>::type;
  const int lane = threadIdx.x & 31;
  const unsigned long long seed = p.seed_at ? *p.seed_at : p.seed;
  const long long warps = (long long)gridDim.x * (blockDim.x / 32), draws = p.B * p.n;
  for (long long w = blockIdx.x * (long long)(blockDim.x / 32) + threadIdx.x / 32; w < draws; w += warps) {
    const long long b = w / p.n, i = w % p.n;
    bool bad;
    const long long L = chain_length(p, b, bad);
    const T z = static_cast<const T*>(p.score)[b];
    int* path = p.paths + w * p.T;
    for (long long t = L + lane; t < p.T; t += 32) path[t] = -1;
    if (bad || !(z - z == T(0))) {
      for (long long t = lane; t < L; t += 32) path[t] = -1;
      continue;
    }
    const T* alpha = static_cast<const T*>(p.alpha) + b * p.T * C;
    int next = sample_state<T, C>(sample_uniform(seed, b, i, L - 1),
                                  [&](int s) { return alpha[(L - 1) * C + s]; });
    if (lane == 0) path[L - 1] = next;
    for (long long t = L - 2; t >= 0 && next >= 0; --t) {
      const S* row =
          static_cast<const S*>(p.rows) + b * p.row_strides[0] + t * p.row_strides[1] + next * p.row_strides[2];
      const long long from = p.row_strides[3];
      next = sample_state<T, C>(sample_uniform(seed, b, i, t),
                                [&](int s) { return alpha[t * C + s] + to_acc(row[s * from]); });
      if (lane == 0) path[t] = next;
    }
    if (next < 0) // no state of weight where one must be (rounding at the edge of the range): no path, not a wrong one
      for (long long t = lane; t < L; t += 32) path[t] = -1;
  }
}

} // namespace jb
