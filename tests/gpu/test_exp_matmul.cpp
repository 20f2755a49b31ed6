// exp_matmul against the CPU reference on inputs built to break a shifted-exponential product: wide spreads, row
// and column maxima at different k, CRF-style banded −inf masks, large common offsets, specials. Every output is
// checked (poisoned first, so an output neither written nor repaired shows).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "adversarial.hpp"
#include "differential.hpp"
#include "feature_level.hpp"
#include "grad_case.hpp"
#include "needs.hpp"
#include "runtime/device_memory.hpp"
#include "variants.hpp"

using namespace jitbmm;
using test::adversarial_kinds;
using test::fill;
using test::Kind;

TEST_CASE("exp_matmul: every variant is exact on adversarial inputs, odd shapes included") {
  // The first three repair in tiles of 32×32, the last two (over 512 tiles of 64×64) in tiles of 64×64.
  const Shape shapes[] = {{2, 70, 130, 90}, {1, 96, 600, 136}, {2, 33, 700, 40}, {520, 65, 8, 3}, {520, 3, 8, 70}};
  uint64_t seed = 31000;
  int cases = 0;
  for (const KernelSpec& kind : test::problem_kinds()) {
    if (kind.semiring != Semiring::log) continue;
    for (const KernelSpec& spec : test::runnable_here(test::exp_matmul_variants(kind)))
      for (const Shape& shape : shapes)
        for (const Kind& k : test::log_kinds()) {
          CHECK(test::kind_case_ok(spec, shape, k, ++seed));
          ++cases;
        }
  }
  MESSAGE(cases << " cases");
}

// Tiles whose lines of a, or of b, all have a max that is not finite (−inf lines, and lines holding NaN or +inf)
// skip their products (em_tile_void): their outputs must still be what the products' zeros give (−inf, NaN, +inf
// and repairs), in tiles wholly void, partly void, and beside lines holding specials. Blocks of 128 rows of a
// alternate between finite and void, blocks of 64 columns of b too, so 64- and 128-line tiles meet every mixture.
TEST_CASE("exp_matmul: tiles of void lines give the products' outputs") {
  const Kind void_lines{"void blocks of lines", [](std::mt19937_64& rng, bool is_a, int64_t r, int64_t c,
                                                  const Shape&) {
                          const int64_t line = is_a ? r : c, k = is_a ? c : r;
                          const bool in_void = is_a ? line / 128 % 2 == 1 : line / 64 % 3 == 2;
                          if (!in_void) return std::normal_distribution<double>(0, 3)(rng);
                          if (line % 64 == 5 && k == 1) return double(NAN);
                          if (line % 64 == 9 && k == 2) return double(INFINITY);
                          return -double(INFINITY);
                        }};
  const Shape shapes[] = {{2, 300, 96, 200}, {1, 256, 40, 130}};
  uint64_t seed = 31500;
  int cases = 0;
  for (const KernelSpec& kind : test::problem_kinds()) {
    if (kind.semiring != Semiring::log) continue;
    for (const KernelSpec& spec : test::runnable_here(test::exp_matmul_variants(kind)))
      for (const Shape& shape : shapes) {
        CHECK(test::kind_case_ok(spec, shape, void_lines, ++seed));
        ++cases;
      }
  }
  MESSAGE(cases << " cases");
}

// The default's tensor-core product (tf32x3): its guard's headroom is what the expectations below are set by.
TEST_CASE("exp_matmul: the guard repairs only what it must; banded masks are recognised without repair" *
          doctest::test_suite(test::kNeedsMmaTf32Bf16)) {
  Problem p;
  p.shape = {2, 256, 512, 256};
  KernelSpec spec = default_spec(p, Strategy::exp_matmul);
  const SemiringBMM plan = SemiringBMM::get(p, spec);
  const int64_t outputs = p.shape.B * p.shape.M * p.shape.N;
  DeviceBuffer out(outputs * 4);
  uint64_t seed = 32000;
  for (const Kind& k : test::log_kinds()) {
    std::mt19937_64 rng(++seed);
    const test::HostTensor a = fill(p, true, k, rng), b = fill(p, false, k, rng);
    DeviceBuffer da(a.bytes.size()), db(b.bytes.size());
    da.upload(a.data(), a.bytes.size());
    db.upload(b.data(), b.bytes.size());
    const SemiringBMM::RepairReport rep = plan.run_with_repair_report(da.get(), db.get(), out.get());
    MESSAGE(std::string(k.name) << ": " << rep.repaired_outputs << " of " << rep.outputs << " outputs repaired, "
                                << rep.repaired_tiles << " of " << rep.tiles << " tiles");
    CHECK(rep.outputs == outputs);
    CHECK(rep.repaired_tiles <= rep.tiles);
    const std::string name = k.name;
    if (name == "randn" || name == "randn*8" || name == "maxima apart (gap 60)" || name.rfind("offset", 0) == 0 ||
        name == "rows offset +-1e4")
      CHECK(rep.repaired_outputs == 0); // the headroom covers these gaps: no repair
    if (name == "randn*50" || name == "maxima apart (gap 120)") CHECK(rep.repaired_outputs > 0);
    // Most banded outputs are exactly −inf and recognised by the chunk masks; only the band's edge is repaired.
    if (name == "banded -inf") CHECK(rep.repaired_outputs < outputs / 10);
  }
}

TEST_CASE("exp_matmul: K = 0 gives −inf; a spec the problem does not allow is refused, naming the field") {
  Problem p;
  p.shape = {2, 40, 0, 50};
  std::mt19937_64 rng(5);
  const KernelSpec spec = test::exp_matmul_spec_here(p);
  const test::CaseResult r = test::run_case(p, spec, rng, {});
  test::report_failure(r, p, spec, 5);
  CHECK(r.ok());
  p.shape = {2, 64, 64, 64};
  KernelSpec fast = default_spec(p, Strategy::exp_matmul);
  fast.math = Math::tf32;
  CHECK_THROWS_WITH_AS(SemiringBMM::get(p, fast), doctest::Contains("spec.math"), std::invalid_argument);
  Problem maxp = p;
  maxp.semiring = Semiring::max_plus;
  KernelSpec wrong = fast;
  wrong.semiring = Semiring::max_plus;
  CHECK_THROWS_WITH_AS(SemiringBMM::get(maxp, wrong), doctest::Contains("log semiring only"), std::invalid_argument);
  const SemiringBMM direct = SemiringBMM::get(p, default_spec(p, Strategy::tiled));
  DeviceBuffer a(64 * 64 * 2 * 4), b(64 * 64 * 2 * 4), out(64 * 64 * 2 * 4);
  CHECK_THROWS_WITH_AS(direct.run_with_repair_report(a.get(), b.get(), out.get()), doctest::Contains("exp_matmul plan"),
                       std::invalid_argument);
}

// The grid's z holds at most 65535 batches, so above that a block runs several tiles in turn: the wgmma pipeline's
// producer walks them as one sequence of slices (WgTiles), two slices a tile here (K = 40 pads to 64).
// The gradients' repair (the direct backward over the outputs the guard gave up) loops over the batches beyond its
// grid's: "maxima apart" gives outputs up.
TEST_CASE("exp_matmul: more than 65535 batches, so a block runs several tiles: forward and gradients") {
  const Shape shape = {65600, 3, 40, 2};
  uint64_t seed = 35000;
  int cases = 0;
  for (const KernelSpec& kind : test::problem_kinds()) {
    if (kind.semiring != Semiring::log || kind.dtype != DType::f32 || kind.out_dtype != kind.dtype) continue;
    for (const KernelSpec& spec : test::runnable_here(test::exp_matmul_variants(kind)))
      for (const Kind& k : adversarial_kinds()) {
        const std::string name = k.name;
        if (name != "randn" && name != "maxima apart (gap 120)") continue; // no repair; repair
        CHECK(test::kind_case_ok(spec, shape, k, ++seed));
        ++cases;
      }
    for (const KernelSpec& spec : test::runnable_here(test::exp_matmul_grad_variants(kind)))
      for (const Kind& k : adversarial_kinds()) {
        const std::string name = k.name;
        if (name != "randn" && name != "maxima apart (gap 120)") continue;
        const Problem p = test::problem_for(spec, shape);
        std::mt19937_64 rng(++seed);
        test::HostTensor a = fill(p, true, k, rng), b = fill(p, false, k, rng);
        const test::GradInputs in = test::grad_inputs_from(p, std::move(a), std::move(b), rng, seed % 3, 1.0);
        const test::CaseResult r = test::run_grad_case_on(p, spec, in);
        test::report_failure(r, p, spec, seed);
        CHECK(r.ok());
        ++cases;
      }
  }
  CHECK(cases > 0);
  MESSAGE(cases << " cases");
}

namespace {

// The log backward's variants (exp_matmul, and the direct backward, also exp_matmul's repair path) of one dtype on
// every adversarial and wide kind, f32 with scaled grad_out, the halves unscaled (G is f16/bf16). Returns the cases.
int log_backward_cases(DType dtype) {
  const bool f32 = dtype == DType::f32;
  const Shape shapes[] = {{2, 70, 130, 90}, {1, 96, 600, 136}};
  // Scaled G: 1e-20 next to weights of e^-60 (maxima apart) makes gradients of many subnormal terms, which the
  // direct backward sums with G scaled per line (templates/grad/backward.cuh); 1e-38 makes G itself reach the
  // subnormals; 1e25 the guard's other end.
  const double g_scales[] = {1.0, 1e-20, 1e25, 1e-38};
  uint64_t seed = f32 ? 33000 : dtype == DType::f16 ? 34000 : 34500;
  int cases = 0;
  for (const KernelSpec& kind : test::problem_kinds()) {
    if (kind.semiring != Semiring::log || kind.dtype != dtype || kind.out_dtype != kind.dtype) continue;
    std::vector<KernelSpec> variants = test::runnable_here(test::exp_matmul_grad_variants(kind));
    for (const KernelSpec& s : test::grad_variants())
      if (s.strategy == Strategy::tiled && s.semiring == kind.semiring && s.dtype == kind.dtype &&
          s.out_dtype == kind.out_dtype)
        variants.push_back(s);
    for (const KernelSpec& spec : variants) {
      if (spec.index64) continue; // the variant test in test_backward.cpp runs them
      for (const Shape& shape : shapes)
        for (const Kind& k : test::log_kinds()) {
          if (std::string(k.name) == "huge, cancelling") continue; // gradients of huge sums: ill-conditioned
          const Problem p = test::problem_for(spec, shape);
          std::mt19937_64 rng(++seed);
          test::HostTensor a = fill(p, true, k, rng), b = fill(p, false, k, rng);
          const double g_scale = f32 ? g_scales[seed % 4] : 1.0;
          const test::GradInputs in = test::grad_inputs_from(p, std::move(a), std::move(b), rng, seed % 3, g_scale);
          const test::CaseResult r = test::run_grad_case_on(p, spec, in);
          if (!r.ok()) std::printf("inputs: %s, grad_out scaled by %g\n", k.name, g_scale);
          test::report_failure(r, p, spec, seed);
          CHECK(r.ok());
          ++cases;
        }
    }
  }
  return cases;
}

} // namespace

TEST_CASE("log backward f32, exp_matmul and direct: exact gradients on adversarial inputs and scaled grad_out") {
  MESSAGE(log_backward_cases(DType::f32) << " backward cases");
}

TEST_CASE("log backward f16, exp_matmul and direct: exact gradients on adversarial inputs") {
  MESSAGE(log_backward_cases(DType::f16) << " backward cases");
}

TEST_CASE("log backward bf16, exp_matmul and direct: exact gradients on adversarial inputs") {
  MESSAGE(log_backward_cases(DType::bf16) << " backward cases");
}
