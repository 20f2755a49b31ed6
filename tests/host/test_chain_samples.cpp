// The reference sampler of a chain's paths (reference::chain_sample), the oracle's shape for the kernels that will
// draw them: its paths' frequencies against the exact probability of every path of small chains (masked, ragged,
// of one position), its edges' frequencies against the exact edge marginals of a longer chain, and the fit's power
// to reject samples of a nearby distribution.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "host/chain_paths.hpp"
#include "jitbmm/chain.hpp"
#include "jitbmm/reference.hpp"
#include "samples_fit.hpp"

using namespace jitbmm;
using namespace jitbmm::test;

TEST_CASE("chain samples: every path is drawn as often as its probability says, and only a path that can be") {
  std::mt19937_64 rng(20261203);
  const int64_t n = 4000;
  int fitted = 0, rejected = 0, tested_power = 0, without = 0;
  for_each_small_chain(rng, 1.0,
                       [&](const ChainProblem& p, const std::vector<double>& pot, const std::vector<double>&,
                           const std::vector<int64_t>& lengths, const int64_t* len, double p_mask) {
                         std::vector<int32_t> paths(std::size_t(p.B * n * p.T));
                         reference::chain_sample(p, pot.data(), len, n, 7, paths.data());
                         std::vector<double> score(p.B);
                         reference::chain_forward(p, pot.data(), len, score.data(), nullptr, nullptr);
                         for (int64_t b = 0; b < p.B; ++b) {
                           const int64_t L = lengths[b];
                           const int32_t* first = paths.data() + b * n * p.T;
                           if (!std::isfinite(score[b])) { // no distribution: no path
                             ++without;
                             for (int64_t i = 0; i < n * p.T; ++i) REQUIRE(first[i] == -1);
                             continue;
                           }
                           std::vector<int64_t> counts(std::size_t(std::pow(double(p.C), double(L)) + 0.5), 0);
                           for (int64_t i = 0; i < n; ++i) {
                             const int32_t* path = first + i * p.T;
                             for (int64_t t = L; t < p.T; ++t) REQUIRE(path[t] == -1); // past the length
                             ++counts[std::size_t(path_code(path, L, p.C))];
                           }
                           const SampleFit f = fit_samples(counts, path_probabilities(p, pot, b, L, 1.0));
                           CHECK_MESSAGE(f.ok(), "C=" << p.C << " L=" << L << " mask=" << p_mask << " chi2=" << f.chi2
                                                      << " dof=" << f.dof << " impossible=" << f.impossible);
                           ++fitted;
                           // The same draws against the distribution of the scores times 1.5: the fit must see the
                           // difference.
                           if (p.C >= 2 && L >= 4 && p_mask == 0) {
                             ++tested_power;
                             rejected += !fit_samples(counts, path_probabilities(p, pot, b, L, 1.5)).ok();
                           }
                         }
                       });
  CHECK(rejected == tested_power);
  CHECK(tested_power >= 6);
  CHECK(fitted >= 100);
  MESSAGE(fitted << " sequences fitted, " << without << " without a distribution, " << rejected << " of "
                 << tested_power << " tempered distributions rejected");
}

TEST_CASE("chain samples: each step's edges are drawn as often as the edge marginals say") {
  ChainProblem p;
  p.semiring = Semiring::log;
  p.dtype = DType::f32;
  p.B = 2, p.T = 30, p.C = 6;
  p.with_lengths = true;
  std::mt19937_64 rng(20261204);
  std::vector<double> pot = random_potentials(rng, p, 0.2, false);
  std::vector<float> pot32(pot.begin(), pot.end());
  const std::vector<int64_t> lengths = {30, 17};
  const int64_t n = 20000, C = p.C, steps = p.T - 1;
  std::vector<int32_t> paths(std::size_t(p.B * n * p.T));
  reference::chain_sample(p, pot32.data(), lengths.data(), n, 11, paths.data());
  // The marginals of the chain and of the chain at a lower temperature (its potentials times 1.5).
  std::vector<float> hotter(pot32);
  for (float& x : hotter) x *= 1.5f;
  const std::vector<double> ones(p.B, 1.0);
  std::vector<double> mu(pot.size()), mu_hot(pot.size());
  reference::chain_backward(p, pot32.data(), lengths.data(), ones.data(), mu.data());
  reference::chain_backward(p, hotter.data(), lengths.data(), ones.data(), mu_hot.data());
  int fitted = 0, rejected = 0;
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t t = 0; t + 1 < lengths[b]; ++t) {
      std::vector<int64_t> counts(std::size_t(C * C), 0);
      for (int64_t i = 0; i < n; ++i) {
        const int32_t* path = paths.data() + (b * n + i) * p.T;
        ++counts[std::size_t(path[t + 1] * C + path[t])]; // [to][from], the potentials' order
      }
      const auto at = std::size_t((b * steps + t) * C * C);
      const std::vector<double> exact(mu.begin() + at, mu.begin() + at + C * C),
          hot(mu_hot.begin() + at, mu_hot.begin() + at + C * C);
      const SampleFit f = fit_samples(counts, exact);
      CHECK_MESSAGE(f.ok(), "b=" << b << " t=" << t << " chi2=" << f.chi2 << " dof=" << f.dof
                                 << " impossible=" << f.impossible);
      ++fitted;
      rejected += !fit_samples(counts, hot).ok();
    }
  CHECK(fitted == 29 + 16);
  CHECK(rejected >= fitted / 2); // most steps tell the two temperatures apart
  MESSAGE(rejected << " of " << fitted << " steps rejected the lower temperature's marginals");
}

TEST_CASE("chain samples: a seed draws the same paths, a sequence's draws are its own; bad arguments") {
  ChainProblem p;
  p.semiring = Semiring::log;
  p.dtype = DType::f64;
  p.B = 3, p.T = 8, p.C = 4;
  std::mt19937_64 rng(20261205);
  std::vector<double> pot = random_potentials(rng, p, 0.0, false);
  const int64_t n = 50;
  auto draw = [&](const std::vector<double>& potentials, uint64_t seed) {
    std::vector<int32_t> paths(std::size_t(p.B * n * p.T));
    reference::chain_sample(p, potentials.data(), nullptr, n, seed, paths.data());
    return paths;
  };
  const std::vector<int32_t> a = draw(pot, 1), again = draw(pot, 1), other_seed = draw(pot, 2);
  CHECK(a == again);
  CHECK(a != other_seed);
  // Other potentials of sequence 0 leave sequences 1 and 2's paths as they were.
  std::vector<double> changed(pot);
  for (int64_t i = 0; i < (p.T - 1) * p.C * p.C; ++i) changed[std::size_t(i)] += 3.0 * std::sin(double(i));
  const std::vector<int32_t> c = draw(changed, 1);
  CHECK(std::vector<int32_t>(c.begin() + n * p.T, c.end()) == std::vector<int32_t>(a.begin() + n * p.T, a.end()));
  CHECK(std::vector<int32_t>(c.begin(), c.begin() + n * p.T) != std::vector<int32_t>(a.begin(), a.begin() + n * p.T));

  std::vector<int32_t> paths(std::size_t(p.B * n * p.T));
  auto refused = [&](const ChainProblem& q, int64_t count, int32_t* out, const std::string& name) {
    try {
      reference::chain_sample(q, pot.data(), nullptr, count, 1, out);
      FAIL("accepted");
    } catch (const std::invalid_argument& e) {
      CHECK_MESSAGE(std::string(e.what()).rfind(name, 0) == 0, e.what());
    }
  };
  refused(p, -1, paths.data(), "n:");
  refused(p, n, nullptr, "paths:");
  ChainProblem viterbi = p;
  viterbi.semiring = Semiring::max_plus;
  refused(viterbi, n, paths.data(), "problem.semiring:");
  reference::chain_sample(p, pot.data(), nullptr, 0, 1, nullptr); // no path asked for: nothing written
}
