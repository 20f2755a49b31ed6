// The HMM form on the CPU. The forward runs the HMM's own recursion: alpha_0[c] = initial[c] ⊗ emissions[0][c] and
// alpha_{t+1}[c] = emissions[t + 1][c] ⊗ ⊕_p alpha_t[p] ⊗ transitions[c][p], the emission ⊗-ed onto the step's
// reduction (with infinities that is not the same as reducing formed potentials: a +inf emission of a reachable
// state gives +inf, not NaN, and a NaN emission does not choose the back-pointer). The gradients go by the CRF
// form's reference instead: each sequence's step potentials are formed from its tables (in double), behind a first
// step from one virtual state that scores initial ⊗ emissions[0], so that position t of the HMM is position t + 1
// of that chain, and the chain's edge gradients are summed back to the tables they came from; that agrees with the
// recursion wherever the score is finite, the only case whose gradients are not NaN or 0 by rule. Both are routes
// independent of the kernels', which never form the potentials and keep messages near 0.
#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "jitbmm/reference.hpp"
#include "reference/log_sum_exp.hpp"
#include "support/checked_size.hpp"

namespace jitbmm::reference {

namespace {

void check_hmm(const ChainProblem& p, const HmmInputs& hmm, const int64_t* lengths) {
  check_chain_problem(p);
  if (p.form != ChainForm::hmm) throw std::invalid_argument("hmm: the problem has the crf form (pass the potentials)");
  const auto terms = try_product({p.B, p.T + 1, p.C, p.C});
  const auto formed = try_product({p.T + 1, p.C, p.C});
  if (!terms || *terms > kMaxReferenceTerms)
    throw std::invalid_argument("chain.B: B*(T+1)*C*C terms are more than the CPU reference computes");
  if (!formed || *formed > kMaxReferenceOutputs)
    throw std::invalid_argument("chain.T: (T+1)*C*C step potentials a sequence are more than the CPU reference forms");
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

// Sequence b as a CRF chain of L + 1 positions (f64, contiguous): step 0 from the virtual state 0 to c scores
// initial[c] + emissions[0][c] (−inf from the other states), step t + 1 from p to c transitions[c][p] +
// emissions[t + 1][c].
struct Formed {
  ChainProblem problem;
  std::vector<double> potentials;
  Formed(const ChainProblem& p, const HmmInputs& hmm, const int64_t* lengths, int64_t b) {
    const HmmStrides st = hmm_strides(p);
    const int64_t L = lengths ? lengths[b] : p.T, C = p.C;
    problem.semiring = p.semiring;
    problem.dtype = DType::f64;
    problem.B = 1;
    problem.T = L + 1;
    problem.C = C;
    auto em = [&](int64_t t, int64_t c) {
      return load_element(p.dtype, hmm.emissions, b * st.emissions[0] + t * st.emissions[1] + c * st.emissions[2]);
    };
    potentials.assign(std::size_t(L * C * C), -std::numeric_limits<double>::infinity());
    for (int64_t c = 0; c < C; ++c)
      potentials[std::size_t(c * C)] =
          load_element(p.dtype, hmm.initial, b * st.initial[0] + c * st.initial[1]) + em(0, c);
    for (int64_t t = 0; t + 1 < L; ++t)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t q = 0; q < C; ++q)
          potentials[std::size_t(((t + 1) * C + c) * C + q)] =
              load_element(p.dtype, hmm.transitions,
                           b * st.transitions[0] + c * st.transitions[1] + q * st.transitions[2]) +
              em(t + 1, c);
  }
};

template <class Real> Real table(const ChainProblem& p, const void* data, int64_t at) {
  return static_cast<Real>(load_element(p.dtype, data, at));
}

// Sequence b's messages by the recursion above, in Real; back[t][c] (max_plus) = the best state at t − 1 on the way
// to c at t.
template <class Real> struct Recursion {
  int64_t L = 1;
  std::vector<Real> alpha;
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
    for (int64_t t = 0; t + 1 < L; ++t)
      for (int64_t c = 0; c < C; ++c) {
        for (int64_t q = 0; q < C; ++q)
          terms[std::size_t(q)] =
              alpha[std::size_t(t * C + q)] +
              table<Real>(p, hmm.transitions, b * st.transitions[0] + c * st.transitions[1] + q * st.transitions[2]);
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

} // namespace

void chain_forward(const ChainProblem& p, const HmmInputs& hmm, const int64_t* lengths, double* score, double* alpha,
                   int32_t* path) {
  check_hmm(p, hmm, lengths);
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
  check_hmm(p, hmm, lengths);
  if (p.B > 0 && !grad_score) throw std::invalid_argument("grad_score: null");
  const int64_t T = p.T, C = p.C;
  if (grad_emissions) std::fill(grad_emissions, grad_emissions + p.B * T * C, 0.0);
  if (grad_transitions) std::fill(grad_transitions, grad_transitions + (p.batched_transitions ? p.B : 1) * C * C, 0.0);
  if (grad_initial) std::fill(grad_initial, grad_initial + (p.batched_initial ? p.B : 1) * C, 0.0);
  const bool log = p.semiring == Semiring::log;
  for (int64_t b = 0; b < p.B; ++b) {
    const double g = grad_score[b];
    if (g == 0) continue;
    const Formed f(p, hmm, lengths, b);
    const int64_t L = f.problem.T - 1;
    double* em = grad_emissions ? grad_emissions + b * T * C : nullptr;
    double* tr = grad_transitions ? grad_transitions + (p.batched_transitions ? b * C * C : 0) : nullptr;
    double* in = grad_initial ? grad_initial + (p.batched_initial ? b * C : 0) : nullptr;
    const double z = static_cast<double>(Recursion<long double>(p, hmm, lengths, b).score);
    // Without a distribution over paths (a log score of +inf or NaN), every gradient is NaN; of −inf, 0.
    if (log && !(z < std::numeric_limits<double>::infinity())) {
      for (int64_t i = 0; em && i < T * C; ++i) em[i] = NAN;
      for (int64_t i = 0; tr && i < C * C; ++i) tr[i] = NAN;
      for (int64_t i = 0; in && i < C; ++i) in[i] = NAN;
      continue;
    }
    std::vector<double> edges(f.potentials.size());
    chain_backward(f.problem, f.potentials.data(), nullptr, &g, edges.data());
    for (int64_t c = 0; c < C; ++c) {
      const double first = edges[std::size_t(c * C)]; // the virtual step into c: position 0's marginal
      if (em) em[c] += first;
      if (in) in[c] += first;
    }
    for (int64_t t = 0; t + 1 < L; ++t)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t q = 0; q < C; ++q) {
          const double x = edges[std::size_t(((t + 1) * C + c) * C + q)];
          if (em) em[(t + 1) * C + c] += x;
          if (tr) tr[c * C + q] += x;
        }
  }
}

} // namespace jitbmm::reference
