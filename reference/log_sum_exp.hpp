// The reductions of the references of the product and of the chain. log Σ exp(x), exact at the edges as the
// README's contract says: a NaN term gives NaN, else a +inf term +inf, else all −inf (or no term) −inf, never NaN.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace jitbmm::reference {

template <class Real> Real log_sum_exp(const std::vector<Real>& x) {
  Real m = -std::numeric_limits<Real>::infinity();
  for (Real v : x) {
    if (std::isnan(v)) return v;
    m = std::max(m, v);
  }
  if (std::isinf(m)) return m;
  Real sum = 0;
  for (Real v : x) sum += std::exp(v - m);
  return m + std::log(sum);
}

// max_plus's choice: the index of the first NaN, else of the first largest term (ties: the smallest index).
template <class Real> int32_t first_max(const std::vector<Real>& x) {
  int32_t best = 0;
  for (int32_t i = 1; i < static_cast<int32_t>(x.size()); ++i)
    if (!std::isnan(x[best]) && (std::isnan(x[i]) || x[i] > x[best])) best = i;
  return best;
}

} // namespace jitbmm::reference
