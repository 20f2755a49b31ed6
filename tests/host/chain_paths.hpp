// What the chain distributions' tests share: every path of a small chain with its score, random potentials, HMM
// tables and lengths, and an HMM's potentials in the CRF form (of T positions, or of T + 1 with a start edge).
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

// n values: normal (σ 1.5) or integers 0 to 2 (which tie everywhere), a fraction p_mask of them −inf.
inline std::vector<double> random_values(std::mt19937_64& rng, int64_t n, double p_mask, bool integers) {
  std::normal_distribution<double> normal(0.0, 1.5);
  std::uniform_int_distribution<int> integer(0, 2);
  std::bernoulli_distribution mask(p_mask);
  std::vector<double> v(static_cast<std::size_t>(n));
  for (double& x : v) x = mask(rng) ? -kInf : integers ? integer(rng) : normal(rng);
  return v;
}

inline std::vector<double> random_potentials(std::mt19937_64& rng, const ChainProblem& p, double p_mask,
                                             bool integers) {
  return random_values(rng, p.B * (p.T - 1) * p.C * p.C, p_mask, integers);
}

// An HMM problem's tables, contiguous (transitions [B][C][C] and initial [B][C] where the problem has them per
// sequence), as random_values makes them; their sizes, which their gradients share.
struct HmmTables {
  std::vector<double> emissions, transitions, initial;
};
struct HmmSizes {
  int64_t emissions, transitions, initial;
};
inline HmmSizes hmm_sizes(const ChainProblem& p) {
  return {p.B * p.T * p.C, (p.batched_transitions ? p.B : 1) * p.C * p.C, (p.batched_initial ? p.B : 1) * p.C};
}
inline HmmTables random_hmm_tables(std::mt19937_64& rng, const ChainProblem& p, double p_mask, bool integers) {
  const HmmSizes n = hmm_sizes(p);
  return {random_values(rng, n.emissions, p_mask, integers), random_values(rng, n.transitions, p_mask, integers),
          random_values(rng, n.initial, p_mask, integers)};
}
// The three tables one after another (emissions, transitions, initial): what a test compares at once.
inline std::vector<double> flattened(const HmmTables& h) {
  std::vector<double> v(h.emissions);
  v.insert(v.end(), h.transitions.begin(), h.transitions.end());
  v.insert(v.end(), h.initial.begin(), h.initial.end());
  return v;
}

// Sequence b's score of state c at the first position, initial[c] + emissions[0][c], and of the step from state q at
// position t to state c at t + 1, transitions[c][q] + emissions[t + 1][c].
inline double first_score(const ChainProblem& hmm, const HmmTables& h, int64_t b, int64_t c) {
  return h.initial[std::size_t((hmm.batched_initial ? b : 0) * hmm.C + c)] +
         h.emissions[std::size_t(b * hmm.T * hmm.C + c)];
}
inline double step_score(const ChainProblem& hmm, const HmmTables& h, int64_t b, int64_t t, int64_t c, int64_t q) {
  return h.transitions[std::size_t(((hmm.batched_transitions ? b : 0) * hmm.C + c) * hmm.C + q)] +
         h.emissions[std::size_t((b * hmm.T + t + 1) * hmm.C + c)];
}

// The CRF form of the same chain where every length is at least 2 (T ≥ 2), and its potentials:
// transitions[c][q] + emissions[t + 1][c], the first step adding initial[q] + emissions[0][q].
inline ChainProblem crf_of(const ChainProblem& hmm) {
  ChainProblem p;
  p.semiring = hmm.semiring, p.dtype = hmm.dtype;
  p.B = hmm.B, p.T = hmm.T, p.C = hmm.C;
  p.with_lengths = hmm.with_lengths;
  return p;
}
inline std::vector<double> formed_potentials(const ChainProblem& hmm, const HmmTables& h) {
  const int64_t B = hmm.B, T = hmm.T, C = hmm.C;
  std::vector<double> pot(std::size_t(B * (T - 1) * C * C));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t + 1 < T; ++t)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t q = 0; q < C; ++q)
          pot[std::size_t(((b * (T - 1) + t) * C + c) * C + q)] =
              step_score(hmm, h, b, t, c, q) + (t == 0 ? first_score(hmm, h, b, q) : 0.0);
  return pot;
}

// The same chain at every length, one position included, as a CRF of T + 1 positions that starts in state 0 of an
// extra position: its first edge scores first_score(c) into each state c from state 0 (−inf from the others), its
// later edges the steps, and each length is one more. Its distribution over paths is the HMM's, so its entropy,
// cross-entropy and KL (the CRF form's reference) are the HMM's: the oracle of the HMM form's expectations.
inline ChainProblem crf_with_start(const ChainProblem& hmm) {
  ChainProblem p = crf_of(hmm);
  p.T = hmm.T + 1;
  p.with_lengths = true;
  return p;
}
inline std::vector<int64_t> lengths_with_start(std::vector<int64_t> lengths) {
  for (int64_t& n : lengths) ++n;
  return lengths;
}
inline std::vector<double> potentials_with_start(const ChainProblem& hmm, const HmmTables& h) {
  const int64_t B = hmm.B, T = hmm.T, C = hmm.C;
  std::vector<double> pot(std::size_t(B * T * C * C), -kInf);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t c = 0; c < C; ++c) {
      pot[std::size_t(b * T * C * C + c * C)] = first_score(hmm, h, b, c);
      for (int64_t t = 0; t + 1 < T; ++t)
        for (int64_t q = 0; q < C; ++q)
          pot[std::size_t(((b * T + t + 1) * C + c) * C + q)] = step_score(hmm, h, b, t, c, q);
    }
  return pot;
}
// A gradient of those potentials ([B][T][C][C]) as the tables' (contiguous): the first edge's into state c from
// state 0 is emissions[0][c]'s and initial[c]'s, each later edge's its transition's and its target's emission's, a
// shared table's summed over the sequences. (The first edges from the other states, of potential −inf, are no
// table's.)
inline HmmTables table_gradients(const ChainProblem& hmm, const std::vector<double>& grad) {
  const int64_t B = hmm.B, T = hmm.T, C = hmm.C;
  const HmmSizes n = hmm_sizes(hmm);
  HmmTables g{std::vector<double>(std::size_t(n.emissions)), std::vector<double>(std::size_t(n.transitions)),
              std::vector<double>(std::size_t(n.initial))};
  for (int64_t b = 0; b < B; ++b)
    for (int64_t c = 0; c < C; ++c) {
      const double first = grad[std::size_t(b * T * C * C + c * C)];
      g.emissions[std::size_t(b * T * C + c)] = first;
      g.initial[std::size_t((hmm.batched_initial ? b : 0) * C + c)] += first;
      for (int64_t t = 1; t < T; ++t)
        for (int64_t q = 0; q < C; ++q) {
          const double x = grad[std::size_t(((b * T + t) * C + c) * C + q)];
          g.emissions[std::size_t((b * T + t) * C + c)] += x;
          g.transitions[std::size_t(((hmm.batched_transitions ? b : 0) * C + c) * C + q)] += x;
        }
    }
  return g;
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
