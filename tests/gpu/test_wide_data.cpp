// The log semiring's direct tiled kernels on wide-range data (issue 20): tiled_online, whose scale follows each
// output's own terms, and tiled, whose separable shift sends outputs to recomputation, against the CPU reference on
// every adversarial and wide input kind, odd shapes included. Every output is checked (poisoned first).
#include <doctest/doctest.h>

#include <cstdio>
#include <vector>

#include "adversarial.hpp"
#include "differential.hpp"
#include "variants.hpp"

using namespace jitbmm;

TEST_CASE("tiled_online and tiled are exact on adversarial and wide-range inputs, odd shapes included") {
  const Shape shapes[] = {{2, 70, 130, 90}, {1, 96, 600, 136}, {2, 33, 700, 40}, {1, 5, 1, 7}};
  uint64_t seed = 33000;
  int cases = 0;
  for (const KernelSpec& kind : test::problem_kinds()) {
    if (kind.semiring != Semiring::log || kind.dtype == DType::f64) continue;
    std::vector<KernelSpec> specs = test::tiled_online_variants(kind);
    KernelSpec tiled = kind;
    tiled.strategy = Strategy::tiled;
    tiled.tile_m = 128, tiled.tile_n = 64, tiled.tile_k = 16, tiled.thread_m = 8, tiled.thread_n = 4;
    tiled.min_blocks = 2;
    specs.push_back(tiled);
    for (const KernelSpec& spec : specs)
      for (const Shape& shape : shapes)
        for (const test::Kind& k : test::forward_kinds()) {
          const Problem p = test::problem_for(spec, shape);
          std::mt19937_64 rng(++seed);
          const test::HostTensor a = test::fill(p, true, k, rng), b = test::fill(p, false, k, rng);
          const test::CaseResult r = test::run_case_on(p, spec, a, b);
          if (!r.ok()) std::printf("inputs: %s\n", k.name);
          test::report_failure(r, p, spec, seed);
          CHECK(r.ok());
          ++cases;
        }
  }
  MESSAGE(cases << " cases");
}
