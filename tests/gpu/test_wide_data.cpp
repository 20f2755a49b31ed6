// The log semiring's direct tiled kernels on wide-range data: tiled_online, whose scale follows each
// output's own terms, and tiled, whose separable shift sends outputs to recomputation, against the CPU reference on
// every adversarial and wide input kind, odd shapes included. Every output is checked (poisoned first).
#include <doctest/doctest.h>

#include <vector>

#include "adversarial.hpp"
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
        for (const test::Kind& k : test::log_kinds()) {
          CHECK(test::kind_case_ok(spec, shape, k, ++seed));
          ++cases;
        }
  }
  MESSAGE(cases << " cases");
}
