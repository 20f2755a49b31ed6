// The chain on the CPU: the forward algorithm (log) or Viterbi (max_plus) position by position, and the backward
// from the forward and backward messages. Formed in double (long double for f64 inputs), as the product's reference.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "jitbmm/reference.hpp"
#include "reference/chain_inputs.hpp"
#include "reference/chain_sequence.hpp"
#include "reference/log_sum_exp.hpp"
#include "support/checked_size.hpp"

namespace jitbmm::reference {

namespace {

void require(const void* pointer, const char* name) {
  if (!pointer) throw std::invalid_argument(std::string(name) + ": null");
}

} // namespace

void check_chain_inputs(const ChainProblem& p, const int64_t* lengths) {
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

namespace {

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

// The entropy of sequence b's distribution over paths, its cross-entropy against `other`'s (the same problem's
// potentials) and their KL divergence, by the chain rule over positions: −Σ_p ν₀(p) log q(p) − Σ_t Σ_{c,p} μ_t(c, p)
// log q(c | p), where ν and μ are p's state and edge marginals and q(p) = exp(β_0(p) − log Z), q(c | p) =
// exp(potential_t(c, p) + β_{t+1}(c) − β_t(p)) are the other's (for the entropy, p's own): terms of one sign, so
// that none cancels; the KL takes log p − log q event by event. A term of no weight (μ = 0) adds nothing; one of
// weight where the other gives none (its log −inf, or undefined once an earlier event had none) makes the
// cross-entropy and the KL +inf.
struct Divergences {
  double entropy = 0, cross_entropy = 0, kl = 0;
};

template <class Real>
Divergences divergences(const ChainProblem& p, const void* potentials, const void* other, const int64_t* lengths,
                        int64_t b) {
  constexpr Real inf = std::numeric_limits<Real>::infinity();
  const Sequence<Real> s(p, potentials, lengths, b);
  std::optional<Sequence<Real>> own_q; // the other chain's messages, where it is another
  if (other) own_q.emplace(p, other, lengths, b);
  const Sequence<Real>& q = own_q ? *own_q : s;
  Divergences d;
  const Real z = s.score(), zq = q.score();
  // No distribution (no path of weight, or +inf or NaN in its sums): nothing to measure.
  if (!(z > -inf && z < inf) || std::isnan(zq) || zq == inf) {
    d.entropy = d.cross_entropy = d.kl = std::numeric_limits<double>::quiet_NaN();
    return d;
  }
  const std::vector<Real> beta = s.beta(), beta_q = other ? q.beta() : beta;
  const int64_t C = p.C, L = s.length();
  Real h = 0, ce = 0, kl = 0;
  // One event: the log of its weight (a probability of p), and log p and log q of it. Whether p gives it weight is
  // decided on the log, so that a weight too small for Real still meets a q that gives the event none.
  auto add = [&](Real log_w, Real log_p, Real log_q) {
    if (log_w == -inf) return;
    const Real w = std::exp(log_w);
    h -= w * log_p;
    if (std::isnan(log_q) || log_q == -inf) { // q gives the event no weight
      ce = kl = inf;
      return;
    }
    ce -= w * log_q;
    kl += w * (log_p - log_q);
  };
  for (int64_t c = 0; c < C; ++c) { // the first state
    const Real log_p = beta[c] - z;
    add(log_p, log_p, beta_q[c] - zq);
  }
  for (int64_t t = 0; t + 1 < L; ++t)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t from = 0; from < C; ++from) {
        const Real log_w = s.alpha(t, from) + s.potential(t, c, from) + beta[(t + 1) * C + c] - z;
        const Real log_p = s.potential(t, c, from) + beta[(t + 1) * C + c] - beta[t * C + from];
        const Real log_q = q.potential(t, c, from) + beta_q[(t + 1) * C + c] - beta_q[t * C + from];
        add(log_w, log_p, log_q);
      }
  d.entropy = static_cast<double>(h);
  d.cross_entropy = static_cast<double>(ce);
  d.kl = static_cast<double>(kl);
  return d;
}

// What the two entry points below share: the checks, then each sequence's divergences into the outputs given.
void divergences_of(const ChainProblem& p, const void* potentials, const void* other, const int64_t* lengths,
                    double* entropy, double* cross_entropy, double* kl) {
  check_chain_inputs(p, lengths);
  if (p.semiring != Semiring::log)
    throw std::invalid_argument("problem.semiring: the distribution over paths is the log semiring's (got " +
                                std::string(semiring_info(p.semiring).name) + ")");
  if (p.B > 0 && p.T > 1) require(potentials, "potentials"); // one position reads none
  for (int64_t b = 0; b < p.B; ++b) {
    const Divergences d = p.dtype == DType::f64 ? divergences<long double>(p, potentials, other, lengths, b)
                                                : divergences<double>(p, potentials, other, lengths, b);
    if (entropy) entropy[b] = d.entropy;
    if (cross_entropy) cross_entropy[b] = d.cross_entropy;
    if (kl) kl[b] = d.kl;
  }
}

} // namespace

void chain_forward(const ChainProblem& p, const void* potentials, const int64_t* lengths, double* score, double* alpha,
                   int32_t* path) {
  check_chain_inputs(p, lengths);
  if (p.B > 0 && p.T > 1) require(potentials, "potentials");
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
  check_chain_inputs(p, lengths);
  if (p.B > 0 && p.T > 1) require(potentials, "potentials");
  if (p.B > 0) require(grad_score, "grad_score");
  if (p.B > 0 && p.T > 1) require(grad_potentials, "grad_potentials");
  std::fill(grad_potentials, grad_potentials + p.B * (p.T - 1) * p.C * p.C, 0.0);
  if (p.dtype == DType::f64)
    backward_in<long double>(p, potentials, lengths, grad_score, grad_potentials);
  else
    backward_in<double>(p, potentials, lengths, grad_score, grad_potentials);
}

void chain_entropy(const ChainProblem& p, const void* potentials, const int64_t* lengths, double* entropy) {
  if (p.B > 0) require(entropy, "entropy");
  divergences_of(p, potentials, nullptr, lengths, entropy, nullptr, nullptr);
}

void chain_cross_entropy(const ChainProblem& p, const void* potentials, const void* other, const int64_t* lengths,
                         double* cross_entropy, double* kl) {
  if (p.B > 0 && p.T > 1) require(other, "other");
  if (p.B > 0 && !cross_entropy && !kl) throw std::invalid_argument("cross_entropy, kl: both null");
  divergences_of(p, potentials, other, lengths, nullptr, cross_entropy, kl);
}

} // namespace jitbmm::reference
