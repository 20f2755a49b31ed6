// log Σ exp(x) for the references of the product and of the chain, exact at the edges as the README's contract says:
// a NaN term gives NaN, else a +inf term +inf, else all −inf (or no term) −inf, never NaN.
#pragma once

#include <algorithm>
#include <cmath>
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

} // namespace jitbmm::reference
