// Argmax ties on the GPU: inputs drawn from a few small integers (with ±inf and NaN), so equal terms are common and
// exactly equal in every dtype, through every strategy that computes an argmax. The contract (README, Semantics;
// templates/core/semirings.cuh Select): ties go to the smallest k, so a row whose terms are all the semiring's zero
// reports k = 0; the first NaN term wins; K = 0 reports −1.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "differential.hpp"
#include "variants.hpp"

using namespace jitbmm;

namespace {

// The values a case draws from, and the value that fills a's row 0 so that its outputs' terms all equal the
// semiring's zero (ties of the zero: argmax 0). Sums and products of these are exact in f16, bf16, f32 and f64.
struct TieInputs {
  std::vector<double> values, weights;
  double zero_row;
};

TieInputs tie_inputs(Semiring s, bool with_nan) {
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

test::CaseResult run_tie_case(const Problem& p, const KernelSpec& spec, std::mt19937_64& rng, bool with_nan) {
  const Shape& s = p.shape;
  const TieInputs in = tie_inputs(p.semiring, with_nan);
  test::HostTensor a = test::tensor_from_set(p.dtype, test::storage_elements(s.B, s.M, s.K, p.a()), rng, in.values,
                                             in.weights);
  test::HostTensor b = test::tensor_from_set(p.dtype, test::storage_elements(s.B, s.K, s.N, p.b()), rng, in.values,
                                             in.weights);
  // Row 0 of every batch of a: all terms of out[:, 0, :] equal the zero (unless b brings a NaN).
  for (int64_t bt = 0; bt < s.B; ++bt)
    for (int64_t k = 0; k < s.K; ++k) store_element(p.dtype, a.data(), bt * p.a().batch + k * p.a().col, in.zero_row);
  return test::run_case_on(p, spec, a, b);
}

} // namespace

TEST_CASE("argmax ties go to the smallest k in every selecting semiring, dtype and strategy") {
  // Shapes crossing the small test tiles (32, 128), k-steps (8, 16), split-K chunks (24), warp lanes and the
  // block_tree's 64 threads; K = 1 (no choice); K = 0 (argmax −1).
  const Shape shapes[] = {{2, 37, 70, 33}, {1, 130, 9, 65}, {1, 3, 257, 2}, {3, 5, 1, 7}, {1, 4, 0, 6}};
  uint64_t seed = 31000;
  int cases = 0;
  for (const KernelSpec& spec : test::all_variants()) {
    if (!spec.with_argmax) continue;
    for (const Shape& shape : shapes)
      for (bool with_nan : {false, true}) {
        const Problem p = test::problem_for(spec, shape);
        std::mt19937_64 rng(++seed);
        const test::CaseResult r = run_tie_case(p, spec, rng, with_nan);
        test::report_failure(r, p, spec, seed);
        CAPTURE(to_string(spec));
        CAPTURE(describe(p));
        CHECK(r.ok());
        CHECK(r.checked == shape.B * shape.M * shape.N);
        // The inputs did make ties (without NaN, every output of row 0 is one when K > 1), and NaN outputs.
        if (!with_nan && shape.K > 1) CHECK(r.ties >= shape.B * shape.N);
        if (with_nan && shape.K > 8) CHECK(r.nan_outputs > 0);
        ++cases;
      }
  }
  MESSAGE(cases << " tie cases");
  CHECK(cases > 0);
}

TEST_CASE("argmax: a NaN term in one K slice stays the answer through the clean slices after it") {
  // The tiled kernel's argmax policy compares values alone in slices where no operand can form a NaN, and takes the
  // careful path elsewhere (templates/tiled/tiled.cuh, SelectTerm). Here row 11 of a has a NaN at k = 20 and a better
  // value than any other at k = 90; row 7 has the infinity that makes NaN terms with b's other infinity (or zero)
  // at k = 33. The slices after hold no suspect operand, so they run the one-comparison loop.
  const Shape shape{2, 40, 100, 36};
  uint64_t seed = 32000;
  int cases = 0;
  for (const KernelSpec& spec : test::all_variants()) {
    if (!spec.with_argmax) continue;
    const Problem p = test::problem_for(spec, shape);
    std::mt19937_64 rng(++seed);
    const TieInputs in = tie_inputs(p.semiring, false);
    test::HostTensor a = test::tensor_from_set(p.dtype, test::storage_elements(shape.B, shape.M, shape.K, p.a()),
                                               rng, in.values, in.weights);
    test::HostTensor b = test::tensor_from_set(p.dtype, test::storage_elements(shape.B, shape.K, shape.N, p.b()),
                                               rng, in.values, in.weights);
    const double nan_maker = p.semiring == Semiring::min_plus ? -INFINITY : INFINITY; // meets +inf, or 0 (max_times)
    const double best = p.semiring == Semiring::min_plus ? -5.0 : 5.0;
    for (int64_t bt = 0; bt < shape.B; ++bt) {
      const auto at = [&](int64_t i, int64_t k) { return bt * p.a().batch + i * p.a().row + k * p.a().col; };
      store_element(p.dtype, a.data(), at(11, 20), NAN);
      store_element(p.dtype, a.data(), at(11, 90), best);
      store_element(p.dtype, a.data(), at(7, 33), nan_maker);
      store_element(p.dtype, a.data(), at(7, 95), best);
    }
    const test::CaseResult r = test::run_case_on(p, spec, a, b);
    test::report_failure(r, p, spec, seed);
    CAPTURE(to_string(spec));
    CHECK(r.ok());
    CHECK(r.nan_outputs >= shape.B * shape.N); // row 11 at least
    ++cases;
  }
  MESSAGE(cases << " cases");
  CHECK(cases > 0);
}
