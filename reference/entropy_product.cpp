// The expectation (entropy) semiring's product on the CPU, from its definition: each output's terms, their log-sum,
// the weights p and the mean of x1 − log p; the gradients from the same weights. Formed in double (long double for
// f64 inputs).
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "jitbmm/reference.hpp"
#include "reference/log_sum_exp.hpp"
#include "support/checked_size.hpp"

namespace jitbmm::reference {

namespace {

void check(const EntropyProductShape& s, const void* a, const void* b) {
  if (s.dtype != DType::f32 && s.dtype != DType::f64)
    throw std::invalid_argument(std::string("dtype: the expectation semiring's product takes f32 or f64, got ") +
                                dtype_info(s.dtype).name);
  if (s.B < 0 || s.M < 0 || s.K < 0 || s.N < 0) throw std::invalid_argument("shape: B, M, K and N must be >= 0");
  // The terms bound the work, and the outputs (pairs, and the backward's pairs of both operands) bound it where K = 0
  // leaves no term.
  const auto terms = try_product({s.B, s.M, s.K, s.N});
  if (!terms || *terms > kMaxReferenceTerms)
    throw std::invalid_argument("shape: B*M*K*N terms are more than the CPU reference computes");
  for (const auto& [rows, cols] : {std::pair{s.M, s.N}, std::pair{s.M, s.K}, std::pair{s.K, s.N}}) {
    const auto n = try_product({s.B, rows, cols});
    if (!n || *n > kMaxReferenceOutputs)
      throw std::invalid_argument("shape: the outputs or gradients are more than the CPU reference computes");
  }
  const bool empty = s.B == 0 || s.M == 0 || s.N == 0 || s.K == 0;
  if (!empty && (!a || !b)) throw std::invalid_argument(a ? "b: null" : "a: null");
}

// The terms of output (batch, i, j): x0 and x1.
template <class Real> struct Terms {
  std::vector<Real> x0, x1;
  Terms(const EntropyProductShape& s, const void* a, const void* b, int64_t batch, int64_t i, int64_t j)
      : x0(std::size_t(s.K)), x1(std::size_t(s.K)) {
    const int64_t pa = s.B * s.M * s.K, pb = s.B * s.K * s.N;
    for (int64_t k = 0; k < s.K; ++k) {
      const int64_t at = (batch * s.M + i) * s.K + k, bt = (batch * s.K + k) * s.N + j;
      x0[k] = Real(load_element(s.dtype, a, at)) + Real(load_element(s.dtype, b, bt));
      x1[k] = Real(load_element(s.dtype, a, pa + at)) + Real(load_element(s.dtype, b, pb + bt));
    }
  }
};

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

template <class Real> void forward(const EntropyProductShape& s, const void* a, const void* b, double* out) {
  const int64_t pair = s.B * s.M * s.N;
  for (int64_t batch = 0; batch < s.B; ++batch)
    for (int64_t i = 0; i < s.M; ++i)
      for (int64_t j = 0; j < s.N; ++j) {
        const Terms<Real> x(s, a, b, batch, i, j);
        const Real z = log_sum_exp(x.x0);
        Real h = 0;
        for (int64_t k = 0; k < s.K; ++k)
          if (x.x0[k] != Real(kNegInf)) {
            const Real p = std::exp(x.x0[k] - z);
            if (p != Real(0)) h += p * (x.x1[k] - (x.x0[k] - z)); // weight 0: nothing, whatever x1
          }
        const int64_t at = (batch * s.M + i) * s.N + j;
        out[at] = double(z);
        out[pair + at] = double(h);
      }
}

template <class Real>
void backward(const EntropyProductShape& s, const void* a, const void* b, const double* grad_out, double* grad_a,
              double* grad_b) {
  const int64_t pa = s.B * s.M * s.K, pb = s.B * s.K * s.N, pair = s.B * s.M * s.N;
  std::vector<Real> ga(std::size_t(2 * pa), 0), gb(std::size_t(2 * pb), 0);
  std::vector<double> out(std::size_t(2 * pair));
  forward<Real>(s, a, b, out.data());
  for (int64_t batch = 0; batch < s.B; ++batch)
    for (int64_t i = 0; i < s.M; ++i)
      for (int64_t j = 0; j < s.N; ++j) {
        const Terms<Real> x(s, a, b, batch, i, j);
        const int64_t o = (batch * s.M + i) * s.N + j;
        const Real z = Real(out[o]), h = Real(out[pair + o]), g0 = Real(grad_out[o]), g1 = Real(grad_out[pair + o]);
        for (int64_t k = 0; k < s.K; ++k) {
          if (x.x0[k] == Real(kNegInf)) continue; // a term of weight 0
          const Real log_p = x.x0[k] - z, p = std::exp(log_p);
          if (p == Real(0)) continue;
          const Real d0 = p * (g0 + g1 * (x.x1[k] - log_p - h)), d1 = p * g1;
          const int64_t at = (batch * s.M + i) * s.K + k, bt = (batch * s.K + k) * s.N + j;
          ga[at] += d0, ga[pa + at] += d1;
          gb[bt] += d0, gb[pb + bt] += d1;
        }
      }
  if (grad_a)
    for (std::size_t i = 0; i < ga.size(); ++i) grad_a[i] = double(ga[i]);
  if (grad_b)
    for (std::size_t i = 0; i < gb.size(); ++i) grad_b[i] = double(gb[i]);
}

} // namespace

void entropy_product(const EntropyProductShape& shape, const void* a, const void* b, double* out) {
  check(shape, a, b);
  if (shape.dtype == DType::f64)
    forward<long double>(shape, a, b, out);
  else
    forward<double>(shape, a, b, out);
}

void entropy_product_backward(const EntropyProductShape& shape, const void* a, const void* b, const double* grad_out,
                              double* grad_a, double* grad_b) {
  check(shape, a, b);
  if (shape.dtype == DType::f64)
    backward<long double>(shape, a, b, grad_out, grad_a, grad_b);
  else
    backward<double>(shape, a, b, grad_out, grad_a, grad_b);
}

} // namespace jitbmm::reference
