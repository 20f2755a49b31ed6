// The k-max semiring's product on the CPU, from its definition: every output's candidates in the order (kk, r1, r2),
// the k first by value (NaN first), equal values keeping that order. Formed in double (long double for f64 inputs).
#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "jitbmm/reference.hpp"
#include "support/checked_size.hpp"

namespace jitbmm::reference {

namespace {

template <class Real>
void kmax_in(const KMaxProductShape& s, const void* a, const void* b, double* out, int32_t* index) {
  const int64_t k = s.k, va = s.B * s.M * s.K, vb = s.B * s.K * s.N, vo = s.B * s.M * s.N;
  struct Candidate {
    Real value;
    int32_t at;
  };
  auto before = [](const Candidate& x, const Candidate& y) {
    const bool xn = std::isnan(x.value), yn = std::isnan(y.value);
    if (xn != yn) return xn;
    if (!xn && x.value != y.value) return x.value > y.value;
    return x.at < y.at;
  };
  std::vector<Candidate> c;
  for (int64_t batch = 0; batch < s.B; ++batch)
    for (int64_t i = 0; i < s.M; ++i)
      for (int64_t j = 0; j < s.N; ++j) {
        c.clear();
        for (int64_t kk = 0; kk < s.K; ++kk)
          for (int64_t r1 = 0; r1 < k; ++r1)
            for (int64_t r2 = 0; r2 < k; ++r2) {
              const Real v = Real(load_element(s.dtype, a, r1 * va + (batch * s.M + i) * s.K + kk)) +
                             Real(load_element(s.dtype, b, r2 * vb + (batch * s.K + kk) * s.N + j));
              if (v != -std::numeric_limits<Real>::infinity()) c.push_back({v, int32_t((kk * k + r1) * k + r2)});
            }
        const std::size_t found = std::min<std::size_t>(c.size(), std::size_t(k));
        std::partial_sort(c.begin(), c.begin() + found, c.end(), before);
        const int64_t o = (batch * s.M + i) * s.N + j;
        for (int64_t r = 0; r < k; ++r) {
          const bool some = std::size_t(r) < found;
          out[r * vo + o] = some ? double(c[r].value) : -INFINITY;
          if (index) index[r * vo + o] = some ? c[r].at : -1;
        }
      }
}

} // namespace

void kmax_product(const KMaxProductShape& shape, const void* a, const void* b, double* out, int32_t* index) {
  if (shape.dtype != DType::f32 && shape.dtype != DType::f64)
    throw std::invalid_argument(std::string("dtype: the k-max semiring's product takes f32 or f64, got ") +
                                dtype_info(shape.dtype).name);
  if (shape.k < 1 || shape.k > 16)
    throw std::invalid_argument("k: 1 to 16 values a vector, got " + std::to_string(shape.k));
  if (shape.B < 0 || shape.M < 0 || shape.K < 0 || shape.N < 0)
    throw std::invalid_argument("shape: B, M, K and N must be >= 0");
  const auto terms = try_product({shape.B, shape.M, shape.K, shape.N, shape.k, shape.k});
  if (!terms || *terms > kMaxReferenceTerms)
    throw std::invalid_argument("shape: B*M*K*N*k*k candidates are more than the CPU reference computes");
  const auto outputs = try_product({shape.B, shape.M, shape.N, shape.k}); // the bound where K = 0 leaves no term
  if (!outputs || *outputs > kMaxReferenceOutputs)
    throw std::invalid_argument("shape: B*M*N*k outputs are more than the CPU reference computes");
  const bool some = shape.B > 0 && shape.M > 0 && shape.N > 0;
  if (some && shape.K > 0 && (!a || !b)) throw std::invalid_argument(a ? "b: null" : "a: null");
  if (some && !out) throw std::invalid_argument("out: null");
  if (shape.dtype == DType::f64)
    kmax_in<long double>(shape, a, b, out, index);
  else
    kmax_in<double>(shape, a, b, out, index);
}

} // namespace jitbmm::reference
