// The gradients of a chain's entropy, cross-entropy and KL on the CPU: p's covariances between an edge and a path's
// sum of edge scores, from p's messages and the expectation semiring's forward-backward in conditional form (each
// state's expected score given the state, which does not cancel as sums of weighted scores would). Formed in double
// (long double for f64 inputs).
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

namespace jitbmm::reference {

namespace {

// Of one sequence of p and an edge score r(t, c, from): E_p[R] for R a path's sum of r, and Cov_p(1_e, R) =
// μ_e (a_t(from) + r_e + b_{t+1}(c) − E_p[R]), where a_t(s) and b_t(s) are R's expectations over the edges before and
// after position t given state s there. a and b are formed only through edges of weight, so a state p does not
// reach (or leave) may hold any value: no edge of weight reads it.
template <class Real> class Covariance {
public:
  template <class R>
  Covariance(const Sequence<Real>& s, const std::vector<Real>& beta, int64_t C, R r)
      : s_(s), beta_(beta), C_(C), before_(beta.size(), 0), after_(beta.size(), 0), r_(beta.size() * C, 0) {
    const int64_t L = s.length();
    for (int64_t t = 0; t + 1 < L; ++t)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t from = 0; from < C; ++from) r_[(t * C + c) * C + from] = r(t, c, from);
    for (int64_t t = 1; t < L; ++t)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t from = 0; from < C; ++from) {
          const Real w = std::exp(s.alpha(t - 1, from) + s.potential(t - 1, c, from) - s.alpha(t, c));
          if (w > 0) before_[t * C + c] += w * (before_[(t - 1) * C + from] + edge(t - 1, c, from));
        }
    for (int64_t t = L - 2; t >= 0; --t)
      for (int64_t from = 0; from < C; ++from)
        for (int64_t c = 0; c < C; ++c) {
          const Real w = std::exp(s.potential(t, c, from) + beta[(t + 1) * C + c] - beta[t * C + from]);
          if (w > 0) after_[t * C + from] += w * (edge(t, c, from) + after_[(t + 1) * C + c]);
        }
    for (int64_t c = 0; c < C; ++c) { // the first state's probability (its forward message is 0)
      const Real w = std::exp(beta[c] - s.score());
      if (w > 0) mean_ += w * after_[c];
    }
  }
  Real edge(int64_t t, int64_t c, int64_t from) const { return r_[(t * C_ + c) * C_ + from]; }
  // p's marginal of the edge from `from` at t to c at t + 1.
  Real marginal(int64_t t, int64_t c, int64_t from) const {
    return std::exp(s_.alpha(t, from) + s_.potential(t, c, from) + beta_[(t + 1) * C_ + c] - s_.score());
  }
  Real of(int64_t t, int64_t c, int64_t from) const {
    const Real mu = marginal(t, c, from);
    return mu > 0 ? mu * (before_[t * C_ + from] + edge(t, c, from) + after_[(t + 1) * C_ + c] - mean_) : Real(0);
  }

private:
  const Sequence<Real>& s_;
  const std::vector<Real>& beta_;
  int64_t C_;
  std::vector<Real> before_, after_, r_;
  Real mean_ = 0;
};

// Sequence b's share of grad ([T − 1][C][C] of it) and grad_other (null: none): of g_ce · H(p) where other is null,
// else of g_ce · CE(p, q) + g_kl · KL(p ‖ q), by the covariance of each edge with R = −g_ce·θq + g_kl·(θp − θq)
// (−g_ce·θp for the entropy), linear in R. A sequence whose value is not finite (no distribution of p; q's log Z
// +inf or NaN; an edge of p's weight to which q gives none) has NaN at every edge of its length.
template <class Real>
void sequence_grads(const ChainProblem& p, const void* potentials, const void* other, const int64_t* lengths, int64_t b,
                    Real g_ce, Real g_kl, double* grad, double* grad_other) {
  constexpr Real inf = std::numeric_limits<Real>::infinity();
  const int64_t C = p.C;
  const Sequence<Real> s(p, potentials, lengths, b);
  std::optional<Sequence<Real>> q;
  if (other) q.emplace(p, other, lengths, b);
  const int64_t L = s.length(), edges = std::max<int64_t>(L - 1, 0) * C * C;
  const Real z = s.score(), zq = q ? q->score() : z;
  auto theta_q = [&](int64_t t, int64_t c, int64_t from) { return q ? q->potential(t, c, from) : Real(0); };
  bool finite = z > -inf && z < inf && !std::isnan(zq) && zq < inf;
  const std::vector<Real> beta = finite ? s.beta() : std::vector<Real>();
  const std::vector<Real> beta_q = finite && q ? q->beta() : std::vector<Real>();
  if (finite && q) // q gives weight to every edge of p's weight
    for (int64_t t = 0; t + 1 < L && finite; ++t)
      for (int64_t c = 0; c < C && finite; ++c)
        for (int64_t from = 0; from < C && finite; ++from)
          if (s.alpha(t, from) + s.potential(t, c, from) + beta[(t + 1) * C + c] > -inf)
            finite = theta_q(t, c, from) > -inf;
  if (!finite) {
    std::fill(grad, grad + edges, std::numeric_limits<double>::quiet_NaN());
    if (grad_other) std::fill(grad_other, grad_other + edges, std::numeric_limits<double>::quiet_NaN());
    return;
  }
  const Covariance<Real> cov(s, beta, C, [&](int64_t t, int64_t c, int64_t from) {
    const Real tp = s.potential(t, c, from);
    return q ? -g_ce * theta_q(t, c, from) + g_kl * (tp - theta_q(t, c, from)) : -g_ce * tp;
  });
  for (int64_t t = 0; t + 1 < L; ++t)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t from = 0; from < C; ++from) {
        const int64_t at = (t * C + c) * C + from;
        grad[at] = static_cast<double>(cov.of(t, c, from));
        if (!grad_other) continue;
        const Real mu_q = std::exp(q->alpha(t, from) + theta_q(t, c, from) + beta_q[(t + 1) * C + c] - zq);
        grad_other[at] = static_cast<double>((g_ce + g_kl) * (mu_q - cov.marginal(t, c, from)));
      }
}

// What the two entry points share: the checks, then each sequence's gradients.
void grads_of(const ChainProblem& p, const void* potentials, const void* other, const int64_t* lengths,
              const double* g_ce, const double* g_kl, double* grad, double* grad_other) {
  check_chain_inputs(p, lengths);
  if (p.semiring != Semiring::log)
    throw std::invalid_argument("problem.semiring: the distribution over paths is the log semiring's (got " +
                                std::string(semiring_info(p.semiring).name) + ")");
  if (p.B == 0 || p.T == 1) return; // no edge, no gradient
  if (!potentials) throw std::invalid_argument("potentials: null");
  if (!grad) throw std::invalid_argument("grad_potentials: null");
  const int64_t per = (p.T - 1) * p.C * p.C;
  std::fill(grad, grad + p.B * per, 0.0);
  if (grad_other) std::fill(grad_other, grad_other + p.B * per, 0.0);
  for (int64_t b = 0; b < p.B; ++b) {
    const double ce = g_ce ? g_ce[b] : 0.0, kl = g_kl ? g_kl[b] : 0.0;
    if (ce == 0 && kl == 0) continue; // exact zeros, whatever the potentials hold
    double* const out = grad + b * per;
    double* const out_other = grad_other ? grad_other + b * per : nullptr;
    if (p.dtype == DType::f64)
      sequence_grads<long double>(p, potentials, other, lengths, b, ce, kl, out, out_other);
    else
      sequence_grads<double>(p, potentials, other, lengths, b, ce, kl, out, out_other);
  }
}

} // namespace

void chain_entropy_backward(const ChainProblem& p, const void* potentials, const int64_t* lengths,
                            const double* grad_entropy, double* grad_potentials) {
  if (p.B > 0 && !grad_entropy) throw std::invalid_argument("grad_entropy: null");
  grads_of(p, potentials, nullptr, lengths, grad_entropy, nullptr, grad_potentials, nullptr);
}

void chain_cross_entropy_backward(const ChainProblem& p, const void* potentials, const void* other,
                                  const int64_t* lengths, const double* grad_cross_entropy, const double* grad_kl,
                                  double* grad_potentials, double* grad_other) {
  if (p.B > 0 && !grad_cross_entropy && !grad_kl) throw std::invalid_argument("grad_cross_entropy, grad_kl: both null");
  if (p.B > 0 && p.T > 1 && !other) throw std::invalid_argument("other: null");
  grads_of(p, potentials, other, lengths, grad_cross_entropy, grad_kl, grad_potentials, grad_other);
}

} // namespace jitbmm::reference
