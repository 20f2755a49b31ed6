// Whether samples fit a distribution: Pearson's χ² of the counts of a sample's categories (a chain's paths, or the
// edges of one of its steps) against their exact probabilities. The test a sampler is held to, on the CPU reference
// and on the GPU kernels alike.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <utility>
#include <vector>

namespace jitbmm::test {

struct SampleFit {
  double chi2 = 0;
  int64_t dof = 0;        // the pooled categories less one
  int64_t impossible = 0; // draws of categories of probability 0: a fault on their own
  // The fit holds at `z` standard deviations of the χ² distribution (Wilson–Hilferty's normal approximation):
  // z = 5 rejects a sampler that is right about once in 3.5 million runs.
  bool ok(double z = 5) const {
    if (impossible > 0) return false;
    if (dof <= 0) return true;
    const double k = double(dof), v = 2.0 / (9.0 * k);
    return (std::cbrt(chi2 / k) - (1.0 - v)) / std::sqrt(v) <= z;
  }
};

// counts[i] draws of category i whose probability is probs[i] (the probabilities sum to 1 over the categories
// that can be drawn). Categories expected fewer than 5 times are pooled, the least likely first, until each pool
// expects at least 5, so the χ² approximation holds.
inline SampleFit fit_samples(const std::vector<int64_t>& counts, const std::vector<double>& probs) {
  SampleFit f;
  const double n = double(std::accumulate(counts.begin(), counts.end(), int64_t(0)));
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < probs.size(); ++i) {
    if (probs[i] > 0)
      order.push_back(i);
    else
      f.impossible += counts[i];
  }
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return probs[a] < probs[b]; });
  std::vector<std::pair<double, double>> pools; // (expected, drawn)
  for (std::size_t j = 0; j < order.size(); ++j) {
    if (pools.empty() || pools.back().first >= 5) pools.emplace_back(0, 0);
    pools.back().first += n * probs[order[j]];
    pools.back().second += double(counts[order[j]]);
  }
  if (pools.size() > 1 && pools.back().first < 5) { // the most likely categories' pool short of 5: join the one before
    pools[pools.size() - 2].first += pools.back().first;
    pools[pools.size() - 2].second += pools.back().second;
    pools.pop_back();
  }
  for (const auto& [expected, drawn] : pools)
    if (expected > 0) f.chi2 += (drawn - expected) * (drawn - expected) / expected;
  const int64_t pools_n = int64_t(pools.size());
  f.dof = pools_n - 1;
  return f;
}

} // namespace jitbmm::test
