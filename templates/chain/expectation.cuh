// A chain's distribution p and an additive field on its edges, in the CRF form: p's log-partition and E_p[F] (F a
// path's sum of the field f), with the conditional expectations of F a backward needs, and the gradients of both
// with respect to p's potentials and to f (runtime/chain_expectation.cpp). Entropy, cross-entropy and KL are such
// expectations: f = p's own potentials, q's, or their difference.
//
// Messages run in the conditional form: before_t(s) = E_p[F over the edges before t | z_t = s] and after_t(s) over
// the edges after t, each a mean of the neighbours' values under p's step weights. Sums of weighted scores would
// cancel, and overflow, over long chains; means stay on the scale of F. With μ an edge's marginal,
//   ∂ log Z / ∂r_e = μ_e,   ∂E_p[F] / ∂f_e = μ_e,   ∂E_p[F] / ∂r_e = Cov_p(1_e, F) = μ_e (before + f_e + after −
//   E_p[F]).
//
// S is the storage type, T its accumulator type (Acc<S>); C states and NT threads a block are compile-time.
#pragma once

#include "chain/expect_params.cuh"
#include "chain/lengths.cuh"
#include "core/dtypes.cuh"
#include "core/expect.cuh"
#include "core/numbers.cuh"

namespace jb {

template <class T> __device__ __forceinline__ bool finite(T x) { return x - x == T(0); }

// One step of the backward messages: a thread per output state o in each of G groups of PW threads (a multiple of 32;
// threads past the last whole group idle). Group g sums, in order, the input states of its own range of K = ⌈C / G⌉
// (the threads of a warp read a row of the potentials together); the groups' sums meet in shared memory and group 0
// merges them in order of g, so every run sums alike. term(o, i, r, f) loads the potential and the field of the edge
// between o and i. (The forward reads its rows along a warp's lanes instead: a thread a row, read by column, measured
// slower.)
template <class T, int C, int NT> struct ExpectStep {
  static constexpr int PW = C >= NT ? NT : (C + 31) / 32 * 32, G = NT / PW, ROUNDS = (C + PW - 1) / PW,
                       K = (C + G - 1) / G;
  T m[G][PW], s[G][PW], a[G][PW];

  // out[0][o] = log Σ_i e^{in[0][i] + r}, out[1][o] = the mean of in[1][i] + f under those weights (0 for none).
  template <class Term> __device__ __forceinline__ void run(const T (&in)[2][C], T (&out)[2][C], Term term) {
    const int o0 = threadIdx.x % PW, g = threadIdx.x / PW, lo = g * K, hi = lo + K < C ? lo + K : C;
    for (int k = 0; k < ROUNDS; ++k) {
      const int o = o0 + k * PW;
      if (g < G && o < C) {
        Expect<T> e = Expect<T>::none();
        for (int i = lo; i < hi; ++i) {
          T r, f;
          term(o, i, r, f);
          e.add(in[0][i] + r, in[1][i] + f);
        }
        m[g][o0] = e.m, s[g][o0] = e.s, a[g][o0] = e.a;
      }
      __syncthreads();
      if (g == 0 && o < C) {
        Expect<T> e{m[0][o0], s[0][o0], a[0][o0]};
        for (int h = 1; h < G; ++h) e.merge({m[h][o0], s[h][o0], a[h][o0]});
        out[0][o] = e.log_sum(), out[1][o] = e.mean(T(0));
      }
      __syncthreads();
    }
  }
};

// The forward (main entry): a block per sequence, a warp per target state, its lanes over the source states (a
// row of the potentials, read in order by the warp together). Writes alpha and before at every position (−inf and 0
// past the length) unless alpha is null, log_z and mean (NaN for a length outside [1, T]; mean NaN where p has no distribution).
template <class S, int C, int NT> __device__ __forceinline__ void expect_forward(const ExpectParams& p) {
  using T = typename Acc<S>::type;
  constexpr int NW = NT / 32;
  __shared__ T msg[2][2][C]; // [buffer][alpha, before][state]
  __shared__ Expect<T> warps[NW];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (long long b = blockIdx.x; b < p.B; b += gridDim.x) {
    bool bad;
    const long long L = chain_length(p, b, bad);
    T* alpha = p.alpha ? static_cast<T*>(p.alpha) + b * p.T * C : nullptr; // null: nothing saved
    T* before = p.alpha ? static_cast<T*>(p.before) + b * p.T * C : nullptr;
    for (int c = threadIdx.x; c < C; c += NT) msg[0][0][c] = msg[0][1][c] = T(0);
    __syncthreads();
    int cur = 0;
    for (long long t = 0; t + 1 < L; ++t) {
      const long long row = (b * (p.T - 1) + t) * C;
      const S* pot = static_cast<const S*>(p.potentials) + row * C;
      const S* fld = static_cast<const S*>(p.field) + row * C;
      for (int c = warp; c < C; c += NW) { // to state c from state q: potentials[c][q]
        Expect<T> e = Expect<T>::none();
        for (int q = lane; q < C; q += 32)
          e.add(msg[cur][0][q] + to_acc(pot[c * C + q]), msg[cur][1][q] + to_acc(fld[c * C + q]));
        e.merge_warp();
        if (lane == 0) msg[cur ^ 1][0][c] = e.log_sum(), msg[cur ^ 1][1][c] = e.mean(T(0));
      }
      if (alpha)
        for (int c = threadIdx.x; c < C; c += NT) alpha[t * C + c] = msg[cur][0][c], before[t * C + c] = msg[cur][1][c];
      __syncthreads();
      cur ^= 1;
    }
    Expect<T> e = Expect<T>::none();
    for (int c = threadIdx.x; c < C; c += NT) {
      if (alpha) alpha[(L - 1) * C + c] = msg[cur][0][c], before[(L - 1) * C + c] = msg[cur][1][c];
      e.add(msg[cur][0][c], msg[cur][1][c]);
    }
    if (alpha)
      for (long long i = L * C + threadIdx.x; i < p.T * C; i += NT) alpha[i] = Num<T>::neg_inf(), before[i] = T(0);
    e.merge_warp();
    if (lane == 0) warps[warp] = e;
    __syncthreads();
    if (threadIdx.x == 0) {
      Expect<T> total = warps[0];
      for (int w = 1; w < NW; ++w) total.merge(warps[w]);
      const T z = total.log_sum();
      static_cast<T*>(p.log_z)[b] = bad ? Num<T>::nan() : z;
      static_cast<T*>(p.mean)[b] = bad || !finite(z) ? Num<T>::nan() : total.mean(Num<T>::nan());
    }
    __syncthreads();
  }
}

// The backward messages ("_beta"): a block per sequence. Writes beta and after at every position (−inf and 0 past
// the length).
template <class S, int C, int NT> __device__ __forceinline__ void expect_backward(const ExpectParams& p) {
  using T = typename Acc<S>::type;
  __shared__ T msg[2][2][C];
  __shared__ ExpectStep<T, C, NT> step;
  for (long long b = blockIdx.x; b < p.B; b += gridDim.x) {
    bool bad;
    const long long L = chain_length(p, b, bad);
    T* beta = static_cast<T*>(p.beta) + b * p.T * C;
    T* after = static_cast<T*>(p.after) + b * p.T * C;
    for (int c = threadIdx.x; c < C; c += NT) msg[0][0][c] = msg[0][1][c] = T(0);
    for (long long i = L * C + threadIdx.x; i < p.T * C; i += NT) beta[i] = Num<T>::neg_inf(), after[i] = T(0);
    __syncthreads();
    int cur = 0;
    for (long long t = L - 2; t >= 0; --t) {
      const long long row = (b * (p.T - 1) + t) * C;
      const S* pot = static_cast<const S*>(p.potentials) + row * C;
      const S* fld = static_cast<const S*>(p.field) + row * C;
      for (int c = threadIdx.x; c < C; c += NT)
        beta[(t + 1) * C + c] = msg[cur][0][c], after[(t + 1) * C + c] = msg[cur][1][c];
      // From state q to state c: potentials[c][q].
      step.run(msg[cur], msg[cur ^ 1], [&](int q, int c, T& r, T& f) {
        r = to_acc(pot[c * C + q]);
        f = to_acc(fld[c * C + q]);
      });
      cur ^= 1;
    }
    for (int c = threadIdx.x; c < C; c += NT) beta[c] = msg[cur][0][c], after[c] = msg[cur][1][c];
    __syncthreads();
  }
}

// The gradients ("_edges"), a block per step (b, t) and a thread per edge of it: grad_potentials = g_z μ + g_mean
// Cov_p(1_e, F), grad_field = g_mean μ; 0 past a sequence's length and where the upstream gradients are 0; NaN where
// a sequence's log Z (or, for g_mean, its mean) is not finite, and at every edge of a sequence whose length is bad.
template <class S, int C> __device__ __forceinline__ void expect_edges(const ExpectParams& p) {
  using T = typename Acc<S>::type;
  const long long steps = p.T - 1, rows = p.B * steps;
  for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
    const long long b = row / steps, t = row % steps;
    bool bad;
    const long long L = chain_length(p, b, bad);
    const T gz = p.grad_log_z ? static_cast<const T*>(p.grad_log_z)[b] : T(0);
    const T gm = p.grad_mean ? static_cast<const T*>(p.grad_mean)[b] : T(0);
    const T z = static_cast<const T*>(p.log_z)[b], mean = static_cast<const T*>(p.mean)[b];
    const bool asked = (bad || t + 1 < L) && (gz != T(0) || gm != T(0));
    const bool undefined = bad || !finite(z) || (gm != T(0) && !finite(mean));
    const T* alpha = static_cast<const T*>(p.alpha) + (b * p.T + t) * C;
    const T* before = static_cast<const T*>(p.before) + (b * p.T + t) * C;
    const T* beta = static_cast<const T*>(p.beta) + (b * p.T + t + 1) * C;
    const T* after = static_cast<const T*>(p.after) + (b * p.T + t + 1) * C;
    const S* pot = static_cast<const S*>(p.potentials) + row * C * C;
    const S* fld = static_cast<const S*>(p.field) + row * C * C;
    for (int e = threadIdx.x; e < C * C; e += blockDim.x) {
      const int c = e / C, q = e % C;
      T dp = T(0), df = T(0);
      if (asked && undefined) {
        dp = Num<T>::nan();
        df = gm != T(0) ? Num<T>::nan() : T(0);
      } else if (asked) {
        const T x = alpha[q] + to_acc(pot[e]) + beta[c] - z;
        const T mu = x == Num<T>::neg_inf() ? T(0) : Expect<T>::ex(x);
        if (gz != T(0)) dp = gz * mu;
        if (gm != T(0) && mu > T(0)) {
          dp += gm * mu * (before[q] + to_acc(fld[e]) + after[c] - mean);
          df = gm * mu;
        }
      }
      if (p.grad_potentials) static_cast<S*>(p.grad_potentials)[row * C * C + e] = from_acc<S>(dp);
      if (p.grad_field) static_cast<S*>(p.grad_field)[row * C * C + e] = from_acc<S>(df);
    }
  }
}

} // namespace jb
