// Compile-only: quick builds (runtime/jit.hpp: QuickBuild), the kernels a chain plan's stand-in runs while its
// optimised ones are built. They take NVRTC's --Ofast-compile where NVRTC has it, and every kernel a stand-in loads
// (the sequential kernels' units, the stepped strategy's step module, its products' smallest tile) compiles that
// way for the oldest (f32) and the newest architecture (f32 and bf16) with registers and without spills. No GPU
// needed.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "generator/arch_features.hpp"
#include "generator/chain_source.hpp"
#include "generator/emit_source.hpp"
#include "generator/step_source.hpp"
#include "jitbmm/types.hpp"
#include "nvrtc/compile_pool.hpp"
#include "runtime/nvrtc_compiler.hpp"
#include "runtime/product_stand_in.hpp"

using namespace jitbmm;

namespace {

bool has_option(const std::vector<std::string>& options, const std::string& option) {
  return std::find(options.begin(), options.end(), option) != options.end();
}

GeneratedKernel quick(GeneratedKernel kernel) {
  kernel.quick = true;
  return kernel;
}

} // namespace

TEST_CASE("a quick build adds NVRTC's --Ofast-compile where NVRTC takes it, and nothing else") {
  const ArchFeatures features = arch_features(90);
  std::vector<std::string> plain = compile_options("sm_90", features),
                           fast = compile_options("sm_90", features, true);
  MESSAGE("NVRTC " << nvrtc_version() << std::string(nvrtc_compiles_fast() ? " takes" : " does not take")
                    << " --Ofast-compile");
  if (std::stoi(nvrtc_version()) >= 13) CHECK(nvrtc_compiles_fast()); // 13.0 has it
  CHECK(has_option(fast, "--Ofast-compile=mid") == nvrtc_compiles_fast());
  fast.erase(std::remove(fast.begin(), fast.end(), "--Ofast-compile=mid"), fast.end());
  CHECK(fast == plain);
  // The quick build's cubin comes from those options.
  ChainProblem p;
  p.B = 2, p.T = 8, p.C = 33;
  const CompiledKernel built = compile_to_cubin(quick(emit_chain_kernel(default_chain_spec(p))), "sm_90");
  CHECK(has_option(built.options, "--Ofast-compile=mid") == nvrtc_compiles_fast());
  CHECK_FALSE(built.binary.empty());
}

TEST_CASE("a stand-in's kernels compile as quick builds for the oldest and the newest architecture without spills") {
  test::NoSpills spills("quick builds");
  for (int sm : {75, 90}) {
    // The sequential kernels' units (a chunked plan's stand-in too), up to the most states they take.
    for (ChainForm form : {ChainForm::crf, ChainForm::hmm})
      for (Semiring semiring : {Semiring::log, Semiring::max_plus})
        for (DType dtype : {DType::f32, DType::bf16})
          for (int64_t C : {33, 128, 1024}) {
            if (sm == 75 && dtype != DType::f32) continue; // the floor's code paths: f32's loads suffice
            ChainProblem p;
            p.form = form, p.semiring = semiring, p.dtype = dtype, p.B = 4, p.T = 64, p.C = C;
            for (GeneratedKernel& unit : emit_chain_units(default_chain_spec(p))) spills.add(quick(unit), sm);
          }
    // The stepped strategy's step module, and its products in their smallest tile: a wide batch's messages times a
    // shared table, with the argmax for max_plus, and the transitions' gradient's product.
    for (ChainForm form : {ChainForm::crf, ChainForm::hmm})
      for (Semiring semiring : {Semiring::log, Semiring::max_plus})
        for (DType dtype : {DType::f32, DType::bf16})
          for (bool backward : {false, true})
            if (sm == 90 || dtype == DType::f32)
              spills.add(quick(emit_step_kernel(semiring, dtype, form, backward)), sm);
    for (Semiring semiring : {Semiring::log, Semiring::max_plus}) {
      Problem step;
      step.semiring = semiring, step.with_argmax = semiring == Semiring::max_plus;
      step.shape = Shape{1, 512, 512, 512};
      spills.add(quick(emit_kernel(quick_product_spec(step))), sm);
    }
    Problem edges;
    edges.shape = Shape{1, 512, 512 * 32, 512};
    edges.a_strides = Strides{512 * 512 * 32, 1, 512};
    spills.add(quick(emit_kernel(quick_product_spec(edges))), sm);
  }
  spills.check();
}
