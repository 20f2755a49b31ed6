// A chain's count of paths and the log-probability of given paths on the CPU: the forward algorithm over which edges
// exist, and a sum of the potentials the events take against the log-partition. Formed in double (long double for
// f64 inputs).
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "jitbmm/reference.hpp"
#include "reference/chain_inputs.hpp"
#include "reference/chain_sequence.hpp"
#include "reference/log_sum_exp.hpp"

namespace jitbmm::reference {

namespace {

// The log of the number of sequence b's paths whose every edge's potential is other than −inf.
template <class Real> Real log_count(const ChainProblem& p, const void* potentials, const int64_t* lengths, int64_t b) {
  constexpr Real inf = std::numeric_limits<Real>::infinity();
  const int64_t C = p.C, L = lengths ? lengths[b] : p.T;
  int64_t strides[4];
  chain_strides(p, strides);
  std::vector<Real> alpha(C, 0), next(C), terms(C);
  for (int64_t t = 0; t + 1 < L; ++t) {
    for (int64_t c = 0; c < C; ++c) {
      for (int64_t from = 0; from < C; ++from) {
        const double v =
            load_element(p.dtype, potentials, b * strides[0] + t * strides[1] + c * strides[2] + from * strides[3]);
        terms[from] = v == -std::numeric_limits<double>::infinity() ? -inf : alpha[from];
      }
      next[c] = log_sum_exp(terms);
    }
    alpha.swap(next);
  }
  return log_sum_exp(alpha);
}

// Σ value·potential over sequence b's edges (a value of 0 adds nothing, whatever the potential) − its log-partition.
template <class Real>
Real log_prob(const ChainProblem& p, const void* potentials, const int64_t* lengths, const double* value, int64_t b) {
  const Sequence<Real> s(p, potentials, lengths, b);
  const Real z = s.score();
  if (!(z > -std::numeric_limits<Real>::infinity() && z < std::numeric_limits<Real>::infinity()))
    return std::numeric_limits<Real>::quiet_NaN(); // no distribution
  const int64_t C = p.C;
  Real sum = 0;
  for (int64_t t = 0; t + 1 < s.length(); ++t)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t from = 0; from < C; ++from) {
        const double v = value[((b * (p.T - 1) + t) * C + c) * C + from];
        if (v != 0) sum += Real(v) * s.potential(t, c, from);
      }
  return sum - z;
}

} // namespace

void chain_count(const ChainProblem& p, const void* potentials, const int64_t* lengths, double* log_counts) {
  check_chain_inputs(p, lengths);
  if (p.B == 0) return;
  if (!log_counts) throw std::invalid_argument("log_count: null");
  if (p.T > 1 && !potentials) throw std::invalid_argument("potentials: null");
  for (int64_t b = 0; b < p.B; ++b)
    log_counts[b] = p.dtype == DType::f64 ? double(log_count<long double>(p, potentials, lengths, b))
                                          : log_count<double>(p, potentials, lengths, b);
}

void chain_log_prob(const ChainProblem& p, const void* potentials, const int64_t* lengths, const double* value,
                    double* log_probs) {
  check_chain_inputs(p, lengths);
  if (p.semiring != Semiring::log)
    throw std::invalid_argument("problem.semiring: the distribution over paths is the log semiring's (got " +
                                std::string(semiring_info(p.semiring).name) + ")");
  if (p.B == 0) return;
  if (!log_probs) throw std::invalid_argument("log_prob: null");
  if (p.T > 1 && !potentials) throw std::invalid_argument("potentials: null");
  if (p.T > 1 && !value) throw std::invalid_argument("value: null");
  for (int64_t b = 0; b < p.B; ++b)
    log_probs[b] = p.dtype == DType::f64 ? double(log_prob<long double>(p, potentials, lengths, value, b))
                                         : log_prob<double>(p, potentials, lengths, value, b);
}

} // namespace jitbmm::reference
