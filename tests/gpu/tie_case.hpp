// Argmax tie cases: inputs drawn from a few small integers (with ±inf and NaN), so that equal terms are common and
// exactly equal in every dtype (the contract: ties go to the smallest k; the first NaN term wins).
#pragma once

#include <cmath>
#include <random>
#include <vector>

#include "differential.hpp"

namespace jitbmm::test {

// The values a case draws from, and the value that fills a's row 0 so that its outputs' terms all equal the
// semiring's zero (ties of the zero: argmax 0). Sums and products of these are exact in f16, bf16, f32 and f64.
struct TieInputs {
  std::vector<double> values, weights;
  double zero_row;
};

inline TieInputs tie_inputs(Semiring s, bool with_nan) {
  TieInputs in;
  switch (s) {
  case Semiring::max_plus: // terms in {−inf, −1, 0, 1, 2}
    in = {{0.0, 1.0, -INFINITY}, {0.45, 0.45, 0.1}, -INFINITY};
    break;
  case Semiring::min_plus: // terms in {0, 1, 2, +inf}
    in = {{0.0, 1.0, INFINITY}, {0.45, 0.45, 0.1}, INFINITY};
    break;
  default: // max_times, non-negative: products in {0, 1, 2, 4}
    in = {{0.0, 1.0, 2.0}, {0.3, 0.4, 0.3}, 0.0};
  }
  if (with_nan) {
    in.values.push_back(NAN);
    in.weights.push_back(0.03);
  }
  return in;
}

inline CaseResult run_tie_case(const Problem& p, const KernelSpec& spec, std::mt19937_64& rng, bool with_nan) {
  const Shape& s = p.shape;
  const TieInputs in = tie_inputs(p.semiring, with_nan);
  HostTensor a = tensor_from_set(p.dtype, storage_elements(s.B, s.M, s.K, p.a()), rng, in.values, in.weights);
  HostTensor b = tensor_from_set(p.dtype, storage_elements(s.B, s.K, s.N, p.b()), rng, in.values, in.weights);
  // Row 0 of every batch of a: all terms of out[:, 0, :] equal the zero (unless b brings a NaN).
  for (int64_t bt = 0; bt < s.B; ++bt)
    for (int64_t k = 0; k < s.K; ++k) store_element(p.dtype, a.data(), bt * p.a().batch + k * p.a().col, in.zero_row);
  return run_case_on(p, spec, a, b);
}

} // namespace jitbmm::test
