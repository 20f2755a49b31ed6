// The chain on the CPU: the forward algorithm (log) or Viterbi (max_plus) position by position, and the backward
// from the forward and backward messages. Formed in double (long double for f64 inputs), as the product's reference.
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

void require(const void* pointer, const char* name) {
  if (!pointer) throw std::invalid_argument(std::string(name) + ": null");
}

// The problem, the work (bounded like the product's reference, and named when exceeded) and the lengths.
void check_inputs(const ChainProblem& p, const int64_t* lengths) {
  check_chain_problem(p);
  if (p.form != ChainForm::crf)
    throw std::invalid_argument("potentials: the problem has the hmm form (pass HmmInputs)");
  const auto terms = try_product({p.B, p.T, p.C, p.C});
  if (!terms || *terms > kMaxReferenceTerms) {
    const char* largest = p.B >= p.T && p.B >= p.C * p.C ? "chain.B" : p.T >= p.C * p.C ? "chain.T" : "chain.C";
    throw std::invalid_argument(std::string(largest) + ": B*T*C*C = " + std::to_string(p.B) + "*" +
                                std::to_string(p.T) + "*" + std::to_string(p.C) + "*" + std::to_string(p.C) +
                                " terms are more than the CPU reference computes (" +
                                std::to_string(kMaxReferenceTerms) + ")");
  }
  if (p.B > 0 && p.T * p.C > kMaxReferenceOutputs) // one sequence's messages are held in memory
    throw std::invalid_argument("chain.T: T*C = " + std::to_string(p.T) + "*" + std::to_string(p.C) +
                                " messages a sequence are more than the CPU reference holds (" +
                                std::to_string(kMaxReferenceOutputs) + ")");
  if (p.with_lengths && !lengths && p.B > 0)
    throw std::invalid_argument("lengths: null, but the problem has with_lengths set");
  if (!p.with_lengths && lengths) throw std::invalid_argument("lengths: given, but the problem has with_lengths unset");
  for (int64_t b = 0; lengths && b < p.B; ++b)
    if (lengths[b] < 1 || lengths[b] > p.T)
      throw std::invalid_argument("lengths[" + std::to_string(b) + "]: " + std::to_string(lengths[b]) +
                                  " is outside [1, T = " + std::to_string(p.T) + "]");
}

// One sequence's messages. alpha[t][c] = ⊕ over paths ending in state c at t; beta[t][p] = ⊕ over continuations
// from state p at t to the sequence's end; back[t][c] (max_plus) = the best state at t − 1 on the way to c at t.
template <class Real> class Sequence {
public:
  Sequence(const ChainProblem& p, const void* potentials, const int64_t* lengths, int64_t b)
      : p_(p), potentials_(potentials), b_(b), C_(p.C), L_(lengths ? lengths[b] : p.T) {
    chain_strides(p, strides_);
    const bool viterbi = p.semiring == Semiring::max_plus;
    alpha_.assign(static_cast<std::size_t>(L_ * C_), 0);
    if (viterbi) back_.assign(alpha_.size(), -1);
    std::vector<Real> terms(static_cast<std::size_t>(C_));
    for (int64_t t = 0; t + 1 < L_; ++t)
      for (int64_t c = 0; c < C_; ++c) {
        for (int64_t q = 0; q < C_; ++q) terms[q] = alpha(t, q) + potential(t, c, q);
        const int64_t i = (t + 1) * C_ + c;
        if (viterbi) {
          back_[i] = first_max(terms);
          alpha_[i] = terms[back_[i]];
        } else {
          alpha_[i] = log_sum_exp(terms);
        }
      }
    std::copy(alpha_.end() - C_, alpha_.end(), terms.begin());
    last_ = viterbi ? first_max(terms) : -1;
    score_ = viterbi ? terms[last_] : log_sum_exp(terms);
  }

  int64_t length() const { return L_; }
  Real score() const { return score_; }
  Real alpha(int64_t t, int64_t c) const { return alpha_[t * C_ + c]; }
  Real potential(int64_t t, int64_t c, int64_t q) const {
    return load_element(p_.dtype, potentials_, b_ * strides_[0] + t * strides_[1] + c * strides_[2] + q * strides_[3]);
  }

  // The best path's states (max_plus), by following the back-pointers from the best last state.
  // A sequence whose score is −inf has no path: −1 throughout.
  std::vector<int32_t> path() const {
    std::vector<int32_t> states(static_cast<std::size_t>(L_), -1);
    if (score_ == -std::numeric_limits<Real>::infinity()) return states;
    states[L_ - 1] = last_;
    for (int64_t t = L_ - 1; t > 0; --t) states[t - 1] = back_[t * C_ + states[t]];
    return states;
  }

  // beta[t][q] for every t < L (log).
  std::vector<Real> beta() const {
    std::vector<Real> beta(alpha_.size(), 0), terms(static_cast<std::size_t>(C_));
    for (int64_t t = L_ - 2; t >= 0; --t)
      for (int64_t q = 0; q < C_; ++q) {
        for (int64_t c = 0; c < C_; ++c) terms[c] = potential(t, c, q) + beta[(t + 1) * C_ + c];
        beta[t * C_ + q] = log_sum_exp(terms);
      }
    return beta;
  }

private:
  const ChainProblem& p_;
  const void* potentials_;
  int64_t b_, C_, L_;
  int64_t strides_[4];
  std::vector<Real> alpha_;
  std::vector<int32_t> back_;
  int32_t last_ = -1;
  Real score_ = 0;
};

template <class Real>
void forward_in(const ChainProblem& p, const void* potentials, const int64_t* lengths, double* score, double* alpha,
                int32_t* path) {
  const int64_t T = p.T, C = p.C;
  for (int64_t b = 0; b < p.B; ++b) {
    const Sequence<Real> s(p, potentials, lengths, b);
    score[b] = static_cast<double>(s.score());
    if (alpha)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t c = 0; c < C; ++c)
          alpha[(b * T + t) * C + c] = t < s.length() ? static_cast<double>(s.alpha(t, c)) : -INFINITY;
    if (path) {
      const std::vector<int32_t> states = s.path();
      for (int64_t t = 0; t < T; ++t) path[b * T + t] = t < s.length() ? states[t] : -1;
    }
  }
}

template <class Real>
void backward_in(const ChainProblem& p, const void* potentials, const int64_t* lengths, const double* grad_score,
                 double* grad) {
  const int64_t C = p.C, steps = p.T - 1;
  for (int64_t b = 0; b < p.B; ++b) {
    const Real g = grad_score[b];
    if (g == 0) continue; // exact zeros, whatever the potentials hold
    const Sequence<Real> s(p, potentials, lengths, b);
    double* out = grad + b * steps * C * C; // [t][c][q]
    if (p.semiring == Semiring::max_plus) {
      const std::vector<int32_t> states = s.path();
      for (int64_t t = 0; t + 1 < s.length() && states[t] >= 0; ++t)
        out[(t * C + states[t + 1]) * C + states[t]] = static_cast<double>(g);
      continue;
    }
    if (s.score() == -std::numeric_limits<Real>::infinity()) continue; // no path has weight: no marginal
    const std::vector<Real> beta = s.beta();
    for (int64_t t = 0; t + 1 < s.length(); ++t)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t q = 0; q < C; ++q)
          out[(t * C + c) * C + q] = static_cast<double>(
              g * std::exp(s.alpha(t, q) + s.potential(t, c, q) + beta[(t + 1) * C + c] - s.score()));
  }
}

} // namespace

void chain_forward(const ChainProblem& p, const void* potentials, const int64_t* lengths, double* score, double* alpha,
                   int32_t* path) {
  check_inputs(p, lengths);
  if (p.B > 0) require(score, "score");
  if (path && p.semiring != Semiring::max_plus)
    throw std::invalid_argument("path: only max_plus has a best path (the semiring is " +
                                std::string(semiring_info(p.semiring).name) + ")");
  if (p.dtype == DType::f64)
    forward_in<long double>(p, potentials, lengths, score, alpha, path);
  else
    forward_in<double>(p, potentials, lengths, score, alpha, path);
}

void chain_backward(const ChainProblem& p, const void* potentials, const int64_t* lengths, const double* grad_score,
                    double* grad_potentials) {
  check_inputs(p, lengths);
  if (p.B > 0) require(grad_score, "grad_score");
  if (p.B > 0 && p.T > 1) require(grad_potentials, "grad_potentials");
  std::fill(grad_potentials, grad_potentials + p.B * (p.T - 1) * p.C * p.C, 0.0);
  if (p.dtype == DType::f64)
    backward_in<long double>(p, potentials, lengths, grad_score, grad_potentials);
  else
    backward_in<double>(p, potentials, lengths, grad_score, grad_potentials);
}

} // namespace jitbmm::reference
