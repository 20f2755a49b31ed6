// Exact samples of a chain's paths on the CPU: forward filtering (the messages alpha of reference/chain_sequence.hpp,
// or the HMM form's recursion), then backward sampling, the last state from its marginal and each state before it
// given the one after it: p(z_t = q | z_{t+1} = c) ∝ exp(alpha_t[q] + potential_t[c][q]) (the HMM form's
// transitions[c][q]). Formed in double (long double for the CRF form's f64 inputs).
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "jitbmm/reference.hpp"
#include "reference/chain_inputs.hpp"
#include "reference/chain_sequence.hpp"
#include "support/checked_size.hpp"

namespace jitbmm::reference {

namespace {

// A uniform draw from [0, 1): the generator's top 53 bits, the same on every platform.
double uniform(std::mt19937_64& rng) { return double(rng() >> 11) * 0x1p-53; }

// A state drawn with probability ∝ exp(x[q]), x's largest value finite and none +inf or NaN: the smallest q whose
// running sum of weights passes u times their total, so a weight of 0 is never drawn.
template <class Real> int32_t draw(const std::vector<Real>& x, std::mt19937_64& rng) {
  Real m = -std::numeric_limits<Real>::infinity();
  for (Real v : x) m = std::max(m, v);
  std::vector<Real> w(x.size());
  Real total = 0;
  for (std::size_t q = 0; q < x.size(); ++q) total += w[q] = std::exp(x[q] - m);
  const Real target = Real(uniform(rng)) * total;
  Real running = 0;
  int32_t last = -1;
  for (std::size_t q = 0; q < x.size(); ++q) {
    if (w[q] == 0) continue;
    running += w[q];
    last = int32_t(q);
    if (running > target) break;
  }
  return last; // the last of positive weight where rounding kept the sum at the target
}

// Sequence b's n paths of length L (−1 throughout where it has no distribution) from its forward messages alpha(t, c)
// and what a step from q at t to c at t + 1 adds, row(t, c, q).
template <class Real, class Alpha, class Row>
void draw_sequence(const ChainProblem& p, int64_t b, int64_t L, bool distribution, int64_t n, uint64_t seed,
                   int32_t* paths, Alpha alpha, Row row) {
  const int64_t T = p.T, C = p.C;
  std::vector<Real> terms(static_cast<std::size_t>(C));
  // Each sequence's own stream, so that its paths do not depend on the batch around it.
  std::mt19937_64 rng(seed ^ (0x9e3779b97f4a7c15ull * uint64_t(b + 1)));
  for (int64_t i = 0; i < n; ++i) {
    int32_t* path = paths + (b * n + i) * T;
    std::fill(path, path + T, -1);
    if (!distribution) continue;
    for (int64_t c = 0; c < C; ++c) terms[c] = alpha(L - 1, c);
    path[L - 1] = draw(terms, rng);
    for (int64_t t = L - 2; t >= 0; --t) {
      for (int64_t q = 0; q < C; ++q) terms[q] = alpha(t, q) + row(t, path[t + 1], q);
      path[t] = draw(terms, rng);
    }
  }
}

template <class Real>
void sample_in(const ChainProblem& p, const void* potentials, const int64_t* lengths, int64_t n, uint64_t seed,
               int32_t* paths) {
  for (int64_t b = 0; b < p.B; ++b) {
    const Sequence<Real> s(p, potentials, lengths, b);
    draw_sequence<Real>(
        p, b, s.length(), std::isfinite(static_cast<double>(s.score())), n, seed, paths,
        [&](int64_t t, int64_t c) { return s.alpha(t, c); },
        [&](int64_t t, int64_t c, int64_t q) { return s.potential(t, c, q); });
  }
}

// The HMM form: the messages of its own recursion (chain_forward), and the transitions, whose step's emission is the
// same for every state it comes from.
void sample_in(const ChainProblem& p, const HmmInputs& hmm, const int64_t* lengths, int64_t n, uint64_t seed,
               int32_t* paths) {
  const HmmStrides st = hmm_strides(p);
  std::vector<double> score(std::size_t(p.B)), alpha(std::size_t(p.B * p.T * p.C));
  chain_forward(p, hmm, lengths, score.data(), alpha.data(), nullptr);
  for (int64_t b = 0; b < p.B; ++b)
    draw_sequence<double>(
        p, b, lengths ? lengths[b] : p.T, std::isfinite(score[std::size_t(b)]), n, seed, paths,
        [&](int64_t t, int64_t c) { return alpha[std::size_t((b * p.T + t) * p.C + c)]; },
        [&](int64_t, int64_t c, int64_t q) {
          return load_element(p.dtype, hmm.transitions,
                              b * st.transitions[0] + c * st.transitions[1] + q * st.transitions[2]);
        });
}

} // namespace

namespace {

// What both forms check: the semiring and n (the paths' memory within the reference's bound).
void check_samples(const ChainProblem& p, int64_t n) {
  if (p.semiring != Semiring::log)
    throw std::invalid_argument("problem.semiring: samples are drawn from the log semiring's distribution (got " +
                                std::string(semiring_info(p.semiring).name) + ")");
  const auto per_sequence = try_product({n, p.T});
  if (n < 0 || !per_sequence || *per_sequence > kMaxReferenceOutputs)
    throw std::invalid_argument("n: " + std::to_string(n) + " paths of " + std::to_string(p.T) +
                                " positions a sequence are outside what the CPU reference draws");
}

} // namespace

void chain_sample(const ChainProblem& p, const void* potentials, const int64_t* lengths, int64_t n, uint64_t seed,
                  int32_t* paths) {
  check_chain_inputs(p, lengths);
  check_samples(p, n);
  if (p.B == 0 || n == 0) return;
  if (p.T > 1 && !potentials) throw std::invalid_argument("potentials: null"); // one position reads none
  if (!paths) throw std::invalid_argument("paths: null");
  if (p.dtype == DType::f64)
    sample_in<long double>(p, potentials, lengths, n, seed, paths);
  else
    sample_in<double>(p, potentials, lengths, n, seed, paths);
}

void chain_sample(const ChainProblem& p, const HmmInputs& hmm, const int64_t* lengths, int64_t n, uint64_t seed,
                  int32_t* paths) {
  check_hmm_inputs(p, hmm, lengths);
  check_samples(p, n);
  if (p.B == 0 || n == 0) return;
  if (!paths) throw std::invalid_argument("paths: null");
  sample_in(p, hmm, lengths, n, seed, paths);
}

} // namespace jitbmm::reference
