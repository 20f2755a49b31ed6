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
#include "chain/reductions.cuh"
#include "core/cluster.cuh"
#include "core/dtypes.cuh"
#include "core/expect.cuh"
#include "core/numbers.cuh"

namespace jb {

template <class T> __device__ __forceinline__ bool finite(T x) { return x - x == T(0); }

// The type a step's terms are held in: the storage type as read, or in the HMM form the accumulator type, where each
// term is a transition and an emission added.
template <class S, bool HMM> struct ExpectTerm { using type = S; };
template <class S> struct ExpectTerm<S, true> { using type = typename Acc<S>::type; };

// The HMM form's score of state c at a sequence's first position, initial[c] + emissions[0][c], from the tables at
// `emissions` and `initial` (p's or the field's) laid out as p says.
template <class S>
__device__ __forceinline__ typename Acc<S>::type expect_first_node(const ExpectParams& p, const void* emissions,
                                                                   const void* initial, long long b, int c) {
  return to_acc(static_cast<const S*>(initial)[b * p.initial_strides[0] + c * p.initial_strides[1]]) +
         to_acc(static_cast<const S*>(emissions)[b * p.emission_strides[0] + c * p.emission_strides[2]]);
}

// A block's shared memory of a sweep: the messages of the step it reads and of the one it writes, and the warps'
// sums of the last messages, in the message buffer no step reads any more where it is large enough (8-byte messages
// of 1,024 states and q's leave no room beside them in 48 KiB), else an array of their own. Declared by the entry, so
// that a launch of both sweeps holds one.
template <class W, bool OWN> struct ExpectOwnSums { W own_sums; };
template <class W> struct ExpectOwnSums<W, false> {};
template <class T, int NT, bool Q> using ExpectWarpSums = Expect<T>[Q ? 2 : 1][NT / 32];
template <class T, int C, int NT, bool Q>
constexpr bool kExpectOwnSums = sizeof(ExpectWarpSums<T, NT, Q>) > sizeof(T[Q ? 3 : 2][C]);
template <class T, int C, int NT, bool Q>
struct ExpectSweepShared : ExpectOwnSums<ExpectWarpSums<T, NT, Q>, kExpectOwnSums<T, C, NT, Q>> {
  using WarpSums = ExpectWarpSums<T, NT, Q>;
  T msg[2][Q ? 3 : 2][C]; // [buffer][log-sum, mean, q's log-sum][state]
  // The warps' sums, beside buffer `spare` of the messages.
  __device__ __forceinline__ WarpSums& sums(int spare) {
    if constexpr (kExpectOwnSums<T, C, NT, Q>)
      return this->own_sums;
    else
      return *reinterpret_cast<WarpSums*>(&msg[spare]);
  }
};

// One sweep along a chain: the forward messages (alpha, before) from the start, or with BETA the backward messages
// (beta, after) from the end, beta_t(s) = log Σ_c e^{r_t[c][s] + beta_{t+1}(c)} and after_t(s) the mean of
// after_{t+1}(c) + f_t[c][s] under those weights. A sequence is a cluster of K blocks (K = 1: a block), each reducing
// CK of a step's target states and storing its results into every block's messages, so that a step's terms are read
// through K SMs; the cluster's barrier ends the step where the block's would. A block's target states are spread over
// groups of G lanes (expect_lanes), N sources a lane, in ROUNDS rounds of its groups. A target state's sum takes two
// passes over its terms, their largest and then the weights relative to it, so that the lanes' partial sums share
// one scale and meet by plain addition (an online sum would rescale at every merge). A step's terms do not depend on
// the messages: where every round's fit in registers (PREFETCH) each round's are loaded a step ahead, during the step
// before. The forward writes alpha and before at every position (−inf and 0 past the length) unless alpha is null,
// and log_z and mean (NaN for a length outside [1, T]; mean NaN where p has no distribution); the backward writes
// beta and after likewise. Where the field is a chain q (FIELD, ExpectField) its own messages run beside p's, from the
// same loads, into alpha_q (beta_q) and log_z_q.
//
// The HMM instance reads the tables instead: a step's term from source state q to target c is transitions[c][q] +
// emissions[t + 1][c], the same as the potentials formed from them, added in the accumulator type; the forward
// starts from the first position's scores initial + emissions[0] (its means from the field's, q's log-sums from q's),
// so that a length-1 sequence is a distribution over its first state. The backward starts from 0, as the CRF form's;
// its terms' emissions are the sources' own (the later states'), the same for every target, so at each step the
// messages are kept and then given their states' emissions (p's, the field's share of F's, q's: FOLD) once, and a
// step's terms read the transitions alone.
//
// The sweep takes the sequences unit / K, unit / K + units / K, ... of the launch's blocks (clusters) it is given.
template <class S, int C, int NT, bool BETA, int K = 1, int FIELD = kExpectGiven, bool HMM = false>
__device__ __forceinline__ void expect_sweep(const ExpectParams& p,
                                             ExpectSweepShared<typename Acc<S>::type, C, NT, FIELD != kExpectGiven>& sh,
                                             unsigned unit, unsigned units) {
  using T = typename Acc<S>::type;
  constexpr int CK = (C + K - 1) / K, G = expect_lanes(C), GROUPS = NT / G, ROUNDS = (CK + GROUPS - 1) / GROUPS,
                N = (C + G - 1) / G;
  // The registers of a step's terms, both inputs, in 32-bit words: 64 of them leave the rest of a 512-thread block's
  // share for the reduction; half types, a register each too, widen in more temporaries, and take 32.
  using V = typename ExpectTerm<S, HMM>::type;
  constexpr bool PREFETCH = ROUNDS * N * 2 * (sizeof(V) > 4 ? 2 : 1) <= (sizeof(V) < 4 ? 32 : 64);
  constexpr int R = PREFETCH ? ROUNDS : 1, kUnroll = PREFETCH ? ROUNDS : 1;
  constexpr bool FULL = C % G == 0;                           // every lane's sources are states
  constexpr long long STRIDE = (long long)G * (BETA ? C : 1); // from one of a lane's sources to its next
  static_assert(NT % 32 == 0 && 32 % G == 0 && NT % G == 0, "a group is a power-of-two part of a warp");
  static_assert(K >= 1 && K <= kMaxExpectCluster, "a cluster of 1 to kMaxExpectCluster blocks");
  constexpr bool Q = FIELD != kExpectGiven, FOLD = HMM && BETA;
  auto& msg = sh.msg;
  const int tid = threadIdx.x, lane = tid % G, group = tid / G;
  const ClusterShare<C, K> share;
  const unsigned rank = share.rank;
  const int first = share.first, end = share.end; // this block's target states
  // Entropy: the field is p's own potentials (or tables), read once.
  const bool same =
      !Q && p.field == p.potentials && (!HMM || (p.field_emissions == p.emissions && p.field_initial == p.initial));
  const long long* const es = p.emission_strides;
  // The HMM form's backward messages read the copies of tables stored [to][from] where the runtime made them
  // ("_transpose"), [tables][from][to]: a lane's successors of a source state are then consecutive.
  const bool copied = HMM && BETA && p.transposed;
  const long long tables = p.batched_transitions ? p.B : 1,
                  copy_strides[3] = {p.batched_transitions ? (long long)C * C : 0, 1, C};
  const long long* const ts = copied ? copy_strides : p.transition_strides;
  const void* const table = copied ? p.transposed : p.potentials;
  const void* const field_table = !copied                   ? p.field
                                  : p.field == p.potentials ? p.transposed
                                                            : static_cast<const S*>(p.transposed) + tables * C * C;
  for (long long b = unit / K; b < p.B; b += units / K) {
    bool bad;
    const long long L = chain_length(p, b, bad);
    T* keep = static_cast<T*>(BETA ? p.beta : p.alpha); // null: nothing kept
    T* keep_mean = static_cast<T*>(BETA ? p.after : p.before);
    T* keep_q = static_cast<T*>(BETA ? p.beta_q : p.alpha_q);
    if (keep) keep += b * p.T * C, keep_mean += b * p.T * C, keep_q += Q ? b * p.T * C : 0;
    // A chain of one position reads no transitions, which may then be null: no offset from null either.
    const long long shift = HMM ? (p.T > 1 ? b * ts[0] : 0) : b * (p.T - 1) * C * C;
    const S* const pot = static_cast<const S*>(table) + shift;
    const S* const fld = static_cast<const S*>(field_table) + shift;
    // Round r of sweep step s: target state c's N sources of this lane, as stored [to][from] (none: −inf and 0).
    V rb[R][N], fb[R][N];
    auto load = [&](long long s, int r, V(&rw)[N], V(&fw)[N]) {
      const int c = first + group + r * GROUPS, cc = c < end ? c : 0;
      if constexpr (HMM) {
        // The emission of the step's later position: in the forward the target's, the same for all of its sources;
        // the backward's sources are the later states, whose messages carry theirs (FOLD).
        const long long at = cc * (BETA ? ts[2] : ts[1]) + (long long)lane * (BETA ? ts[1] : ts[2]),
                        stride = (long long)G * (BETA ? ts[1] : ts[2]);
        T e = T(0), fe = T(0);
        if (!BETA && c < end) {
          const long long em = b * es[0] + (s + 1) * es[1] + cc * es[2];
          e = to_acc(static_cast<const S*>(p.emissions)[em]);
          fe = same ? e : to_acc(static_cast<const S*>(p.field_emissions)[em]);
        }
        // Pointers moved a source at a time, not addresses formed for every source at once.
        const S *tr = pot + at, *ftr = fld + at;
#pragma unroll
        for (int k = 0; k < N; ++k) {
          const bool real = c < end && (FULL || lane + k * G < C);
          rw[k] = real ? to_acc(*tr) + e : Num<T>::neg_inf();
          if (!same) fw[k] = real ? to_acc(*ftr) + fe : T(0);
          tr += stride, ftr += stride;
        }
      } else {
        const long long at = (BETA ? L - 2 - s : s) * C * C + cc * (BETA ? 1LL : C) + (long long)lane * (BETA ? C : 1);
#pragma unroll
        for (int k = 0; k < N; ++k) {
          const bool real = c < end && (FULL || lane + k * G < C);
          rw[k] = real ? pot[at + k * STRIDE] : from_acc<S>(Num<T>::neg_inf());
          if (!same) fw[k] = real ? fld[at + k * STRIDE] : from_acc<S>(T(0));
        }
      }
    };
    for (int c = tid; c < C; c += NT) {
      T n = T(0), f = T(0); // the first position's scores (the HMM form's forward), p's and the field's
      if constexpr (HMM && !BETA) {
        n = expect_first_node<S>(p, p.emissions, p.initial, b, c);
        f = same ? n : expect_first_node<S>(p, p.field_emissions, p.field_initial, b, c);
      }
      msg[0][0][c] = n, msg[0][1][c] = FIELD == kExpectDifference ? n - f : f;
      if constexpr (Q) msg[0][2][c] = f;
    }
    // With a cluster, also: no block writes into another's messages before that one has left the sequence before.
    share.sync();
    if (PREFETCH && L > 1)
#pragma unroll
      for (int r = 0; r < R; ++r) load(0, r, rb[r], fb[r]);
    int cur = 0;
    for (long long s = 0; s + 1 < L; ++s) {
      const T(&in)[Q ? 3 : 2][C] = msg[cur];
      const long long at = (BETA ? L - 1 - s : s) * C; // the position whose messages `in` holds
      if constexpr (FOLD) {
        // Each state's messages kept as made, then given its emissions at this position to pass on: every block
        // holds all C of them, and a thread keeps and folds the same states.
        T(&held)[Q ? 3 : 2][C] = msg[cur];
        const long long row = b * es[0] + (L - 1 - s) * es[1];
#pragma unroll 1
        for (int c = tid; c < C; c += NT) {
          if (keep && c >= first && c < end) {
            keep[at + c] = held[0][c], keep_mean[at + c] = held[1][c];
            if constexpr (Q) keep_q[at + c] = held[2][c];
          }
          const T e = to_acc(static_cast<const S*>(p.emissions)[row + c * es[2]]),
                  fe = same ? e : to_acc(static_cast<const S*>(p.field_emissions)[row + c * es[2]]);
          held[0][c] += e, held[1][c] += FIELD == kExpectDifference ? e - fe : fe;
          if constexpr (Q) held[2][c] += fe;
        }
        __syncthreads();
      } else if (keep) {
        for (int c = first + tid; c < end; c += NT) {
          keep[at + c] = in[0][c], keep_mean[at + c] = in[1][c];
          if constexpr (Q) keep_q[at + c] = in[2][c];
        }
      }
#pragma unroll kUnroll
      for (int r = 0; r < ROUNDS; ++r) {
        const int c = first + group + r * GROUPS, u = PREFETCH ? r : 0;
        if (!PREFETCH) load(s, r, rb[0], fb[0]);
        auto term = [&](int k) {
          const int q = lane + k * G;
          return FULL || q < C ? in[0][q] + to_acc(rb[u][k]) : Num<T>::neg_inf();
        };
        T m = Num<T>::neg_inf();
#pragma unroll
        for (int k = 0; k < N; ++k) m = Num<T>::max(m, term(k));
        m = group_reduce<G>(m, [](T x, T y) { return Num<T>::max(x, y); });
        // Weight 1 for the largest (+inf too); a term whose weight rounds to 0 adds nothing, whatever its value.
        T sum = T(0), acc = T(0);
#pragma unroll
        for (int k = 0; k < N; ++k) {
          const T x = term(k), w = x == m ? T(1) : Expect<T>::ex(x - m);
          if (w > T(0) && x != Num<T>::neg_inf()) { // all −inf: no term at all
            const int q = lane + k * G;
            sum += w;
            const T r = to_acc(rb[u][k]), f = same ? r : to_acc(fb[u][k]);
            acc += w * (in[1][q] + (FIELD == kExpectDifference ? r - f : f));
          }
        }
        sum = group_reduce<G>(sum, [](T x, T y) { return x + y; });
        acc = group_reduce<G>(acc, [](T x, T y) { return x + y; });
        T vq = T(0); // q's log-sum, its terms the field's
        if constexpr (Q) {
          auto qterm = [&](int k) {
            const int q = lane + k * G;
            return FULL || q < C ? in[2][q] + to_acc(fb[u][k]) : Num<T>::neg_inf();
          };
          T mq = Num<T>::neg_inf(), sq = T(0);
#pragma unroll
          for (int k = 0; k < N; ++k) mq = Num<T>::max(mq, qterm(k));
          mq = group_reduce<G>(mq, [](T x, T y) { return Num<T>::max(x, y); });
#pragma unroll
          for (int k = 0; k < N; ++k) {
            const T x = qterm(k), w = x == mq ? T(1) : Expect<T>::ex(x - mq);
            if (w > T(0) && x != Num<T>::neg_inf()) sq += w;
          }
          sq = group_reduce<G>(sq, [](T x, T y) { return x + y; });
          vq = mq != mq || mq == Num<T>::neg_inf() ? mq : mq + Num<T>::log2(sq) * Num<T>::ln2();
        }
        if (c < end && lane == 0) {
          const bool none = m == Num<T>::neg_inf(), nan = m != m;
          const T v = nan    ? m
                      : none ? m
                             : m + Num<T>::log2(sum) * Num<T>::ln2(),
                  mean = nan    ? m
                         : none ? T(0)
                                : acc / sum;
          msg[cur ^ 1][0][c] = v, msg[cur ^ 1][1][c] = mean;
          if constexpr (Q) msg[cur ^ 1][2][c] = vq;
          for (int k = 1; k < K; ++k) {
            cluster_store(&msg[cur ^ 1][0][c], (rank + k) % K, v);
            cluster_store(&msg[cur ^ 1][1][c], (rank + k) % K, mean);
            if constexpr (Q) cluster_store(&msg[cur ^ 1][2][c], (rank + k) % K, vq);
          }
        }
        if (PREFETCH && s + 2 < L) load(s + 1, r, rb[u], fb[u]);
      }
      share.sync();
      cur ^= 1;
    }
    const long long last = (BETA ? 0 : L - 1) * C;
    if (keep) {
      for (int c = first + tid; c < end; c += NT) {
        keep[last + c] = msg[cur][0][c], keep_mean[last + c] = msg[cur][1][c];
        if constexpr (Q) keep_q[last + c] = msg[cur][2][c];
      }
      if (rank == 0)
        for (long long i = L * C + tid; i < p.T * C; i += NT) {
          keep[i] = Num<T>::neg_inf(), keep_mean[i] = T(0);
          if constexpr (Q) keep_q[i] = Num<T>::neg_inf();
        }
    }
    if (!BETA && rank == 0) { // every block holds the last messages; the first reduces them
      Expect<T> e = Expect<T>::none(), eq = Expect<T>::none();
      for (int c = tid; c < C; c += NT) {
        e.add(msg[cur][0][c], msg[cur][1][c]);
        if constexpr (Q) eq.add(msg[cur][2][c], T(0));
      }
      e.merge_warp();
      if constexpr (Q) eq.merge_warp();
      auto& warps = sh.sums(cur ^ 1);
      if (tid % 32 == 0) {
        warps[0][tid / 32] = e;
        if constexpr (Q) warps[Q ? 1 : 0][tid / 32] = eq;
      }
      __syncthreads();
      if (tid == 0) {
        Expect<T> total = warps[0][0];
        for (int w = 1; w < NT / 32; ++w) total.merge(warps[0][w]);
        const T z = total.log_sum();
        static_cast<T*>(p.log_z)[b] = bad ? Num<T>::nan() : z;
        static_cast<T*>(p.mean)[b] = bad || !finite(z) ? Num<T>::nan() : total.mean(Num<T>::nan());
        if constexpr (Q) {
          Expect<T> total_q = warps[Q ? 1 : 0][0];
          for (int w = 1; w < NT / 32; ++w) total_q.merge(warps[Q ? 1 : 0][w]);
          static_cast<T*>(p.log_z_q)[b] = bad ? Num<T>::nan() : total_q.log_sum();
        }
      }
    }
    __syncthreads(); // the messages are the next sequence's
  }
}

// The forward alone (""): the forward messages of every sequence, a block (or cluster) each.
template <class S, int C, int NT, int K = 1, int FIELD = kExpectGiven, bool HMM = false>
__device__ __forceinline__ void expect_forward(const ExpectParams& p) {
  __shared__ ExpectSweepShared<typename Acc<S>::type, C, NT, FIELD != kExpectGiven> sh;
  expect_sweep<S, C, NT, false, K, FIELD, HMM>(p, sh, blockIdx.x, gridDim.x);
}

// The forward that saves what the backward reads ("_saving"): both sweeps in one launch, the forward messages in the
// grid's first half and the backward messages in its second, so that where the sequences leave SMs idle the two run
// at once (the backward's gradients read both).
template <class S, int C, int NT, int K = 1, int FIELD = kExpectGiven, bool HMM = false>
__device__ __forceinline__ void expect_saving(const ExpectParams& p) {
  __shared__ ExpectSweepShared<typename Acc<S>::type, C, NT, FIELD != kExpectGiven> sh;
  const unsigned half = gridDim.x / 2; // a whole number of clusters each
  if (blockIdx.x < half)
    expect_sweep<S, C, NT, false, K, FIELD, HMM>(p, sh, blockIdx.x, half);
  else
    expect_sweep<S, C, NT, true, K, FIELD, HMM>(p, sh, blockIdx.x - half, half);
}

// A sequence's upstream gradients and the values the gradient passes read beside them: g_z, g_mean and g_zq (0 where
// not given), log Z, E_p[F] and log Z_q, its length.
template <class T, bool Q> struct ExpectSequence {
  T gz, gm, gzq, z, mean, zq;
  long long L;
  bool bad, undefined, undefined_q;
  ExpectSequence() = default;
  __device__ __forceinline__ ExpectSequence(const ExpectParams& p, long long b) {
    L = chain_length(p, b, bad);
    gz = p.grad_log_z ? static_cast<const T*>(p.grad_log_z)[b] : T(0);
    gm = p.grad_mean ? static_cast<const T*>(p.grad_mean)[b] : T(0);
    gzq = Q && p.grad_log_z_q ? static_cast<const T*>(p.grad_log_z_q)[b] : T(0);
    z = static_cast<const T*>(p.log_z)[b], mean = static_cast<const T*>(p.mean)[b];
    zq = Q ? static_cast<const T*>(p.log_z_q)[b] : T(0);
    undefined = bad || !finite(z) || (gm != T(0) && !finite(mean));
    undefined_q = bad || !finite(zq);
  }
  // Whether a term inside the sequence (`inside`: before its length, or anywhere in one whose length is bad) takes
  // p's gradients, and q's.
  __device__ __forceinline__ bool asked(bool inside) const { return inside && (gz != T(0) || gm != T(0)); }
  __device__ __forceinline__ bool asked_q(bool inside) const { return Q && inside && gzq != T(0); }
};

// The gradients of one term of p's score (an edge's potential, or in the HMM form a state's score at a position),
// added into dp, and of its field value, into df: g_z μ + g_mean Cov_p(1_e, F) and g_mean μ, where the field is a
// chain q also g_zq μ_q (see "_edges" below). log_mu() is log μ, cond() E_p[F | the term] − E_p[F] and log_mu_q()
// log μ_q, each called only where it is needed.
template <class T, int FIELD, class LogMu, class Cond, class LogMuQ>
__device__ __forceinline__ void expect_term_grads(const ExpectSequence<T, FIELD != kExpectGiven>& s, bool inside,
                                                  LogMu log_mu, Cond cond, LogMuQ log_mu_q, T& dp, T& df) {
  if (s.asked(inside) && s.undefined) {
    dp = Num<T>::nan();
    df = s.gm != T(0) ? Num<T>::nan() : df;
  } else if (s.asked(inside)) {
    const T x = log_mu(), mu = x == Num<T>::neg_inf() ? T(0) : Expect<T>::ex(x);
    if (s.gz != T(0)) dp += s.gz * mu;
    if (s.gm != T(0) && mu > T(0)) {
      dp += s.gm * mu * (cond() + (FIELD == kExpectDifference ? T(1) : T(0)));
      df += FIELD == kExpectDifference ? -s.gm * mu : s.gm * mu;
    }
  }
  if (s.asked_q(inside)) {
    if (s.undefined_q) {
      df = Num<T>::nan();
    } else {
      const T x = log_mu_q();
      if (x != Num<T>::neg_inf()) df += s.gzq * Expect<T>::ex(x);
    }
  }
}

// The gradients ("_edges"), a block per step (b, t) and a thread per edge of it: grad_potentials = g_z μ + g_mean
// Cov_p(1_e, F) and grad_field = g_mean μ; where the field is a chain q, grad_field is q's, g_mean μ (kExpectChain) or
// −g_mean μ (kExpectDifference, whose F also moves with p: grad_potentials gains g_mean μ) plus g_zq μ_q, μ_q q's edge
// marginal. 0 past a sequence's length and where the upstream gradients are 0; NaN where a sequence's log Z (or, for
// g_mean, its mean; for g_zq, its log Z_q) is not finite, and at every edge of a sequence whose length is bad.
template <class S, int C, int FIELD = kExpectGiven>
__device__ __forceinline__ void expect_edges(const ExpectParams& p) {
  using T = typename Acc<S>::type;
  constexpr bool Q = FIELD != kExpectGiven;
  const long long steps = p.T - 1, rows = p.B * steps;
  for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
    const long long b = row / steps, t = row % steps;
    const ExpectSequence<T, Q> seq(p, b);
    const bool inside = seq.bad || t + 1 < seq.L;
    const long long at = (b * p.T + t) * C, next = (b * p.T + t + 1) * C;
    const T* alpha = static_cast<const T*>(p.alpha) + at;
    const T* before = static_cast<const T*>(p.before) + at;
    const T* beta = static_cast<const T*>(p.beta) + next;
    const T* after = static_cast<const T*>(p.after) + next;
    const T* alpha_q = Q ? static_cast<const T*>(p.alpha_q) + at : nullptr;
    const T* beta_q = Q ? static_cast<const T*>(p.beta_q) + next : nullptr;
    const S* pot = static_cast<const S*>(p.potentials) + row * C * C;
    const S* fld = static_cast<const S*>(p.field) + row * C * C;
    for (int e = threadIdx.x; e < C * C; e += blockDim.x) {
      const int c = e / C, q = e % C;
      T dp = T(0), df = T(0);
      // The potential is read only where the gradients need it: never past a sequence's length.
      expect_term_grads<T, FIELD>(
          seq, inside, [&] { return alpha[q] + to_acc(pot[e]) + beta[c] - seq.z; },
          [&] {
            const T r = to_acc(pot[e]), f = to_acc(fld[e]);
            return before[q] + (FIELD == kExpectDifference ? r - f : f) + after[c] - seq.mean;
          },
          [&] { return alpha_q[q] + to_acc(fld[e]) + beta_q[c] - seq.zq; }, dp, df);
      if (p.grad_potentials) static_cast<S*>(p.grad_potentials)[row * C * C + e] = from_acc<S>(dp);
      if (p.grad_field) static_cast<S*>(p.grad_field)[row * C * C + e] = from_acc<S>(df);
    }
  }
}

} // namespace jb
