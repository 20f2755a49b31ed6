// The reference gradients of a chain's entropy, cross-entropy and KL (the oracle of the kernels that will compute
// them) against an enumeration of every path of small chains, the covariances of each edge with the paths' scores,
// and against central differences of the values; random, masked with −inf, ragged, of one position; edge cases.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "host/chain_paths.hpp"
#include "host/chain_problems.hpp"
#include "jitbmm/chain.hpp"
#include "jitbmm/reference.hpp"

using namespace jitbmm;
using namespace jitbmm::test;

namespace {

// Of sequence b: the enumeration's gradients of g_h·H(p) (other null) or g_ce·CE(p, q) + g_kl·KL(p ‖ q), as the
// reference defines them: p's side the covariance of each edge with R = −g_ce·s_q + g_kl·(s_p − s_q) (−g_h·s_p),
// q's side (g_ce + g_kl)(μq − μp).
struct Want {
  std::vector<long double> p, q;
};
Want enumerated(const ChainProblem& p, const std::vector<double>& pot, const std::vector<double>* other, int64_t b,
                int64_t L, long double g_ce, long double g_kl) {
  const int64_t C = p.C, per = (p.T - 1) * C * C;
  Want want{std::vector<long double>(per, 0), std::vector<long double>(per, 0)};
  const std::vector<Path> ps = every_path(p, pot, b, L), qs = other ? every_path(p, *other, b, L) : ps;
  const long double z = log_total(ps), zq = log_total(qs);
  std::vector<long double> r(ps.size());
  long double mean = 0;
  for (std::size_t i = 0; i < ps.size(); ++i) {
    if (ps[i].score == -kInf) continue;
    r[i] = other ? -g_ce * qs[i].score + g_kl * (ps[i].score - qs[i].score) : -g_ce * ps[i].score;
    mean += std::exp(ps[i].score - z) * r[i];
  }
  for (std::size_t i = 0; i < ps.size(); ++i)
    for (int64_t t = 0; t + 1 < L; ++t) {
      const int64_t at = (t * C + ps[i].states[t + 1]) * C + ps[i].states[t];
      if (ps[i].score > -kInf) want.p[at] += std::exp(ps[i].score - z) * (r[i] - mean);
      if (!other) continue;
      if (ps[i].score > -kInf) want.q[at] -= (g_ce + g_kl) * std::exp(ps[i].score - z);
      if (qs[i].score > -kInf) want.q[at] += (g_ce + g_kl) * std::exp(qs[i].score - zq);
    }
  return want;
}

} // namespace

TEST_CASE("chain divergence gradients: the entropy's, the cross-entropy's and the KL's equal the enumeration's") {
  std::mt19937_64 rng(20261203);
  std::normal_distribution<double> upstream(0.0, 1.0);
  int checked = 0, not_finite = 0;
  auto check = [&](const ChainProblem& p, const std::vector<double>& pot, const std::vector<double>& other,
                   const std::vector<int64_t>& lengths, const int64_t* len, double p_mask) {
    const int64_t C = p.C, T = p.T, per = (T - 1) * C * C;
    std::vector<double> g_h(p.B), g_ce(p.B), g_kl(p.B), ce(p.B), h_value(p.B);
    for (int64_t b = 0; b < p.B; ++b) g_h[b] = upstream(rng), g_ce[b] = upstream(rng), g_kl[b] = upstream(rng);
    std::vector<double> grad_h(p.B * per, -7), grad_p(p.B * per, -7), grad_q(p.B * per, -7); // poisoned
    reference::chain_entropy_backward(p, pot.data(), len, g_h.data(), grad_h.data());
    reference::chain_cross_entropy_backward(p, pot.data(), other.data(), len, g_ce.data(), g_kl.data(), grad_p.data(),
                                            grad_q.data());
    reference::chain_cross_entropy(p, pot.data(), other.data(), len, ce.data(), nullptr);
    reference::chain_entropy(p, pot.data(), len, h_value.data());
    for (int64_t b = 0; b < p.B; ++b) {
      INFO("C " << C << ", T " << T << ", mask " << p_mask << ", sequence " << b << " of length " << lengths[b]);
      const Want h = enumerated(p, pot, nullptr, b, lengths[b], g_h[b], 0);
      const Want x = enumerated(p, pot, &other, b, lengths[b], g_ce[b], g_kl[b]);
      const bool finite = std::isfinite(ce[b]), h_finite = std::isfinite(h_value[b]);
      not_finite += !finite;
      for (int64_t e = 0; e < per; ++e) {
        CAPTURE(e);
        const bool inside = e < (lengths[b] - 1) * C * C;
        const std::size_t at = std::size_t(b * per + e);
        if (inside && !h_finite)
          CHECK(std::isnan(grad_h[at]));
        else
          CHECK(close(grad_h[at], inside ? h.p[e] : 0.0L, 1e-10));
        if (!inside) {
          CHECK(grad_p[at] == 0.0);
          CHECK(grad_q[at] == 0.0);
        } else if (!finite) {
          CHECK(std::isnan(grad_p[at]));
          CHECK(std::isnan(grad_q[at]));
        } else {
          CHECK(close(grad_p[at], x.p[e], 1e-10));
          CHECK(close(grad_q[at], x.q[e], 1e-10));
        }
      }
      ++checked;
    }
  };
  for_each_small_chain(rng, 0.5, check);
  CHECK(checked == 3 * 4 * 2 * 2 * 3);
  CHECK(not_finite > 0); // some masks gave p weight where q had none
}

TEST_CASE("chain divergence gradients: central differences of the values") {
  std::mt19937_64 rng(11);
  const ChainProblem p = chain(Semiring::log, 2, 5, 3, false);
  std::vector<double> pot = random_potentials(rng, p, 0.0, false), other = random_potentials(rng, p, 0.0, false);
  const std::vector<double> g_h{0.7, -1.3}, g_ce{1.1, 0.4}, g_kl{-0.6, 2.0};
  const std::size_t n = pot.size();
  std::vector<double> grad_h(n), grad_p(n), grad_q(n);
  reference::chain_entropy_backward(p, pot.data(), nullptr, g_h.data(), grad_h.data());
  reference::chain_cross_entropy_backward(p, pot.data(), other.data(), nullptr, g_ce.data(), g_kl.data(), grad_p.data(),
                                          grad_q.data());
  // The weighted sums of the values, as functions of both chains' potentials.
  auto loss = [&](const std::vector<double>& a, const std::vector<double>& q, bool entropy) {
    std::vector<double> h(2), ce(2), kl(2);
    reference::chain_entropy(p, a.data(), nullptr, h.data());
    reference::chain_cross_entropy(p, a.data(), q.data(), nullptr, ce.data(), kl.data());
    double sum = 0;
    for (int b = 0; b < 2; ++b) sum += entropy ? g_h[b] * h[b] : g_ce[b] * ce[b] + g_kl[b] * kl[b];
    return sum;
  };
  const double step = 1e-5;
  for (std::size_t i = 0; i < n; ++i) {
    CAPTURE(i);
    std::vector<double> up = pot, down = pot, q_up = other, q_down = other;
    up[i] += step, down[i] -= step, q_up[i] += step, q_down[i] -= step;
    CHECK(grad_h[i] == doctest::Approx((loss(up, other, true) - loss(down, other, true)) / (2 * step)).epsilon(1e-6));
    CHECK(grad_p[i] == doctest::Approx((loss(up, other, false) - loss(down, other, false)) / (2 * step)).epsilon(1e-6));
    CHECK(grad_q[i] == doctest::Approx((loss(pot, q_up, false) - loss(pot, q_down, false)) / (2 * step)).epsilon(1e-6));
  }
}

TEST_CASE("chain divergence gradients: edge cases named and defined") {
  std::mt19937_64 rng(13);
  const ChainProblem p = chain(Semiring::log, 2, 4, 3, false);
  std::vector<double> pot = random_potentials(rng, p, 0.0, false), other = random_potentials(rng, p, 0.0, false);
  const std::size_t n = pot.size(), per = n / 2;
  std::vector<double> grad(n), grad_q(n);
  const std::vector<double> zero{0.0, 0.0}, one{1.0, 1.0};
  // A chain against itself: the KL's gradients are 0, the cross-entropy's p side is the entropy's.
  std::vector<double> grad_h(n);
  reference::chain_entropy_backward(p, pot.data(), nullptr, one.data(), grad_h.data());
  reference::chain_cross_entropy_backward(p, pot.data(), pot.data(), nullptr, nullptr, one.data(), grad.data(),
                                          grad_q.data());
  for (std::size_t i = 0; i < n; ++i) {
    CHECK(std::abs(grad[i]) < 1e-13);
    CHECK(std::abs(grad_q[i]) < 1e-13);
  }
  reference::chain_cross_entropy_backward(p, pot.data(), pot.data(), nullptr, one.data(), nullptr, grad.data(),
                                          nullptr);
  for (std::size_t i = 0; i < n; ++i) CHECK(grad[i] == doctest::Approx(grad_h[i]).epsilon(1e-12));
  // NaN in the first sequence: its gradients NaN, the second's finite; a zero upstream gradient gives zeros.
  std::vector<double> nan(pot);
  nan[3] = NAN;
  reference::chain_entropy_backward(p, nan.data(), nullptr, one.data(), grad.data());
  for (std::size_t i = 0; i < n; ++i) CHECK(std::isnan(grad[i]) == (i < per));
  reference::chain_entropy_backward(p, nan.data(), nullptr, zero.data(), grad.data());
  for (double g : grad) CHECK(g == 0.0);
  // One position: no edge, nothing read; no sequence: nothing written.
  const ChainProblem one_position = chain(Semiring::log, 2, 1, 3, false);
  CHECK_NOTHROW(reference::chain_entropy_backward(one_position, nullptr, nullptr, one.data(), nullptr));
  const ChainProblem none = chain(Semiring::log, 0, 4, 3, false);
  CHECK_NOTHROW(
      reference::chain_cross_entropy_backward(none, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr));
  // What is refused, by name.
  CHECK_THROWS_WITH_AS(reference::chain_entropy_backward(p, pot.data(), nullptr, nullptr, grad.data()),
                       doctest::Contains("grad_entropy"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(reference::chain_cross_entropy_backward(p, pot.data(), other.data(), nullptr, nullptr, nullptr,
                                                               grad.data(), nullptr),
                       doctest::Contains("grad_cross_entropy, grad_kl"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(reference::chain_cross_entropy_backward(p, pot.data(), nullptr, nullptr, one.data(), nullptr,
                                                               grad.data(), nullptr),
                       doctest::Contains("other"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(reference::chain_entropy_backward(p, pot.data(), nullptr, one.data(), nullptr),
                       doctest::Contains("grad_potentials"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(reference::chain_entropy_backward(chain(Semiring::max_plus, 2, 4, 3), pot.data(), nullptr,
                                                         one.data(), grad.data()),
                       doctest::Contains("problem.semiring"), std::invalid_argument);
}
