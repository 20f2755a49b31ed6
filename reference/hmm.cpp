// The HMM form on the CPU, in double (long double for f64 inputs). The forward runs the HMM's own recursion:
// alpha_0[c] = initial[c] ⊗ emissions[0][c] and alpha_{t+1}[c] = emissions[t + 1][c] ⊗ ⊕_p alpha_t[p] ⊗
// transitions[c][p], the emission ⊗-ed onto the step's reduction (with infinities that is not the same as reducing
// formed potentials: a +inf emission of a reachable state gives +inf, not NaN, and a NaN emission does not choose
// the back-pointer). The log gradients come from the same messages and the backward ones, beta_t[p] = ⊕_c
// transitions[c][p] ⊗ emissions[t + 1][c] ⊗ beta_{t+1}[c]: the state marginals exp(alpha_t + beta_t − score) and
// the transition marginals exp(alpha_t[p] + transitions[c][p] + emissions[t + 1][c] + beta_{t+1}[c] − score),
// summed onto the tables; max_plus's are the best path's counts. A route independent of the kernels', which keep
// messages near 0 and sum in another order; the host tests check it against the CRF reference on formed potentials
// and against finite differences.
#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "jitbmm/reference.hpp"
#include "reference/chain_inputs.hpp"
#include "reference/log_sum_exp.hpp"
#include "support/checked_size.hpp"

namespace jitbmm::reference {

void check_hmm_inputs(const ChainProblem& p, const HmmInputs& hmm, const int64_t* lengths) {
  check_chain_problem(p);
  if (p.form != ChainForm::hmm) throw std::invalid_argument("hmm: the problem has the crf form (pass the potentials)");
  // The work, B·T·C² terms, and what one sequence holds: its messages and emissions (T·C each) and transitions.
  const auto terms = try_product({p.B, p.T, p.C, p.C});
  if (!terms || *terms > kMaxReferenceTerms)
    throw std::invalid_argument("chain.B: B*T*C*C terms are more than the CPU reference computes");
  if (p.B > 0 && p.T * p.C > kMaxReferenceOutputs)
    throw std::invalid_argument("chain.T: T*C messages a sequence are more than the CPU reference holds");
  if (p.B > 0 && (!hmm.emissions || !hmm.initial || (p.T > 1 && !hmm.transitions)))
    throw std::invalid_argument(!hmm.emissions ? "hmm.emissions: null" : !hmm.initial ? "hmm.initial: null"
                                                                                          : "hmm.transitions: null");
  if (p.with_lengths != (lengths != nullptr) && p.B > 0)
    throw std::invalid_argument(lengths ? "lengths: given, but the problem has with_lengths unset"
                                        : "lengths: null, but the problem has with_lengths set");
  for (int64_t b = 0; lengths && b < p.B; ++b)
    if (lengths[b] < 1 || lengths[b] > p.T)
      throw std::invalid_argument("lengths[" + std::to_string(b) + "]: " + std::to_string(lengths[b]) +
                                  " is outside [1, T = " + std::to_string(p.T) + "]");
}

namespace {

template <class Real> Real table(const ChainProblem& p, const void* data, int64_t at) {
  return static_cast<Real>(load_element(p.dtype, data, at));
}

// Sequence b's messages by the recursion above, in Real; back[t][c] (max_plus) = the best state at t − 1 on the way
// to c at t.
template <class Real> struct Recursion {
  int64_t L = 1;
  std::vector<Real> alpha, w; // w: the transitions [c][p] (none for L = 1)
  std::vector<int32_t> back;
  Real score = 0;
  int32_t last = -1;
  Recursion(const ChainProblem& p, const HmmInputs& hmm, const int64_t* lengths, int64_t b) {
    const HmmStrides st = hmm_strides(p);
    const int64_t C = p.C;
    const bool viterbi = p.semiring == Semiring::max_plus;
    L = lengths ? lengths[b] : p.T;
    auto em = [&](int64_t t, int64_t c) {
      return table<Real>(p, hmm.emissions, b * st.emissions[0] + t * st.emissions[1] + c * st.emissions[2]);
    };
    alpha.assign(std::size_t(L * C), 0);
    back.assign(alpha.size(), -1);
    for (int64_t c = 0; c < C; ++c)
      alpha[std::size_t(c)] = table<Real>(p, hmm.initial, b * st.initial[0] + c * st.initial[1]) + em(0, c);
    std::vector<Real> terms(static_cast<std::size_t>(C));
    w.resize(static_cast<std::size_t>(L > 1 ? C * C : 0));
    for (int64_t c = 0; c < C && L > 1; ++c) // the transitions, read once
      for (int64_t q = 0; q < C; ++q)
        w[std::size_t(c * C + q)] =
            table<Real>(p, hmm.transitions, b * st.transitions[0] + c * st.transitions[1] + q * st.transitions[2]);
    for (int64_t t = 0; t + 1 < L; ++t)
      for (int64_t c = 0; c < C; ++c) {
        for (int64_t q = 0; q < C; ++q) terms[std::size_t(q)] = alpha[std::size_t(t * C + q)] + w[std::size_t(c * C + q)];
        const std::size_t i = std::size_t((t + 1) * C + c);
        if (viterbi) back[i] = first_max(terms);
        alpha[i] = em(t + 1, c) + (viterbi ? terms[std::size_t(back[i])] : log_sum_exp(terms));
      }
    std::copy(alpha.end() - C, alpha.end(), terms.begin());
    last = viterbi ? first_max(terms) : -1;
    score = viterbi ? terms[std::size_t(last)] : log_sum_exp(terms);
  }
  // The best path (max_plus): −1 throughout for a score of −inf.
  std::vector<int32_t> path(int64_t C) const {
    std::vector<int32_t> states(std::size_t(L), -1);
    if (score == -std::numeric_limits<Real>::infinity()) return states;
    states[std::size_t(L - 1)] = last;
    for (int64_t t = L - 1; t > 0; --t) states[std::size_t(t - 1)] = back[std::size_t(t * C + states[std::size_t(t)])];
    return states;
  }
};

template <class Real>
void forward_in(const ChainProblem& p, const HmmInputs& hmm, const int64_t* lengths, double* score, double* alpha,
                int32_t* path) {
  const int64_t T = p.T, C = p.C;
  for (int64_t b = 0; b < p.B; ++b) {
    const Recursion<Real> r(p, hmm, lengths, b);
    score[b] = static_cast<double>(r.score);
    if (alpha)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t c = 0; c < C; ++c)
          alpha[(b * T + t) * C + c] = t < r.L ? static_cast<double>(r.alpha[std::size_t(t * C + c)]) : -INFINITY;
    if (path) {
      const std::vector<int32_t> states = r.path(C);
      for (int64_t t = 0; t < T; ++t) path[b * T + t] = t < r.L ? states[std::size_t(t)] : -1;
    }
  }
}

// Where the gradients go: each null or contiguous, as chain_backward's arguments.
struct HmmGrads {
  double *emissions, *transitions, *initial;
};

template <class Real>
void backward_in(const ChainProblem& p, const HmmInputs& hmm, const int64_t* lengths, const double* grad_score,
                 const HmmGrads& out) {
  const HmmStrides st = hmm_strides(p);
  const int64_t T = p.T, C = p.C;
  const Real inf = std::numeric_limits<Real>::infinity();
  for (int64_t b = 0; b < p.B; ++b) {
    const Real g = grad_score[b];
    if (g == 0) continue; // exact zeros, whatever the tables hold
    const Recursion<Real> r(p, hmm, lengths, b);
    const int64_t L = r.L;
    double* em = out.emissions ? out.emissions + b * T * C : nullptr;
    double* tr = out.transitions ? out.transitions + (p.batched_transitions ? b * C * C : 0) : nullptr;
    double* in = out.initial ? out.initial + (p.batched_initial ? b * C : 0) : nullptr;
    if (p.semiring == Semiring::max_plus) { // the best path's states and moves (none without a path)
      const std::vector<int32_t> s = r.path(C);
      for (int64_t t = 0; t < L && s[std::size_t(t)] >= 0; ++t) {
        const int32_t c = s[std::size_t(t)];
        if (em) em[t * C + c] += static_cast<double>(g);
        if (t == 0 && in) in[c] += static_cast<double>(g);
        if (t > 0 && tr) tr[c * C + s[std::size_t(t - 1)]] += static_cast<double>(g);
      }
      continue;
    }
    if (r.score == -inf) continue; // no path has weight: no marginal
    if (!(r.score < inf)) {        // +inf or NaN: no distribution over paths to differentiate
      for (int64_t i = 0; em && i < T * C; ++i) em[i] = NAN;
      for (int64_t i = 0; tr && i < C * C; ++i) tr[i] = NAN;
      for (int64_t i = 0; in && i < C; ++i) in[i] = NAN;
      continue;
    }
    // The tables in Real, then beta (without its own position's emission) from the end.
    const auto LC = static_cast<std::size_t>(L * C);
    std::vector<Real> e(LC), beta(LC, 0), terms(static_cast<std::size_t>(C));
    const std::vector<Real>& w = r.w;
    for (int64_t t = 0; t < L; ++t)
      for (int64_t c = 0; c < C; ++c)
        e[std::size_t(t * C + c)] =
            table<Real>(p, hmm.emissions, b * st.emissions[0] + t * st.emissions[1] + c * st.emissions[2]);
    for (int64_t t = L - 2; t >= 0; --t)
      for (int64_t q = 0; q < C; ++q) {
        for (int64_t c = 0; c < C; ++c)
          terms[std::size_t(c)] =
              w[std::size_t(c * C + q)] + e[std::size_t((t + 1) * C + c)] + beta[std::size_t((t + 1) * C + c)];
        beta[std::size_t(t * C + q)] = log_sum_exp(terms);
      }
    auto alpha = [&](int64_t t, int64_t c) { return r.alpha[std::size_t(t * C + c)]; };
    for (int64_t t = 0; t < L; ++t)
      for (int64_t c = 0; c < C; ++c) {
        const Real state = g * std::exp(alpha(t, c) + beta[std::size_t(t * C + c)] - r.score);
        if (em) em[t * C + c] += static_cast<double>(state);
        if (t == 0 && in) in[c] += static_cast<double>(state);
      }
    for (int64_t t = 0; tr && t + 1 < L; ++t)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t q = 0; q < C; ++q)
          tr[c * C + q] += static_cast<double>(
              g * std::exp(alpha(t, q) + w[std::size_t(c * C + q)] + e[std::size_t((t + 1) * C + c)] +
                           beta[std::size_t((t + 1) * C + c)] - r.score));
  }
}

} // namespace

void chain_forward(const ChainProblem& p, const HmmInputs& hmm, const int64_t* lengths, double* score, double* alpha,
                   int32_t* path) {
  check_hmm_inputs(p, hmm, lengths);
  if (p.B > 0 && !score) throw std::invalid_argument("score: null");
  if (path && p.semiring != Semiring::max_plus)
    throw std::invalid_argument("path: only max_plus has a best path (the semiring is " +
                                std::string(semiring_info(p.semiring).name) + ")");
  if (p.dtype == DType::f64)
    forward_in<long double>(p, hmm, lengths, score, alpha, path);
  else
    forward_in<double>(p, hmm, lengths, score, alpha, path);
}

void chain_backward(const ChainProblem& p, const HmmInputs& hmm, const int64_t* lengths, const double* grad_score,
                    double* grad_emissions, double* grad_transitions, double* grad_initial) {
  check_hmm_inputs(p, hmm, lengths);
  if (p.B > 0 && !grad_score) throw std::invalid_argument("grad_score: null");
  const int64_t T = p.T, C = p.C;
  if (grad_emissions) std::fill(grad_emissions, grad_emissions + p.B * T * C, 0.0);
  if (grad_transitions) std::fill(grad_transitions, grad_transitions + (p.batched_transitions ? p.B : 1) * C * C, 0.0);
  if (grad_initial) std::fill(grad_initial, grad_initial + (p.batched_initial ? p.B : 1) * C, 0.0);
  const HmmGrads out{grad_emissions, grad_transitions, grad_initial};
  if (p.dtype == DType::f64)
    backward_in<long double>(p, hmm, lengths, grad_score, out);
  else
    backward_in<double>(p, hmm, lengths, grad_score, out);
}

} // namespace jitbmm::reference
