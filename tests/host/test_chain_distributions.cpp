// The reference of a chain's distribution over paths (entropy, cross-entropy, KL) and of its k best paths, the
// oracle of the kernels that will compute them, against an enumeration of every path of small chains: random,
// masked with −inf, with many exact ties, ragged, of one position, and with NaN.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "host/chain_paths.hpp"
#include "host/chain_problems.hpp"
#include "jitbmm/chain.hpp"
#include "jitbmm/reference.hpp"

using namespace jitbmm;
using namespace jitbmm::test;

TEST_CASE("chain distributions: entropy, cross-entropy and KL equal the enumeration of every path") {
  std::mt19937_64 rng(20261202);
  int checked = 0, infinite = 0;
  auto check = [&](const ChainProblem& p, const std::vector<double>& pot, const std::vector<double>& other,
                   const std::vector<int64_t>& lengths, const int64_t* len, double p_mask) {
    const int64_t C = p.C, T = p.T;
    std::vector<double> h(p.B), ce(p.B), kl(p.B);
    reference::chain_entropy(p, pot.data(), len, h.data());
    reference::chain_cross_entropy(p, pot.data(), other.data(), len, ce.data(), kl.data());
    for (int64_t b = 0; b < p.B; ++b) {
      CAPTURE(C);
      CAPTURE(T);
      CAPTURE(p_mask);
      CAPTURE(b);
      CAPTURE(lengths[b]);
      const std::vector<Path> ps = every_path(p, pot, b, lengths[b]), qs = every_path(p, other, b, lengths[b]);
      const long double z = log_total(ps), zq = log_total(qs);
      long double want_h = 0, want_ce = 0, want_kl = 0;
      for (std::size_t i = 0; i < ps.size(); ++i) {
        if (ps[i].score == -kInf) continue; // no weight (decided on the log, as the reference does)
        const long double w = std::exp(ps[i].score - z);
        const long double lp = ps[i].score - z, lq = qs[i].score == -kInf ? -kInf : qs[i].score - zq;
        want_h -= w * lp;
        want_ce -= w * lq;
        want_kl += w * (lp - lq);
      }
      if (z == -kInf) want_h = want_ce = want_kl = NAN;
      CHECK(close(h[b], want_h, 1e-12));
      CHECK(close(ce[b], want_ce, 1e-12));
      CHECK(close(kl[b], want_kl, 1e-12));
      CHECK((std::isnan(h[b]) || h[b] >= -1e-12));
      CHECK((std::isnan(kl[b]) || kl[b] >= -1e-12));
      ++checked;
      infinite += std::isinf(ce[b]);
    }
  };
  for_each_small_chain(rng, 1.0, check);
  CHECK(checked == 3 * 4 * 2 * 2 * 3);
  CHECK(infinite > 0); // some masks gave p weight where q had none
}

TEST_CASE("chain distributions: the count of paths and the log-probability of events equal the enumeration's") {
  std::mt19937_64 rng(20261204);
  int checked = 0, impossible = 0;
  auto check = [&](const ChainProblem& p, const std::vector<double>& pot, const std::vector<double>&,
                   const std::vector<int64_t>& lengths, const int64_t* len, double) {
    const int64_t C = p.C, per = (p.T - 1) * C * C;
    // Two events a sequence: one path's edge indicators, and 2 of one path's plus 0.5 of another's.
    std::uniform_int_distribution<int64_t> state(0, C - 1);
    std::vector<std::vector<int64_t>> paths(2 * p.B, std::vector<int64_t>(p.T));
    for (auto& path : paths)
      for (int64_t& x : path) x = state(rng);
    std::vector<double> one(p.B * per, 0.0), mixed(p.B * per, 0.0);
    for (int64_t b = 0; b < p.B; ++b)
      for (int64_t t = 0; t + 1 < p.T; ++t) {
        const auto edge = [&](const std::vector<int64_t>& x) {
          return ((b * (p.T - 1) + t) * C + x[t + 1]) * C + x[t];
        };
        one[edge(paths[2 * b])] = 1;
        mixed[edge(paths[2 * b])] += 2;
        mixed[edge(paths[2 * b + 1])] += 0.5;
      }
    std::vector<double> count(p.B), lp_one(p.B), lp_mixed(p.B);
    reference::chain_count(p, pot.data(), len, count.data());
    reference::chain_log_prob(p, pot.data(), len, one.data(), lp_one.data());
    reference::chain_log_prob(p, pot.data(), len, mixed.data(), lp_mixed.data());
    for (int64_t b = 0; b < p.B; ++b) {
      INFO("C " << C << ", T " << p.T << ", sequence " << b << " of length " << lengths[b]);
      const std::vector<Path> all = every_path(p, pot, b, lengths[b]);
      const long double z = log_total(all);
      int64_t finite = 0;
      for (const Path& x : all) finite += x.score > -kInf;
      CHECK(close(count[b], finite ? std::log((long double)finite) : -kInf, 1e-13));
      // A path's score over the sequence's length, from its states.
      auto score = [&](const std::vector<int64_t>& x, double weight, long double& sum) {
        for (int64_t t = 0; t + 1 < lengths[b]; ++t) {
          const double v = pot[std::size_t(((b * (p.T - 1) + t) * C + x[t + 1]) * C + x[t])];
          sum += weight * v;
        }
      };
      long double s_one = 0, s_mixed = 0;
      score(paths[2 * b], 1, s_one);
      score(paths[2 * b], 2, s_mixed);
      score(paths[2 * b + 1], 0.5, s_mixed);
      const bool has = z > -kInf;
      CHECK(close(lp_one[b], has ? s_one - z : NAN, 1e-12));
      CHECK(close(lp_mixed[b], has ? s_mixed - z : NAN, 1e-12));
      impossible += has && std::isinf(lp_one[b]);
      ++checked;
    }
  };
  for_each_small_chain(rng, 1.0, check);
  CHECK(checked == 3 * 4 * 2 * 2 * 3);
  CHECK(impossible > 0); // some events take an edge of potential −inf
  // One position: C paths of score 0; NaN and +inf count as edges, and leave no distribution.
  const ChainProblem p = chain(Semiring::log, 1, 3, 2);
  std::vector<double> pot(8, 0.0), count(1), lp(1), value(8, 0.0);
  pot[0] = NAN, pot[5] = kInf, pot[6] = -kInf;
  reference::chain_count(chain(Semiring::log, 1, 1, 5), nullptr, nullptr, count.data());
  CHECK(count[0] == doctest::Approx(std::log(5.0)).epsilon(1e-15));
  reference::chain_count(p, pot.data(), nullptr, count.data());
  CHECK(count[0] == doctest::Approx(std::log(6.0)).epsilon(1e-15)); // 8 paths, 2 through the −inf edge
  reference::chain_log_prob(p, pot.data(), nullptr, value.data(), lp.data());
  CHECK(std::isnan(lp[0]));
  CHECK_THROWS_WITH_AS(reference::chain_log_prob(p, pot.data(), nullptr, nullptr, lp.data()),
                       doctest::Contains("value"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(reference::chain_count(p, pot.data(), nullptr, nullptr), doctest::Contains("log_count"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(
      reference::chain_log_prob(chain(Semiring::max_plus, 1, 3, 2), pot.data(), nullptr, value.data(), lp.data()),
      doctest::Contains("problem.semiring"), std::invalid_argument);
}

TEST_CASE("chain distributions: the entropy of a chain against itself; edge cases named and defined") {
  std::mt19937_64 rng(7);
  const ChainProblem p = chain(Semiring::log, 2, 5, 3, false);
  std::vector<double> pot = random_potentials(rng, p, 0.0, false);
  std::vector<double> h(2), ce(2), kl(2);
  reference::chain_entropy(p, pot.data(), nullptr, h.data());
  reference::chain_cross_entropy(p, pot.data(), pot.data(), nullptr, ce.data(), kl.data());
  for (int b = 0; b < 2; ++b) {
    CHECK(ce[b] == doctest::Approx(h[b]).epsilon(1e-13));
    CHECK(std::abs(kl[b]) < 1e-13);
  }
  // One position: C paths of score 0, uniform.
  const ChainProblem one = chain(Semiring::log, 1, 1, 5, false);
  reference::chain_entropy(one, pot.data(), nullptr, h.data());
  CHECK(h[0] == doctest::Approx(std::log(5.0)).epsilon(1e-15));
  // No path of weight, +inf and NaN: no distribution.
  std::vector<double> dead(pot.size(), -kInf), plus(pot), nan(pot);
  plus[3] = kInf;
  nan[5] = NAN;
  for (const std::vector<double>* v : {&dead, &plus, &nan}) {
    reference::chain_entropy(p, v->data(), nullptr, h.data());
    CHECK(std::isnan(h[0]));
    reference::chain_cross_entropy(p, pot.data(), v->data(), nullptr, ce.data(), kl.data());
    if (v == &dead) { // q has no path where p has weight
      CHECK(ce[0] == kInf);
      CHECK(kl[0] == kInf);
    } else {
      CHECK(std::isnan(ce[0]));
      CHECK(std::isnan(kl[0]));
    }
  }
  // A weight below what a long double holds, where q gives none: still +inf.
  const ChainProblem tiny = chain(Semiring::log, 1, 2, 2, false);
  const double p_tiny[] = {0, 0, -20000, 0}, q_none[] = {0, 0, -kInf, 0};
  reference::chain_cross_entropy(tiny, p_tiny, q_none, nullptr, ce.data(), kl.data());
  CHECK(ce[0] == kInf);
  CHECK(kl[0] == kInf);
  // B = 0 computes nothing; the semiring, a missing output or argument, and bad lengths are named.
  reference::chain_entropy(chain(Semiring::log, 0, 4, 3, false), nullptr, nullptr, nullptr);
  CHECK_THROWS_WITH_AS(
      reference::chain_entropy(chain(Semiring::max_plus, 2, 5, 3, false), pot.data(), nullptr, h.data()),
      doctest::Contains("problem.semiring"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(reference::chain_entropy(p, pot.data(), nullptr, nullptr), doctest::Contains("entropy: null"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(reference::chain_cross_entropy(p, pot.data(), nullptr, nullptr, ce.data(), nullptr),
                       doctest::Contains("other: null"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(reference::chain_cross_entropy(p, pot.data(), pot.data(), nullptr, nullptr, nullptr),
                       doctest::Contains("cross_entropy, kl: both null"), std::invalid_argument);
  const ChainProblem ragged = chain(Semiring::log, 2, 5, 3, true);
  const int64_t bad[] = {3, 6};
  CHECK_THROWS_WITH_AS(reference::chain_entropy(ragged, pot.data(), bad, h.data()), doctest::Contains("lengths[1]"),
                       std::invalid_argument);
}

TEST_CASE("chain k best paths: the enumeration's best k, in order, ties by the states read from the end") {
  std::mt19937_64 rng(11);
  int checked = 0, short_of_paths = 0, tied = 0;
  for (int64_t C : {1, 2, 3})
    for (int64_t T : {1, 2, 3, 5})
      for (double p_mask : {0.0, 0.5})
        for (bool integers : {false, true})
          for (int k : {1, 4, 16}) {
            const ChainProblem p = chain(Semiring::max_plus, 3, T, C, true);
            const std::vector<double> pot = random_potentials(rng, p, p_mask, integers);
            const std::vector<int64_t> lengths = random_lengths(rng, p);
            std::vector<double> scores(p.B * k);
            std::vector<int32_t> paths(p.B * k * T);
            reference::chain_kbest(p, pot.data(), lengths.data(), k, scores.data(), paths.data());
            std::vector<double> viterbi(p.B);
            std::vector<int32_t> best(p.B * T);
            reference::chain_forward(p, pot.data(), lengths.data(), viterbi.data(), nullptr, best.data());
            for (int64_t b = 0; b < p.B; ++b) {
              CAPTURE(C);
              CAPTURE(T);
              CAPTURE(p_mask);
              CAPTURE(integers);
              CAPTURE(k);
              CAPTURE(b);
              const int64_t L = lengths[b];
              std::vector<Path> all = every_path(p, pot, b, L);
              all.erase(std::remove_if(all.begin(), all.end(), [](const Path& x) { return x.score == -kInf; }),
                        all.end());
              // Score first, then the states from the last one back, smaller first.
              std::stable_sort(all.begin(), all.end(), [](const Path& x, const Path& y) {
                if (x.score != y.score) return x.score > y.score;
                return std::lexicographical_compare(x.states.rbegin(), x.states.rend(), y.states.rbegin(),
                                                    y.states.rend());
              });
              for (int i = 0; i < k; ++i) {
                const int32_t* got = &paths[std::size_t((b * k + i) * T)];
                if (std::size_t(i) >= all.size()) {
                  CHECK(scores[b * k + i] == -kInf);
                  CHECK(std::all_of(got, got + T, [](int32_t s) { return s == -1; }));
                  ++short_of_paths;
                  continue;
                }
                CHECK(scores[b * k + i] == double(all[i].score));
                for (int64_t t = 0; t < T; ++t) CHECK(got[t] == (t < L ? all[i].states[t] : -1));
                tied += i > 0 && all[i].score == all[i - 1].score;
              }
              // The first is Viterbi's path and score.
              CHECK(scores[b * k] == viterbi[b]);
              for (int64_t t = 0; t < T; ++t) CHECK(paths[std::size_t(b * k * T + t)] == best[b * T + t]);
              ++checked;
            }
          }
  CHECK(checked == 3 * 4 * 2 * 2 * 3 * 3);
  CHECK(short_of_paths > 0);
  CHECK(tied > 0);
}

TEST_CASE("chain k best paths: NaN wins as in Viterbi; k, the semiring and null arguments are named") {
  const ChainProblem p = chain(Semiring::max_plus, 1, 3, 2, false);
  std::vector<double> pot(8, 1.0);
  pot[2] = NAN; // step 0, to state 1 from state 0
  std::vector<double> scores(4);
  std::vector<int32_t> paths(4 * 3);
  reference::chain_kbest(p, pot.data(), nullptr, 4, scores.data(), paths.data());
  CHECK(std::isnan(scores[0]));
  CHECK(std::isnan(scores[1]));
  CHECK(scores[2] == 2.0);
  CHECK(scores[3] == 2.0);
  // The two through the NaN edge, then the first two others, each by its states from the end.
  const std::vector<int32_t> want = {0, 1, 0, 0, 1, 1, 0, 0, 0, 1, 0, 0};
  CHECK(paths == want);
  for (int k : {0, reference::kMaxReferenceBestPaths + 1})
    CHECK_THROWS_WITH_AS(reference::chain_kbest(p, pot.data(), nullptr, k, scores.data(), nullptr),
                         doctest::Contains("k: "), std::invalid_argument);
  CHECK_THROWS_WITH_AS(
      reference::chain_kbest(chain(Semiring::log, 1, 3, 2, false), pot.data(), nullptr, 2, scores.data(), nullptr),
      doctest::Contains("problem.semiring"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(reference::chain_kbest(p, pot.data(), nullptr, 2, nullptr, nullptr),
                       doctest::Contains("scores: null"), std::invalid_argument);
  // k times a chain the reference holds may be more than it holds: named before anything is read.
  CHECK_THROWS_WITH_AS(reference::chain_kbest(chain(Semiring::max_plus, 1, int64_t(1) << 17, 4, false), pot.data(),
                                              nullptr, 1024, scores.data(), nullptr),
                       doctest::Contains("k: 1024 best paths"), std::invalid_argument);
  reference::chain_kbest(chain(Semiring::max_plus, 0, 3, 2, false), nullptr, nullptr, 2, nullptr, nullptr);
}
