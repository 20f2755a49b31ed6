// The reference gradients of a chain's entropy, cross-entropy and KL (the oracle of the kernels that will compute
// them) against an enumeration of every path of small chains, the covariances of each edge with the paths' scores,
// and against central differences of the values; random, masked with −inf, ragged, of one position; edge cases. The
// HMM form's through the CRF with a start edge that the GPU tests take for it (tests/host/chain_paths.hpp).
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

namespace {

// Of an HMM's sequence b of length L, by every path of its tables hp (p) and hq (q): H(p), CE(p, q) and KL(p ‖ q),
// as the reference defines them where they are not finite.
struct HmmValues {
  long double entropy = 0, cross_entropy = 0, kl = 0;
};
HmmValues hmm_by_every_path(const ChainProblem& p, const HmmTables& hp, const HmmTables& hq, int64_t b, int64_t L) {
  int64_t count = 1;
  for (int64_t t = 0; t < L; ++t) count *= p.C;
  std::vector<Path> ps, qs;
  for (int64_t code = 0; code < count; ++code) {
    Path x{0, std::vector<int>(std::size_t(L))};
    for (int64_t t = 0, rest = code; t < L; ++t, rest /= p.C) x.states[t] = int(rest % p.C);
    Path y = x;
    x.score = first_score(p, hp, b, x.states[0]), y.score = first_score(p, hq, b, x.states[0]);
    for (int64_t t = 0; t + 1 < L; ++t) {
      x.score += step_score(p, hp, b, t, x.states[t + 1], x.states[t]);
      y.score += step_score(p, hq, b, t, x.states[t + 1], x.states[t]);
    }
    ps.push_back(x), qs.push_back(y);
  }
  const long double z = log_total(ps), zq = log_total(qs), nan = NAN;
  if (!std::isfinite(z)) return {nan, nan, nan}; // p has no distribution
  HmmValues v;
  for (std::size_t i = 0; i < ps.size(); ++i) {
    if (ps[i].score == -kInf) continue;
    const long double w = std::exp(ps[i].score - z);
    v.entropy -= w * (ps[i].score - z);
    if (qs[i].score == -kInf) { // an event of p's weight that q gives none
      v.cross_entropy = v.kl = kInf;
      continue;
    }
    v.cross_entropy -= w * (qs[i].score - zq);
    v.kl += w * (ps[i].score - z - qs[i].score + zq);
  }
  return v;
}

ChainProblem hmm_chain(int64_t B, int64_t T, int64_t C, bool batched) {
  ChainProblem p = chain(Semiring::log, B, T, C, true);
  p.form = ChainForm::hmm;
  p.batched_transitions = p.batched_initial = batched;
  return p;
}

// The reference's entropy, cross-entropy and KL of an HMM through the CRF of T + 1 positions with a start edge, as
// the GPU tests of the HMM form's expectations take them.
struct ThroughStart {
  std::vector<double> entropy, cross_entropy, kl;
  ThroughStart(const ChainProblem& p, const HmmTables& hp, const HmmTables& hq, const std::vector<int64_t>& lengths)
      : entropy(std::size_t(p.B)), cross_entropy(std::size_t(p.B)), kl(std::size_t(p.B)) {
    const ChainProblem crf = crf_with_start(p);
    const std::vector<double> pp = potentials_with_start(p, hp), pq = potentials_with_start(p, hq);
    const std::vector<int64_t> with_start = lengths_with_start(lengths);
    reference::chain_entropy(crf, pp.data(), with_start.data(), entropy.data());
    reference::chain_cross_entropy(crf, pp.data(), pq.data(), with_start.data(), cross_entropy.data(), kl.data());
  }
};

} // namespace

TEST_CASE("chain divergences, the HMM form: the CRF of T + 1 positions with a start edge has the HMM's entropy, "
          "cross-entropy and KL by every path, one position included") {
  std::mt19937_64 rng(20261213);
  int checked = 0, one_position = 0, not_finite = 0;
  for (int64_t C : {1, 2, 3})
    for (int64_t T : {1, 2, 4})
      for (bool batched : {false, true})
        for (double mask : {0.0, 0.3}) {
          const ChainProblem p = hmm_chain(3, T, C, batched);
          const HmmTables hp = random_hmm_tables(rng, p, mask, false), hq = random_hmm_tables(rng, p, mask, false);
          const std::vector<int64_t> lengths = random_lengths(rng, p);
          const ThroughStart got(p, hp, hq, lengths);
          for (int64_t b = 0; b < p.B; ++b) {
            INFO("C " << C << ", T " << T << ", batched " << batched << ", mask " << mask << ", sequence " << b
                      << " of length " << lengths[b]);
            const HmmValues want = hmm_by_every_path(p, hp, hq, b, lengths[b]);
            CHECK(close(got.entropy[b], want.entropy, 1e-10));
            CHECK(close(got.cross_entropy[b], want.cross_entropy, 1e-10));
            CHECK(close(got.kl[b], want.kl, 1e-10));
            ++checked;
            one_position += lengths[b] == 1;
            not_finite += !std::isfinite(got.cross_entropy[b]);
          }
        }
  CHECK(checked == 3 * 3 * 2 * 2 * 3);
  CHECK(one_position > 10);
  CHECK(not_finite > 0);
}

TEST_CASE("chain divergences, the HMM form: the start edge's CRF's gradients mapped to the tables are central "
          "differences of the values by every path") {
  std::mt19937_64 rng(20261214);
  const std::vector<double> g_h{0.7, -1.3, 0.4}, g_ce{1.1, 0.4, -0.8}, g_kl{-0.6, 2.0, 0.9};
  const struct {
    int64_t T, C;
    std::vector<int64_t> lengths;
  } shapes[] = {{3, 2, {3, 1, 2}}, {1, 3, {1, 1, 1}}, {2, 3, {2, 1, 2}}};
  for (const auto& s : shapes)
    for (bool batched : {false, true}) {
      CAPTURE(s.T);
      CAPTURE(s.C);
      CAPTURE(batched);
      const ChainProblem p = hmm_chain(3, s.T, s.C, batched), crf = crf_with_start(p);
      const HmmTables hp = random_hmm_tables(rng, p, 0.0, false), hq = random_hmm_tables(rng, p, 0.0, false);
      const std::vector<double> pp = potentials_with_start(p, hp), pq = potentials_with_start(p, hq);
      const std::vector<int64_t> with_start = lengths_with_start(s.lengths);
      std::vector<double> grad_h(pp.size()), grad_p(pp.size()), grad_q(pp.size());
      reference::chain_entropy_backward(crf, pp.data(), with_start.data(), g_h.data(), grad_h.data());
      reference::chain_cross_entropy_backward(crf, pp.data(), pq.data(), with_start.data(), g_ce.data(), g_kl.data(),
                                              grad_p.data(), grad_q.data());
      const std::vector<double> want_h = flattened(table_gradients(p, grad_h)),
                                want_p = flattened(table_gradients(p, grad_p)),
                                want_q = flattened(table_gradients(p, grad_q));
      // The weighted sums of the values by every path, as functions of both chains' tables.
      auto loss = [&](const HmmTables& a, const HmmTables& q, bool entropy) {
        long double sum = 0;
        for (int64_t b = 0; b < p.B; ++b) {
          const HmmValues v = hmm_by_every_path(p, a, q, b, s.lengths[b]);
          sum += entropy ? g_h[b] * v.entropy : g_ce[b] * v.cross_entropy + g_kl[b] * v.kl;
        }
        return double(sum);
      };
      // Entry i of the tables laid out one after another, as flattened() lays them.
      auto entry = [](HmmTables& h, std::size_t i) -> double& {
        if (i < h.emissions.size()) return h.emissions[i];
        i -= h.emissions.size();
        return i < h.transitions.size() ? h.transitions[i] : h.initial[i - h.transitions.size()];
      };
      const double step = 1e-5;
      for (std::size_t i = 0; i < want_h.size(); ++i) {
        CAPTURE(i);
        HmmTables up = hp, down = hp, q_up = hq, q_down = hq;
        entry(up, i) += step, entry(down, i) -= step, entry(q_up, i) += step, entry(q_down, i) -= step;
        CHECK(want_h[i] == doctest::Approx((loss(up, hq, true) - loss(down, hq, true)) / (2 * step)).epsilon(1e-6));
        CHECK(want_p[i] == doctest::Approx((loss(up, hq, false) - loss(down, hq, false)) / (2 * step)).epsilon(1e-6));
        CHECK(want_q[i] ==
              doctest::Approx((loss(hp, q_up, false) - loss(hp, q_down, false)) / (2 * step)).epsilon(1e-6));
      }
    }
}
