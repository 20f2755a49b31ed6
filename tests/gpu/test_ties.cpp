// Argmax ties on the GPU: inputs drawn from a few small integers (with ±inf and NaN), so equal terms are common and
// exactly equal in every dtype, through every strategy that computes an argmax. The contract (README, Semantics;
// templates/core/semirings.cuh Select): ties go to the smallest k, so a row whose terms are all the semiring's zero
// reports k = 0; the first NaN term wins; K = 0 reports −1.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "differential.hpp"
#include "tie_case.hpp"
#include "variants.hpp"

using namespace jitbmm;

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
        const test::CaseResult r = test::run_tie_case(p, spec, rng, with_nan);
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
    const test::TieInputs in = test::tie_inputs(p.semiring, false);
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
