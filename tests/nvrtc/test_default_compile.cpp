// Compile-only: the default variant of every problem (what a plan runs before any tuning, and the one kind of variant
// every architecture must have) compiles for every supported architecture (archs.hpp) without spills: each semiring,
// dtype and output dtype, with argmax and without, forward and both backward passes, at a few shapes that reach
// different strategies. Each distinct source is compiled once per architecture: all of them with
// JITBMM_NVRTC_SWEEP=full, else the subset sweep.hpp chooses (every strategy with its pass and every dtype on every
// architecture, every semiring, output dtype and template somewhere). No GPU needed.
#include <doctest/doctest.h>

#include <map>
#include <string>
#include <vector>

#include "generator/emit_source.hpp"
#include "nvrtc/archs.hpp"
#include "nvrtc/compile_pool.hpp"
#include "nvrtc/spec_features.hpp"
#include "variants.hpp"

using namespace jitbmm;

namespace {

// The spills a default may have on sm_90: tiled_refine's 64 × 64 tiles at 3 blocks an SM spill 4 bytes outside their
// k loop, and were timed the faster for it (generator/strategies/tiled_refine.cpp).
int kernel_spill_bytes(const KernelSpec& spec) {
  return spec.strategy == Strategy::tiled_refine && spec.min_blocks == 3 ? 4 : 0;
}

} // namespace

TEST_CASE("the default variant of every problem, forward and backward, compiles for every supported architecture "
          "without spills") {
  const test::TestArchs archs = test::test_archs();
  CHECK_MESSAGE(archs.missing.empty(), "NVRTC " << nvrtc_version() << " cannot target " << test::sm_names(archs.missing));
  if (!archs.note.empty()) MESSAGE(archs.note);
  // Small (linear), long K (split_k or warp), large (tiled), one k and odd sizes, and the products of the chunked
  // chains (32 to 64 states).
  const std::vector<Shape> shapes = {{2, 3, 4, 5}, {2, 4, 4000, 3}, {64, 512, 512, 512}, {3, 33, 1, 47}, {16, 64, 64, 64}};
  std::map<std::string, KernelSpec> by_source;
  std::map<std::string, std::string> problem_of; // a problem each source serves, for the failure messages
  for (const KernelSpec& kind : test::problem_kinds())
    for (const Shape& shape : shapes)
      for (Precision precision : {Precision::exact, Precision::fast}) {
        if (precision == Precision::fast && kind.semiring != Semiring::log) continue;
        Problem p;
        p.semiring = kind.semiring, p.dtype = kind.dtype, p.out_dtype = kind.out_dtype;
        p.with_argmax = kind.with_argmax, p.precision = precision, p.shape = shape;
        std::vector<KernelSpec> specs = {default_spec(p)};
        if (!p.with_argmax)
          for (Pass pass : {Pass::grad_a, Pass::grad_b}) specs.push_back(default_grad_spec(p, pass));
        for (const KernelSpec& spec : specs) {
          const std::string source = emit_kernel(spec).source;
          problem_of.emplace(source, describe(p) + " " + to_string(spec));
          by_source.emplace(source, spec);
        }
      }
  std::vector<test::SweepItem> items;
  for (const auto& [source, spec] : by_source) {
    const std::vector<std::string> features = test::variant_features(spec);
    for (int sm : archs.sms) {
      // The templates on every architecture are the product sweep's (test_compile.cpp): here each strategy and dtype.
      items.push_back(test::on_arch(features, sm_name(sm), {"strategy+pass=", "dtype="}, test::feature_kind(sm, archs.sms)));
      items.back().cost = test::variant_cost(spec);
    }
  }
  test::SweepPlan plan = test::sweep_plan_from_env();
  plan.sample_share /= 4; // of five architectures' defaults: about as many drawn as for one
  const test::SweepChoice choice = test::select_sweep(items, plan);
  MESSAGE(test::describe(choice, plan, items.size(), "default kernels on each architecture"));
  std::vector<std::pair<GeneratedKernel, int>> jobs;
  for (std::size_t i : choice.chosen) {
    const KernelSpec& spec = std::next(by_source.begin(), i / archs.sms.size())->second;
    jobs.emplace_back(emit_kernel(spec), archs.sms[i % archs.sms.size()]);
  }
  const std::vector<test::ArchCompile> done = test::compile_on_archs(jobs, "jitbmm_test_nvrtc defaults");
  for (const test::ArchCompile& c : done) {
    CAPTURE(problem_of.at(c.kernel->source));
    CAPTURE(sm_name(c.sm));
    CHECK_MESSAGE(c.error.empty(), c.error);
    for (const std::string& entry : c.kernel->entries) {
      CAPTURE(entry);
      const PtxasResources r = parse_ptxas_log(c.log, c.kernel->name + entry);
      const KernelSpec& spec = by_source.at(c.kernel->source);
      const int allowed =
          kernel_spill_bytes(spec) + test::older_arch_spill_bytes(c.sm) + test::argmax_tile_spill_bytes(spec, c.sm);
      CHECK(r.registers > 0);
      CHECK(r.spill_store_bytes <= allowed);
      CHECK(r.spill_load_bytes <= allowed);
    }
  }
}
