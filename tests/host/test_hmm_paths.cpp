// The reference's k best paths and samples of the HMM form (reference::chain_kbest and chain_sample with HmmInputs),
// the oracle of the kernels that compute them from the tables: against the CRF form's on the formed potentials (the
// same chain where a sequence has two positions or more: the same paths in the same tie order, and every path drawn
// as often as its probability says), and at one position against initial ⊗ emissions[0]; tables shared and per
// sequence, masked with −inf, with exact ties, ragged; their arguments named.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <vector>

#include "host/chain_paths.hpp"
#include "jitbmm/chain.hpp"
#include "jitbmm/reference.hpp"
#include "samples_fit.hpp"

using namespace jitbmm;
using namespace jitbmm::test;

namespace {

ChainProblem hmm_problem(Semiring semiring, int64_t B, int64_t T, int64_t C, bool batched) {
  ChainProblem p;
  p.semiring = semiring;
  p.dtype = DType::f64;
  p.B = B, p.T = T, p.C = C;
  p.with_lengths = true;
  p.form = ChainForm::hmm;
  p.batched_transitions = p.batched_initial = batched;
  return p;
}

HmmInputs inputs(const HmmTables& h) { return {h.emissions.data(), h.transitions.data(), h.initial.data()}; }

// Sequence b's first-position scores, initial ⊗ emissions[0].
std::vector<double> first_scores(const ChainProblem& p, const HmmTables& h, int64_t b) {
  std::vector<double> s(std::size_t(p.C));
  for (int64_t c = 0; c < p.C; ++c)
    s[std::size_t(c)] =
        h.initial[std::size_t((p.batched_initial ? b : 0) * p.C + c)] + h.emissions[std::size_t(b * p.T * p.C + c)];
  return s;
}

} // namespace

TEST_CASE("hmm k best paths: the CRF form's on the formed potentials, and one position's best states") {
  std::mt19937_64 rng(20261207);
  int against_crf = 0, one_position = 0;
  for (int64_t C : {1, 2, 3, 5})
    for (int64_t T : {1, 2, 4, 6})
      for (bool batched : {false, true})
        for (bool integers : {false, true})
          for (int k : {1, 3, 8}) {
            const ChainProblem p = hmm_problem(Semiring::max_plus, 4, T, C, batched);
            const HmmTables h = random_hmm_tables(rng, p, 0.2, integers);
            const std::vector<int64_t> lengths = random_lengths(rng, p);
            std::vector<double> scores(std::size_t(p.B * k));
            std::vector<int32_t> paths(std::size_t(p.B * k * T));
            reference::chain_kbest(p, inputs(h), lengths.data(), k, scores.data(), paths.data());
            std::vector<double> crf_scores(scores.size());
            std::vector<int32_t> crf_paths(paths.size());
            if (T > 1) {
              const std::vector<double> pot = formed_potentials(p, h);
              reference::chain_kbest(crf_of(p), pot.data(), lengths.data(), k, crf_scores.data(), crf_paths.data());
            }
            for (int64_t b = 0; b < p.B; ++b) {
              CAPTURE(C);
              CAPTURE(T);
              CAPTURE(batched);
              CAPTURE(integers);
              CAPTURE(k);
              CAPTURE(b);
              const std::size_t at = std::size_t(b * k);
              if (lengths[b] >= 2) { // integers add exactly in either order; normal values within rounding
                for (int i = 0; i < k; ++i) {
                  if (integers || std::isinf(crf_scores[at + i]))
                    CHECK(scores[at + i] == crf_scores[at + i]);
                  else
                    CHECK(std::abs(scores[at + i] - crf_scores[at + i]) <= 1e-12 * (1 + std::abs(crf_scores[at + i])));
                }
                CHECK(std::equal(paths.begin() + at * T, paths.begin() + (at + k) * T, crf_paths.begin() + at * T));
                ++against_crf;
                continue;
              }
              // One position: its states by their scores, ties to the smaller; none of −inf.
              const std::vector<double> first = first_scores(p, h, b);
              std::vector<int32_t> order;
              for (int32_t c = 0; c < C; ++c)
                if (first[std::size_t(c)] != -kInf) order.push_back(c);
              std::stable_sort(order.begin(), order.end(),
                               [&](int32_t x, int32_t y) { return first[std::size_t(x)] > first[std::size_t(y)]; });
              for (int i = 0; i < k; ++i) {
                const bool some = std::size_t(i) < order.size();
                CHECK(scores[at + i] == (some ? first[std::size_t(order[std::size_t(i)])] : -kInf));
                CHECK(paths[(at + i) * T] == (some ? order[std::size_t(i)] : -1));
                for (int64_t t = 1; t < T; ++t) CHECK(paths[(at + i) * T + t] == -1);
              }
              ++one_position;
            }
          }
  CHECK(against_crf > 100);
  CHECK(one_position > 50);
}

TEST_CASE("hmm samples: every path drawn as often as the formed chain's probability of it says, one position's "
          "state as initial and emissions say") {
  std::mt19937_64 rng(20261208);
  const int64_t n = 4000;
  int fitted = 0;
  for (int64_t C : {1, 2, 3})
    for (int64_t T : {1, 2, 4})
      for (bool batched : {false, true}) {
        const ChainProblem p = hmm_problem(Semiring::log, 3, T, C, batched);
        const HmmTables h = random_hmm_tables(rng, p, 0.2, false);
        const std::vector<int64_t> lengths = random_lengths(rng, p);
        std::vector<int32_t> paths(std::size_t(p.B * n * T));
        reference::chain_sample(p, inputs(h), lengths.data(), n, 5, paths.data());
        std::vector<double> score(std::size_t(p.B));
        reference::chain_forward(p, inputs(h), lengths.data(), score.data(), nullptr, nullptr);
        const std::vector<double> pot = T > 1 ? formed_potentials(p, h) : std::vector<double>{};
        for (int64_t b = 0; b < p.B; ++b) {
          CAPTURE(C);
          CAPTURE(T);
          CAPTURE(b);
          const int64_t L = lengths[b];
          const int32_t* first = paths.data() + b * n * T;
          if (!std::isfinite(score[std::size_t(b)])) {
            for (int64_t i = 0; i < n * T; ++i) REQUIRE(first[i] == -1);
            continue;
          }
          std::vector<int64_t> counts(std::size_t(std::pow(double(C), double(L)) + 0.5), 0);
          for (int64_t i = 0; i < n; ++i) {
            for (int64_t t = L; t < T; ++t) REQUIRE(first[i * T + t] == -1);
            ++counts[std::size_t(path_code(first + i * T, L, C))];
          }
          std::vector<double> probs;
          if (L >= 2) {
            probs = path_probabilities(crf_of(p), pot, b, L, 1.0);
          } else {
            const std::vector<double> s = first_scores(p, h, b);
            const double m = *std::max_element(s.begin(), s.end());
            double total = 0;
            for (double x : s) total += std::exp(x - m);
            for (double x : s) probs.push_back(std::exp(x - m) / total);
          }
          const SampleFit f = fit_samples(counts, probs);
          CHECK_MESSAGE(f.ok(), "chi2=" << f.chi2 << " dof=" << f.dof << " impossible=" << f.impossible);
          ++fitted;
        }
      }
  CHECK(fitted > 25);
}

TEST_CASE("hmm k best paths and samples: the form, the tables and the semiring are named") {
  const ChainProblem p = hmm_problem(Semiring::max_plus, 1, 3, 2, false);
  std::mt19937_64 rng(1);
  const HmmTables h = random_hmm_tables(rng, p, 0.0, true);
  const int64_t lengths[] = {3};
  std::vector<double> scores(2);
  std::vector<int32_t> paths(6);
  HmmInputs missing = inputs(h);
  missing.emissions = nullptr;
  CHECK_THROWS_WITH_AS(reference::chain_kbest(p, missing, lengths, 2, scores.data(), paths.data()),
                       doctest::Contains("hmm.emissions"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(reference::chain_kbest(crf_of(p), inputs(h), lengths, 2, scores.data(), paths.data()),
                       doctest::Contains("hmm:"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(reference::chain_kbest(p, inputs(h), lengths, 0, scores.data(), paths.data()),
                       doctest::Contains("k:"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(reference::chain_sample(p, inputs(h), lengths, 2, 1, paths.data()),
                       doctest::Contains("problem.semiring"), std::invalid_argument);
  ChainProblem log = p;
  log.semiring = Semiring::log;
  const int64_t outside[] = {4};
  CHECK_THROWS_WITH_AS(reference::chain_sample(log, inputs(h), outside, 2, 1, paths.data()),
                       doctest::Contains("lengths[0]"), std::invalid_argument);
}
