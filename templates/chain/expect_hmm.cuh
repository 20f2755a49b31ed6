// The HMM form's gradients of a chain expectation (templates/chain/expectation.cuh, whose HMM instances give the
// messages): those of p's tables and of the field's, no potential ever formed. In the HMM form state c's emission at
// position t is part of every edge into it (of the first position's score, initial[c] + emissions[0][c], at t = 0),
// so its gradients are the sums of those edges': with μ_t(c) the state's marginal and E_p[F | z_t = c] = before_t(c)
// + after_t(c), the same terms as an edge's ("_nodes", a thread a state and position). The first position's are also
// the initial table's. A transition is part of one edge a step, so its gradients are the edges' summed over the
// steps ("_transitions", a block a tile of the table and a part of the steps; a shared table's parts into scratch,
// which "_reduce" adds in a fixed order, with the sequences' first positions for a shared initial table).
#pragma once

#include "chain/expectation.cuh"

namespace jb {

// "_nodes": the emissions' gradients [B][T][C] (0 past a length), the initial table's where it is per sequence, and
// where it is shared the first positions' into p.first ([2][B][C]: p's, then the field's).
template <class S, int C, int FIELD = kExpectGiven>
__device__ __forceinline__ void expect_hmm_nodes(const ExpectParams& p) {
  using T = typename Acc<S>::type;
  constexpr bool Q = FIELD != kExpectGiven;
  const long long n = p.B * p.T * C;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    const long long b = i / (p.T * C), t = i / C % p.T;
    const int c = int(i % C);
    const ExpectSequence<T, Q> seq(p, b);
    const bool inside = seq.bad || t < seq.L;
    const T* const alpha = static_cast<const T*>(p.alpha);
    const T* const beta = static_cast<const T*>(p.beta);
    T dp = T(0), df = T(0);
    expect_term_grads<T, FIELD>(
        seq, inside, [&] { return alpha[i] + beta[i] - seq.z; },
        [&] { return static_cast<const T*>(p.before)[i] + static_cast<const T*>(p.after)[i] - seq.mean; },
        [&] { return static_cast<const T*>(p.alpha_q)[i] + static_cast<const T*>(p.beta_q)[i] - seq.zq; }, dp, df);
    if (p.grad_emissions) static_cast<S*>(p.grad_emissions)[i] = from_acc<S>(dp);
    if (p.grad_field_emissions) static_cast<S*>(p.grad_field_emissions)[i] = from_acc<S>(df);
    if (t != 0) continue;
    if (p.batched_initial) {
      if (p.grad_initial) static_cast<S*>(p.grad_initial)[b * C + c] = from_acc<S>(dp);
      if (p.grad_field_initial) static_cast<S*>(p.grad_field_initial)[b * C + c] = from_acc<S>(df);
    } else {
      static_cast<T*>(p.first)[b * C + c] = dp;
      static_cast<T*>(p.first)[(p.B + b) * C + c] = df;
    }
  }
}

// "_transitions": block (tile, part) sums its tile's entries (c, q) over the part's steps: the part is a sequence's
// steps where the table is per sequence (written as its gradient), else a range of the B·(T − 1) steps of all of
// them (written to p.partials).
//
// A step's marginal of entry (c, q) is μ = exp(α_t(q) + r_cq + l_c), l_c = emissions_{t+1}(c) + β_{t+1}(c) − log Z,
// and its gradients are sums over the steps of μ times terms of q alone (before_t(q)), of c alone (after_{t+1}(c),
// the emissions) and of the entry alone (the field's transition). Formed term by term that is an exponential a term.
// The block forms factors instead: x_q = exp(α_t(q) − m) with m the step's largest α over the tile's sources,
// R_cq = exp(r_cq − w_c) once, w_c row c's largest transition in the tile, and y_c = exp(m + w_c + l_c), so that
// μ = x_q · R_cq · y_c and each term is a few multiply-adds of factors:
//   S1 += Y1_c · x_q + Y2_c · (x_q · before_q),  S2 += Y2_c · x_q,  Y1 = y (g_z + g_mean (after + fe − E_p[F])),
//   Y2 = g_mean y; then ∂/∂r = R (S1 + f_cq S2) and ∂/∂f = ±R S2 (q's marginals likewise from factors of its own),
// with before_q taken relative to one source's and Y1 given that source's before.
// x and R are at most 1. Where y_c would exceed e^expect_factor_bound (the tile's sources where row c's transitions
// are large all lie far below m), a term of x · R below the smallest normal could hold a part of the row's sum, so
// that step's terms of row c are formed one by one, as are every term of a step with a NaN or +inf message or a
// non-finite upstream gradient or factor, and every term of a tile whose transitions hold NaN or +inf (or a field
// term that is not finite beside a finite transition): they follow expect_term_grads exactly. What the factors
// lose is a term below e^expect_factor_bound times the smallest normal, of a marginal whose step sums to 1.
template <class S, int C, int FIELD = kExpectGiven>
__device__ __forceinline__ void expect_hmm_transitions(const ExpectParams& p) {
  using T = typename Acc<S>::type;
  constexpr bool Q = FIELD != kExpectGiven;
  constexpr long long E = (long long)C * C;
  constexpr int RW = kExpectTileRows, K = kExpectTileSources, J = kExpectEntriesPerThread, U = kExpectTileSteps,
                WARPS = kExpectEdgeThreads / 32, PER = U / WARPS;
  constexpr int SIDE = (C + RW - 1) / RW;
  static_assert(RW == 32 && K == 32 && K % J == 0 && U % WARPS == 0, "a lane a source or row, whole warps a step");
  const long long steps = p.T - 1, parts = p.batched_transitions ? p.B : p.parts, tiles = expect_tiles(C);
  const long long* const es = p.emission_strides;
  const long long* const ts = p.transition_strides;
  const bool same = !Q && p.field == p.potentials && p.field_emissions == p.emissions && p.field_initial == p.initial;
  // A batch's staged factors (a step a row), its rows' modes (1: that step's terms of the row one by one) and steps.
  __shared__ T xs[U][K], xbs[U][K], xqs[Q ? U : 1][K], y1s[U][RW], y2s[U][RW], yqs[Q ? U : 1][RW];
  __shared__ int odd_s[U][RW];
  __shared__ long long step_s[U];
  __shared__ T w_s[RW], wq_s[RW];
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, r = tid / (K / J), q0 = tid % (K / J);
  const T neg_inf = Num<T>::neg_inf(), bound = T(expect_factor_bound(int(sizeof(T))));
  for (long long block = blockIdx.x; block < tiles * parts; block += gridDim.x) {
    const long long tile = block % tiles, part = block / tiles;
    const int c0 = int(tile / SIDE) * RW, s0 = int(tile % SIDE) * K, c = c0 + r;
    const long long from = p.batched_transitions ? part * steps : p.B * steps * part / parts,
                    to = p.batched_transitions ? from + steps : p.B * steps * (part + 1) / parts;
    const long long table = p.batched_transitions ? part * ts[0] : 0;
    // The thread's entries' transitions, p's and the field's (−inf past the table), read again for the sums' last
    // factors at the end rather than held through the steps.
    auto entry = [&](int j, T& rv, T& fv) {
      const int q = s0 + q0 + (K / J) * j;
      const long long at = table + c * ts[1] + q * ts[2];
      // Chains of one position have no steps, and their transitions need not be given.
      const bool in = steps > 0 && c < C && q < C;
      rv = in ? to_acc(static_cast<const S*>(p.potentials)[at]) : neg_inf;
      fv = !in ? neg_inf : same ? rv : to_acc(static_cast<const S*>(p.field)[at]);
    };
    T s1[J], s2[J], sq[J], d1[J], d2[J];
    T w = neg_inf, wq = neg_inf;
    int bad = 0;
#pragma unroll
    for (int j = 0; j < J; ++j) {
      T rv, fv;
      entry(j, rv, fv);
      const T ft = FIELD == kExpectDifference ? rv - fv : fv;
      bad |= rv != rv || rv == Num<T>::inf() || fv != fv || fv == Num<T>::inf() || (rv > neg_inf && !finite(ft));
      w = Num<T>::max(w, rv), wq = Num<T>::max(wq, fv);
      s1[j] = s2[j] = sq[j] = d1[j] = d2[j] = T(0);
    }
    // Each row's largest transition over its K / J threads, consecutive lanes.
#pragma unroll
    for (int o = 1; o < K / J; o <<= 1) {
      w = Num<T>::max(w, __shfl_xor_sync(0xffffffffu, w, o));
      wq = Num<T>::max(wq, __shfl_xor_sync(0xffffffffu, wq, o));
    }
    if (tid % (K / J) == 0) w_s[r] = w, wq_s[r] = wq;
    bad = __syncthreads_or(bad);

    // Step i's terms of the thread's entries one by one, as expect_term_grads forms them.
    auto terms = [&](long long i) {
      const long long b = i / steps, t = i % steps;
      const ExpectSequence<T, Q> seq(p, b);
      const bool inside = seq.bad || t + 1 < seq.L;
      if (!seq.asked(inside) && !seq.asked_q(inside)) return;
      const long long at = (b * p.T + t) * C, next = at + C, em = b * es[0] + (t + 1) * es[1];
      if (c >= C) return;
      const T e = to_acc(static_cast<const S*>(p.emissions)[em + c * es[2]]);
      const T fe = same ? e : to_acc(static_cast<const S*>(p.field_emissions)[em + c * es[2]]);
#pragma unroll
      for (int j = 0; j < J; ++j) {
        const int q = s0 + q0 + (K / J) * j;
        if (q >= C) continue;
        const long long ta = table + c * ts[1] + q * ts[2];
        const T rv = to_acc(static_cast<const S*>(p.potentials)[ta]);
        const T rt = rv + e, fvt = (same ? rv : to_acc(static_cast<const S*>(p.field)[ta])) + fe;
        expect_term_grads<T, FIELD>(
            seq, inside,
            [&] {
              return static_cast<const T*>(p.alpha)[at + q] + rt + static_cast<const T*>(p.beta)[next + c] - seq.z;
            },
            [&] {
              return static_cast<const T*>(p.before)[at + q] + (FIELD == kExpectDifference ? rt - fvt : fvt) +
                     static_cast<const T*>(p.after)[next + c] - seq.mean;
            },
            [&] {
              return static_cast<const T*>(p.alpha_q)[at + q] + fvt + static_cast<const T*>(p.beta_q)[next + c] -
                     seq.zq;
            },
            d1[j], d2[j]);
      }
    };

    if (bad) {
      for (long long i = from; i < to; ++i) terms(i);
    } else {
      for (long long i0 = from; i0 < to; i0 += U) {
        const int n = to - i0 < U ? int(to - i0) : U;
        // Warp w stages steps w, w + WARPS, ... of the batch: all of their loads first, so that they are in flight
        // together, then their factors.
        ExpectSequence<T, Q> seq[PER];
        T av[PER], aqv[PER], bv[PER], ev[PER], fev[PER], bev[PER], afv[PER], bqv[PER];
        const int q = s0 + lane, cr = c0 + lane;
#pragma unroll
        for (int k = 0; k < PER; ++k) {
          const int u = warp + k * WARPS;
          if (u >= n) continue;
          const long long i = i0 + u, b = i / steps, t = i % steps;
          const long long at = (b * p.T + t) * C, next = at + C, em = b * es[0] + (t + 1) * es[1] + cr * es[2];
          seq[k] = ExpectSequence<T, Q>(p, b);
          av[k] = q < C ? static_cast<const T*>(p.alpha)[at + q] : neg_inf;
          aqv[k] = Q && q < C ? static_cast<const T*>(p.alpha_q)[at + q] : neg_inf;
          bv[k] = q < C ? static_cast<const T*>(p.before)[at + q] : T(0);
          ev[k] = cr < C ? to_acc(static_cast<const S*>(p.emissions)[em]) : T(0);
          fev[k] = same || cr >= C ? ev[k] : to_acc(static_cast<const S*>(p.field_emissions)[em]);
          bev[k] = cr < C ? static_cast<const T*>(p.beta)[next + cr] : T(0);
          afv[k] = cr < C ? static_cast<const T*>(p.after)[next + cr] : T(0);
          bqv[k] = Q && cr < C ? static_cast<const T*>(p.beta_q)[next + cr] : T(0);
        }
#pragma unroll
        for (int k = 0; k < PER; ++k) {
          const int u = warp + k * WARPS;
          if (u >= n) continue; // the same for the whole warp
          const long long i = i0 + u, t = i % steps;
          const ExpectSequence<T, Q>& sk = seq[k];
          const bool inside = sk.bad || t + 1 < sk.L;
          const bool ap = sk.asked(inside), aq = sk.asked_q(inside);
          int odd = (ap && (sk.undefined || !finite(sk.gz) || !finite(sk.gm))) || (aq && !finite(sk.gzq)) ||
                    (aq && sk.undefined_q);
          const T a = ap ? av[k] : neg_inf, aqa = aq ? aqv[k] : neg_inf;
          odd |= a != a || a == Num<T>::inf() || aqa != aqa || aqa == Num<T>::inf();
          odd = __any_sync(0xffffffffu, odd);
          const T m = group_reduce<32>(a, [](T x, T y) { return Num<T>::max(x, y); });
          const T mq = group_reduce<32>(aqa, [](T x, T y) { return Num<T>::max(x, y); });
          const T x = !odd && a > neg_inf ? Expect<T>::ex(a - m) : T(0);
          // before less its value at the step's first largest α (bref), so that the sums hold F's deviations rather
          // than its running totals, which would cancel.
          const T bk = sk.gm != T(0) && a > neg_inf ? bv[k] : T(0);
          const unsigned tops = __ballot_sync(0xffffffffu, !odd && a == m && a > neg_inf);
          const T bref = tops ? __shfl_sync(0xffffffffu, bk, __ffs(tops) - 1) : T(0);
          const T xb = x > T(0) && sk.gm != T(0) ? x * (bk - bref) : T(0);
          odd = __any_sync(0xffffffffu, odd || !finite(xb) || !finite(bk));
          xs[u][lane] = odd ? T(0) : x, xbs[u][lane] = odd ? T(0) : xb;
          if constexpr (Q) xqs[u][lane] = !odd && aqa > neg_inf ? Expect<T>::ex(aqa - mq) : T(0);
          T y1 = T(0), y2 = T(0), yq = T(0);
          int row_odd = odd;
          if (!odd && cr < C && (ap || aq)) {
            const T e = ev[k], fe = fev[k];
            if (ap) {
              const T ey = m + w_s[lane] + (e + bev[k] - sk.z);
              if (ey != ey || ey > bound) {
                row_odd = 1;
              } else if (ey > neg_inf) {
                const T y = Expect<T>::ex(ey);
                const T cond =
                    sk.gm != T(0) ? afv[k] + (FIELD == kExpectDifference ? e - fe + T(1) : fe) - sk.mean + bref : T(0);
                y1 = y * (sk.gz + sk.gm * cond), y2 = sk.gm * y;
                row_odd |= !finite(y1) || !finite(y2);
              }
            }
            if (aq) {
              const T ey = mq + wq_s[lane] + (fe + bqv[k] - sk.zq);
              if (ey != ey || ey > bound) {
                row_odd = 1;
              } else if (ey > neg_inf) {
                yq = sk.gzq * Expect<T>::ex(ey);
                row_odd |= !finite(yq);
              }
            }
          }
          row_odd = row_odd && cr < C && (ap || aq);
          y1s[u][lane] = row_odd ? T(0) : y1, y2s[u][lane] = row_odd ? T(0) : y2;
          if constexpr (Q) yqs[u][lane] = row_odd ? T(0) : yq;
          odd_s[u][lane] = row_odd;
          if (lane == 0) step_s[u] = i;
        }
        __syncthreads();
        for (int u = 0; u < n; ++u) {
          const T y1 = y1s[u][r], y2 = y2s[u][r];
#pragma unroll
          for (int j = 0; j < J; ++j) {
            const int q = q0 + (K / J) * j;
            const T x = xs[u][q];
            s1[j] += y1 * x + y2 * xbs[u][q];
            s2[j] += y2 * x;
            if constexpr (Q) sq[j] += yqs[u][r] * xqs[u][q];
          }
          if (odd_s[u][r]) terms(step_s[u]);
        }
        __syncthreads();
      }
    }
#pragma unroll
    for (int j = 0; j < J; ++j) {
      const int q = s0 + q0 + (K / J) * j;
      if (c >= C || q >= C) continue;
      T dp = d1[j], df = d2[j];
      if (!bad) {
        T rv, fv;
        entry(j, rv, fv);
        const T ft = FIELD == kExpectDifference ? rv - fv : fv;
        const T rf = rv > neg_inf ? Expect<T>::ex(rv - w) : T(0),
                rq = Q && fv > neg_inf ? Expect<T>::ex(fv - wq) : T(0);
        if (rf > T(0)) {
          dp += rf * (s2[j] != T(0) ? s1[j] + ft * s2[j] : s1[j]);
          df += FIELD == kExpectDifference ? -(rf * s2[j]) : rf * s2[j];
        }
        if (Q && rq > T(0)) df += rq * sq[j];
      }
      const long long e = (long long)c * C + q;
      if (p.batched_transitions) {
        if (p.grad_transitions) static_cast<S*>(p.grad_transitions)[part * E + e] = from_acc<S>(dp);
        if (p.grad_field_transitions) static_cast<S*>(p.grad_field_transitions)[part * E + e] = from_acc<S>(df);
      } else {
        static_cast<T*>(p.partials)[2 * part * E + e] = dp;
        static_cast<T*>(p.partials)[(2 * part + 1) * E + e] = df;
      }
    }
  }
}

// "_transpose": the transition tables the backward messages read, p's and the field's, copied [from][to] into
// p.transposed (a field of p's own tables is copied twice, so that every byte of `saved` is written). Their lanes
// each take a source state's successors, which a table stored [to][from] holds a row apart: read from the copy, a
// warp's loads are consecutive. A block a 32 × 32 tile through shared memory, read along the stored rows and written
// along the copy's.
template <class S, int C> __device__ __forceinline__ void expect_hmm_transpose(const ExpectParams& p) {
  // The transitions' tiles (expect_tiles), square: the runtime launches a block a tile of each copy.
  constexpr int W = kExpectTileRows, SIDE = (C + W - 1) / W, ROWS = kExpectEdgeThreads / W;
  constexpr long long E = (long long)C * C, TILES = expect_tiles(C);
  static_assert(kExpectTileRows == kExpectTileSources && kExpectEdgeThreads % W == 0, "square tiles, whole rows");
  const long long tables = p.batched_transitions ? p.B : 1;
  const long long* const ts = p.transition_strides;
  __shared__ S tile[W][W + 1];
  const int x = threadIdx.x % W, y = threadIdx.x / W;
  for (long long block = blockIdx.x; block < 2 * tables * TILES; block += gridDim.x) {
    const long long which = block / (tables * TILES), b = block / TILES % tables, at = block % TILES;
    const int to0 = int(at / SIDE) * W, from0 = int(at % SIDE) * W;
    const S* const in = static_cast<const S*>(which ? p.field : p.potentials) + b * ts[0];
    S* const out = static_cast<S*>(p.transposed) + (which * tables + b) * E;
    for (int k = y; k < W; k += ROWS)
      if (to0 + k < C && from0 + x < C) tile[k][x] = in[(to0 + k) * ts[1] + (from0 + x) * ts[2]];
    __syncthreads();
    for (int k = y; k < W; k += ROWS)
      if (from0 + k < C && to0 + x < C) out[(long long)(from0 + k) * C + to0 + x] = tile[x][k];
    __syncthreads();
  }
}

// "_reduce": a shared transition table's gradients, a thread an entry adding its parts in order, and a shared
// initial table's, a warp a state adding the sequences' first positions: each lane every 32nd sequence, then the
// lanes in a fixed tree, so that the sum over many sequences takes B / 32 steps and the same order every time.
template <class S, int C> __device__ __forceinline__ void expect_hmm_reduce(const ExpectParams& p) {
  using T = typename Acc<S>::type;
  constexpr long long E = (long long)C * C, E32 = (E + 31) / 32 * 32;
  const T* const partials = static_cast<const T*>(p.partials);
  const T* const firsts = static_cast<const T*>(p.first);
  const long long n = expect_reduce_items(C);
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    T sp = T(0), sf = T(0);
    if (i < E32) {
      if (i >= E || p.batched_transitions || (!p.grad_transitions && !p.grad_field_transitions)) continue;
      for (long long part = 0; part < p.parts; ++part)
        sp += partials[2 * part * E + i], sf += partials[(2 * part + 1) * E + i];
      if (p.grad_transitions) static_cast<S*>(p.grad_transitions)[i] = from_acc<S>(sp);
      if (p.grad_field_transitions) static_cast<S*>(p.grad_field_transitions)[i] = from_acc<S>(sf);
    } else { // a whole warp of one state: the same branch for all of its lanes
      if (p.batched_initial || (!p.grad_initial && !p.grad_field_initial)) continue;
      const long long c = (i - E32) / 32;
      const int lane = int((i - E32) % 32);
      for (long long b = lane; b < p.B; b += 32) sp += firsts[b * C + c], sf += firsts[(p.B + b) * C + c];
#pragma unroll
      for (int d = 16; d > 0; d /= 2)
        sp += __shfl_down_sync(0xffffffffu, sp, d), sf += __shfl_down_sync(0xffffffffu, sf, d);
      if (lane != 0) continue;
      if (p.grad_initial) static_cast<S*>(p.grad_initial)[c] = from_acc<S>(sp);
      if (p.grad_field_initial) static_cast<S*>(p.grad_field_initial)[c] = from_acc<S>(sf);
    }
  }
}

} // namespace jb
