// The device's feature level (JITBMM_FEATURES, runtime/device.hpp) on the GPU, at whatever level the suite runs:
// its kernels are compiled with exactly the level's JB_HAS_* options, the tuner offers only the variants the level
// has, a spec that needs more is refused naming the feature, and the kernels whose code paths a level changes (max.NaN
// on f32, the packed half pairs on f16 and bf16, cp.async) match the CPU reference on ±inf, NaN and ties. Small
// shapes: these cases run at every level of scripts/gpu-levels, beside the rest. The
// expectations are read from the PTX ISA (what each architecture has) and the environment, not from the runtime's
// feature table, so a level the runtime ignored or misread fails here.
#include <doctest/doctest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "adversarial.hpp"
#include "differential.hpp"
#include "feature_level.hpp"
#include "generator/chain_source.hpp"
#include "runtime/chain_plan.hpp"
#include "runtime/jit.hpp"
#include "runtime/tuner/autotune.hpp"
#include "tie_case.hpp"
#include "variants.hpp"

using namespace jitbmm;

namespace {

// What each feature's level gives, by the PTX ISA: max.NaN, the half pairs, cp.async and TF32/BF16 mma.sync from
// sm_80; clusters from sm_90; wgmma on sm_90 alone (an sm_90 GPU at level sm_90).
struct Expected {
  bool sm80, clusters, wgmma;
};

Expected expected_here(const DeviceInfo& device) {
  const int level = test::expected_level(device);
  return {level >= 80, level >= 90, level == 90 && device.sm() == 90};
}

std::string joined(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& s : items) out += (out.empty() ? "" : " ") + s;
  return out;
}

} // namespace

TEST_CASE("feature level: a plan's kernels are compiled for the GPU with exactly the level's feature options") {
  const DeviceInfo& device = *current_device();
  const int level = test::expected_level(device);
  const Expected want = expected_here(device);
  MESSAGE(device.name << " at " << device.arch_and_level() << ": " << feature_names(device.features.bits));
  CHECK(device.features.sm == level);
  CHECK(device.arch_and_level() == (level == device.sm() ? device.arch() : device.arch() + "@" + sm_name(level)));
  // max_plus f32 (max.NaN) and f16 (the half pairs): the kernels whose code a level changes.
  for (DType dtype : {DType::f32, DType::f16}) {
    Problem p;
    p.semiring = Semiring::max_plus;
    p.dtype = dtype;
    p.shape = {2, 33, 65, 47};
    const SemiringBMM plan = SemiringBMM::get(p);
    const long compiles = stats().nvrtc_compiles;
    // Loaded kernels are kept per (context, spec): this is the plan's own, compiled (or read from the disk cache,
    // keyed by the same options) when the plan was made.
    const std::shared_ptr<const LoadedKernel> kernel = load_kernel(device, plan.spec());
    CHECK(stats().nvrtc_compiles == compiles);
    const std::vector<std::string>& options = kernel->compiled.options;
    CAPTURE(joined(options));
    const auto has = [&](const std::string& option) { return std::count(options.begin(), options.end(), option) == 1; };
    const auto flag = [](bool on) { return std::string(on ? "1" : "0"); };
    CHECK(has("--gpu-architecture=" + device.arch())); // compiled for the GPU at hand, whatever the level
    CHECK(has("-DJB_HAS_NAN_MINMAX=" + flag(want.sm80)));
    CHECK(has("-DJB_HAS_HALF_PAIRS=" + flag(want.sm80)));
    CHECK(has("-DJB_HAS_ASYNC_COPY=" + flag(want.sm80)));
    CHECK(has("-DJB_HAS_MMA_TF32_BF16=" + flag(want.sm80)));
    CHECK(has("-DJB_HAS_CLUSTERS=" + flag(want.clusters)));
    CHECK(has("-DJB_HAS_BULK_COPY=" + flag(want.clusters)));
    CHECK(has("-DJB_HAS_WGMMA=" + flag(want.wgmma)));
    // Every macro of the table once, and nothing else defined.
    CHECK(std::count_if(options.begin(), options.end(), [](const std::string& o) { return o.rfind("-D", 0) == 0; }) ==
          static_cast<long>(feature_table().size()));
  }
}

TEST_CASE("feature level: the tuner offers only the level's variants; a spec that needs more is refused, naming it") {
  const DeviceInfo& device = *current_device();
  const Expected want = expected_here(device);
  // The packed half kernel's 128 × 128 tile at 3 blocks an SM: without half pairs it is the f32 kernel, whose
  // registers do not fit those blocks (templates/tiled/packed.cuh).
  const auto packed_wide = [](const KernelSpec& s) {
    return s.strategy == Strategy::tiled && s.tile_m * s.tile_n == 128 * 128 && s.min_blocks >= 3;
  };
  Problem half;
  half.semiring = Semiring::max_plus, half.dtype = DType::f16;
  half.shape = {64, 512, 512, 512};
  bool packed = false;
  for (const KernelSpec& c : device_candidates(half, device)) {
    CAPTURE(to_string(c));
    CHECK(test::runs_here(c, device));
    packed = packed || packed_wide(c);
  }
  CHECK(packed == want.sm80);
  Problem p;
  p.shape = {64, 512, 512, 512}; // log f32: exp_matmul's mma.sync and wgmma forms are among its candidates
  for (Pass pass : {Pass::forward, Pass::grad_a, Pass::grad_b}) {
    CAPTURE(pass_name(pass));
    const std::vector<KernelSpec> candidates = device_candidates(p, device, pass);
    REQUIRE(!candidates.empty());
    bool mma = false, wgmma = false;
    for (const KernelSpec& c : candidates) {
      CAPTURE(to_string(c));
      CHECK(test::runs_here(c, device));
      if (c.strategy != Strategy::exp_matmul || c.math == Math::fma) continue;
      (uses_wgmma(c.math) ? wgmma : mma) = true;
    }
    CHECK(mma == want.sm80);
    CHECK(wgmma == want.wgmma);
  }

  // Specs named by the caller: planned where the level has what they need, refused naming it elsewhere.
  Problem q;
  q.shape = {2, 128, 64, 128};
  const KernelSpec tf32x3 = default_spec(q, Strategy::exp_matmul);
  REQUIRE(tf32x3.math == Math::tf32x3);
  KernelSpec wg = tf32x3; // as tests/variants.hpp's smallest wgmma form
  wg.math = Math::wgmma_tf32x3;
  wg.tile_m = wg.tile_n = 64, wg.tile_k = 32, wg.thread_m = 2, wg.thread_n = 16, wg.min_blocks = 1;
  if (want.sm80)
    CHECK_NOTHROW(SemiringBMM::get(q, tf32x3));
  else
    CHECK_THROWS_WITH_AS(SemiringBMM::get(q, tf32x3), doctest::Contains("TF32/BF16 mma"), std::invalid_argument);
  if (want.wgmma)
    CHECK_NOTHROW(SemiringBMM::get(q, wg));
  else
    CHECK_THROWS_WITH_AS(SemiringBMM::get(q, wg), doctest::Contains("wgmma"), std::invalid_argument);
  KernelSpec wide = default_spec(half, Strategy::tiled);
  wide.tile_m = wide.tile_n = 128, wide.tile_k = 16, wide.thread_m = wide.thread_n = 8, wide.min_blocks = 3;
  REQUIRE(packed_wide(wide));
  if (want.sm80)
    CHECK_NOTHROW(SemiringBMM::get(half, wide));
  else
    CHECK_THROWS_WITH_AS(SemiringBMM::get(half, wide), doctest::Contains("half pairs"), std::invalid_argument);
  ChainProblem chain;
  chain.B = 1, chain.T = 4, chain.C = 128;
  const ChainSpec clustered = clustered_chain_spec(chain, 2);
  if (want.clusters)
    CHECK_NOTHROW(chain_plan_for(chain, clustered));
  else
    CHECK_THROWS_WITH_AS(chain_plan_for(chain, clustered), doctest::Contains("clusters"), std::invalid_argument);
}

// Every semiring and dtype: f32 (max.NaN or its older equivalent), f16 and bf16 (the packed pairs or theirs, also in
// exp_matmul's prepare), every dtype's exp_matmul (cp.async or plain copies), through every variant the level runs:
// ±inf, NaN, huge values and −inf rows; the selecting semirings' argmax ties, with and without NaN; log's banded −inf
// masks and cancelling huge values (not in f16, whose range does not hold them).
TEST_CASE("feature level: every variant the level runs matches the reference on ±inf, NaN and ties") {
  const Shape shapes[] = {{2, 37, 70, 33}, {1, 130, 65, 67}};
  std::vector<test::Kind> log_inputs;
  for (test::Kind& k : test::adversarial_kinds())
    if (std::string(k.name) == "banded -inf" || std::string(k.name) == "huge, cancelling") log_inputs.push_back(k);
  REQUIRE(log_inputs.size() == 2);
  uint64_t seed = 61000;
  int cases = 0;
  for (const KernelSpec& kind : test::problem_kinds()) {
    const bool selecting = semiring_info(kind.semiring).has_argmax;
    const bool wide_log = kind.semiring == Semiring::log && kind.dtype != DType::f16;
    for (const KernelSpec& spec : test::runnable_here(test::strategies_for(kind)))
      for (const Shape& shape : shapes) {
        const Problem p = test::problem_for(spec, shape);
        CAPTURE(to_string(spec));
        std::mt19937_64 rng(++seed);
        test::CaseResult r = test::run_case(p, spec, rng, test::specials_for(p.semiring, 2));
        test::report_failure(r, p, spec, seed);
        CHECK(r.ok());
        if (selecting)
          for (bool with_nan : {false, true}) {
            r = test::run_tie_case(p, spec, rng, with_nan);
            test::report_failure(r, p, spec, seed);
            CHECK(r.ok());
            if (p.with_argmax && !with_nan) CHECK(r.ties >= shape.B * shape.N); // row 0: every term the zero
          }
        if (wide_log)
          for (const test::Kind& k : log_inputs) CHECK(test::kind_case_ok(spec, shape, k, ++seed));
        ++cases;
      }
  }
  MESSAGE(cases << " cases on " << current_device()->arch_and_level());
  CHECK(cases > 0);
}
