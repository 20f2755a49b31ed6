// The CRF form's backward from what its forward saved: log's edge marginals, max_plus's best-path indicator. Every
// step is independent of the others, so these kernels spread over the whole GPU whatever the chain's length.
#pragma once

#include "chain/lengths.cuh"
#include "chain/params.cuh"
#include "core/dtypes.cuh"
#include "core/numbers.cuh"

namespace jb {

// The log backward: the edge marginals times grad_score[b], exp(alpha_t[p] + potentials[t][c][p] + beta_{t+1}[c]
// − score), from the messages the forward saved. Every step is independent: one block of NT threads per (b, t),
// grid-strided, the step's two message vectors in shared memory. A block's first potentials are loaded with the
// step's messages and scalars, before any of them is used, so that a step waits on memory once (after its length,
// where there are lengths), not once for its scalars, once for its messages and once for its potentials: at few
// states a step is little more than that wait.
template <class S, int C, int NT> __device__ __forceinline__ void chain_marginals(const ChainParams& p) {
  using T = typename Acc<S>::type;
  __shared__ T alpha[C], beta[C];
  const long long steps = p.B * (p.T - 1);
  // A thread takes W adjacent elements at a time: two of a half type from the first one on a 4-byte boundary,
  // rounded by one paired conversion (a conversion to 16 bits takes the unit the exponential takes) and stored as
  // one word; the element before that boundary and one left after the last pair are written alone. CHUNK units'
  // loads are in flight before the first store: a store the compiler cannot prove apart from the next load (grad
  // and potentials might alias) would otherwise make every load wait for the one before.
  constexpr int W = sizeof(S) == 2 ? 2 : 1;
  constexpr int PER = (C * C / W + NT - 1) / NT, CHUNK = PER < 1 ? 1 : PER < 8 ? PER : 8; // PER = 0: C = 1
  for (long long bt = blockIdx.x; bt < steps; bt += gridDim.x) {
    const long long b = bt / (p.T - 1), t = bt % (p.T - 1);
    bool bad;
    const long long L = chain_length(p, b, bad);
    const bool inside = !bad && t + 1 < L; // a step past the length is not read
    S* grad = static_cast<S*>(p.grad) + bt * C * C;
    const S* pot = static_cast<const S*>(p.potentials) + b * p.s_b + t * p.s_t;
    const int head = W == 2 ? int((reinterpret_cast<unsigned long long>(grad) >> 1) & 1) : 0;
    const int units = (C * C - head) / W;
    auto read = [&](int e) { return pot[(long long)(e / C) * p.s_c + (long long)(e % C) * p.s_p]; };
    S y[CHUNK][W];
    auto load = [&](int base) {
#pragma unroll
      for (int j = 0; j < CHUNK; ++j) {
        const int u = threadIdx.x + (base + j) * NT;
#pragma unroll
        for (int w = 0; w < W; ++w) y[j][w] = u < units ? read(head + u * W + w) : S{};
      }
    };
    if (inside) load(0);
    const T g = static_cast<const T*>(p.grad_score)[b];
    const double z = p.logz[b];
    __syncthreads(); // the previous step's messages are read
    double offsets = 0;
    if (inside) {
      for (int c = threadIdx.x; c < C; c += NT) {
        alpha[c] = static_cast<const T*>(p.rel)[(b * p.T + t) * C + c];
        beta[c] = static_cast<const T*>(p.beta_rel)[(b * p.T + t + 1) * C + c];
      }
      offsets = p.offset[b * p.T + t] + p.beta_offset[b * p.T + t + 1];
    }
    __syncthreads();
    // Steps past the length, and every step of a sequence that sends nothing back (grad_score 0, score −inf), are
    // 0; a bad length's steps NaN.
    const bool none = g == T(0) || z == double(Num<T>::neg_inf());
    if (none || !inside) {
      const T fill = bad && !none ? Num<T>::nan() : T(0);
      for (int e = threadIdx.x; e < C * C; e += NT) grad[e] = from_acc<S>(fill);
      continue;
    }
    // The messages' offsets and the score, combined in double: what is left is of the size of one step's terms.
    const T k = T(offsets - z);
    auto marginal = [&](int e, S v) {
      return g * Num<T>::exp2(((alpha[e % C] + k) + (to_acc(v) + beta[e / C])) * Num<T>::log2e());
    };
    for (int base = 0; base < PER; base += CHUNK) {
      if (base > 0) load(base);
#pragma unroll
      for (int j = 0; j < CHUNK; ++j) {
        const int u = threadIdx.x + (base + j) * NT, e = head + u * W;
        if (u >= units) continue;
        if constexpr (W == 2)
          *reinterpret_cast<unsigned*>(grad + e) = pack_pair<S>(marginal(e, y[j][0]), marginal(e + 1, y[j][1]));
        else
          grad[e] = from_acc<S>(marginal(e, y[j][0]));
      }
    }
    if (W == 2 && threadIdx.x == 0) {
      if (head) grad[0] = from_acc<S>(marginal(0, read(0)));
      if ((C * C - head) % 2) grad[C * C - 1] = from_acc<S>(marginal(C * C - 1, read(C * C - 1)));
    }
  }
}

// The max_plus backward: grad_score[b] on each edge of the forward's best path, 0 elsewhere. One block of NT
// threads per (b, t) step, grid-strided.
template <class S, int C, int NT> __device__ __forceinline__ void chain_path_backward(const ChainParams& p) {
  using T = typename Acc<S>::type;
  const long long steps = p.B * (p.T - 1);
  for (long long bt = blockIdx.x; bt < steps; bt += gridDim.x) {
    const long long b = bt / (p.T - 1), t = bt % (p.T - 1);
    bool bad;
    const long long L = chain_length(p, b, bad);
    const int to = t + 1 < L ? p.path[b * p.T + t + 1] : -1, from = t + 1 < L ? p.path[b * p.T + t] : -1;
    const long long hit = to >= 0 && from >= 0 && to < C && from < C ? (long long)to * C + from : -1;
    const T g = static_cast<const T*>(p.grad_score)[b];
    S* grad = static_cast<S*>(p.grad) + bt * C * C;
    for (long long e = threadIdx.x; e < (long long)C * C; e += NT)
      grad[e] = from_acc<S>(bad && g != T(0) ? Num<T>::nan() : e == hit ? g : T(0));
  }
}

} // namespace jb
