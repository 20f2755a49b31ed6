// What the chain distributions' host tests share: every path of a small chain with its score, and random
// potentials and lengths.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "jitbmm/chain_problem.hpp"

namespace jitbmm::test {

inline const double kInf = std::numeric_limits<double>::infinity();

// Every path of sequence b over its first L positions, with its score (potentials contiguous [B][T − 1][C][C],
// long double sums), path[0] the first state.
struct Path {
  long double score;
  std::vector<int> states;
};
inline std::vector<Path> every_path(const ChainProblem& p, const std::vector<double>& pot, int64_t b, int64_t L) {
  int64_t count = 1;
  for (int64_t t = 0; t < L; ++t) count *= p.C;
  std::vector<Path> paths;
  for (int64_t code = 0; code < count; ++code) {
    Path x{0, std::vector<int>(L)};
    for (int64_t t = 0, rest = code; t < L; ++t, rest /= p.C) x.states[t] = int(rest % p.C);
    for (int64_t t = 0; t + 1 < L; ++t)
      x.score += pot[std::size_t(((b * (p.T - 1) + t) * p.C + x.states[t + 1]) * p.C + x.states[t])];
    paths.push_back(x);
  }
  return paths;
}

// log Σ exp over the paths' scores (−inf without a finite one).
inline long double log_total(const std::vector<Path>& paths) {
  long double m = -kInf, sum = 0;
  for (const Path& x : paths) m = std::max(m, x.score);
  if (m == -kInf) return m;
  for (const Path& x : paths) sum += std::exp(x.score - m);
  return m + std::log(sum);
}

// A path's index among every_path's: its states as the digits of a number in base C, the first state lowest.
inline int64_t path_code(const int32_t* states, int64_t L, int64_t C) {
  int64_t code = 0;
  for (int64_t t = L - 1; t >= 0; --t) code = code * C + states[t];
  return code;
}

// The probability of every path of sequence b of `pot` at temperature 1 / scale (its scores times scale).
inline std::vector<double> path_probabilities(const ChainProblem& p, const std::vector<double>& pot, int64_t b,
                                              int64_t L, double scale) {
  std::vector<Path> paths = every_path(p, pot, b, L);
  for (Path& x : paths) x.score *= scale;
  const long double z = log_total(paths);
  std::vector<double> probs;
  for (const Path& x : paths) probs.push_back(x.score == -kInf ? 0.0 : double(std::exp(x.score - z)));
  return probs;
}

inline std::vector<double> random_potentials(std::mt19937_64& rng, const ChainProblem& p, double p_mask,
                                             bool integers) {
  std::normal_distribution<double> normal(0.0, 1.5);
  std::uniform_int_distribution<int> integer(0, 2);
  std::bernoulli_distribution mask(p_mask);
  std::vector<double> v(std::size_t(p.B * (p.T - 1) * p.C * p.C));
  for (double& x : v) x = mask(rng) ? -kInf : integers ? integer(rng) : normal(rng);
  return v;
}

inline std::vector<int64_t> random_lengths(std::mt19937_64& rng, const ChainProblem& p) {
  std::uniform_int_distribution<int64_t> length(1, p.T);
  std::vector<int64_t> l(p.B);
  for (int64_t& x : l) x = p.with_lengths ? length(rng) : p.T;
  return l;
}

inline bool close(double got, long double want, double tol) {
  if (std::isnan(want) || std::isinf(want)) return std::isnan(want) ? std::isnan(got) : got == double(want);
  return std::abs(got - double(want)) <= tol * std::max(1.0L, std::abs(want));
}

// Every small chain the distribution tests sweep, three sequences each: C of 1 to 3 states, T of 1, 2, 4 and 6
// positions, unmasked and with 30% of p's potentials −inf (`other_mask` times that of the other chain's), of T
// positions and ragged: f(p, pot, other, lengths, len, p_mask), len null where the lengths are all T.
template <class F> void for_each_small_chain(std::mt19937_64& rng, double other_mask, F f) {
  for (int64_t C : {1, 2, 3})
    for (int64_t T : {1, 2, 4, 6})
      for (double p_mask : {0.0, 0.3})
        for (bool ragged : {false, true}) {
          ChainProblem p;
          p.semiring = Semiring::log;
          p.dtype = DType::f64;
          p.B = 3, p.T = T, p.C = C;
          p.with_lengths = ragged;
          const std::vector<double> pot = random_potentials(rng, p, p_mask, false),
                                    other = random_potentials(rng, p, p_mask * other_mask, false);
          const std::vector<int64_t> lengths = random_lengths(rng, p);
          f(p, pot, other, lengths, ragged ? lengths.data() : nullptr, p_mask);
        }
}

} // namespace jitbmm::test
