// Compile-only: the older architectures' code paths are what their feature level compiles. Kernels compiled for
// sm_90 with sm_75's features (what JITBMM_FEATURES=sm_75 runs on a Hopper GPU, and what a Turing GPU runs) hold no
// instruction newer than sm_75, while the same kernels with sm_90's own features do use them: the JB_HAS_* options
// reach the device code, and the templates' older equivalents are the ones compiled.
#include <doctest/doctest.h>

#include <future>
#include <string>
#include <vector>

#include "generator/arch_features.hpp"
#include "generator/chain_source.hpp"
#include "runtime/nvrtc_compiler.hpp"

using namespace jitbmm;

namespace {

// The PTX instructions of sm_80 and later that the templates have older equivalents for or that need a feature.
const std::vector<std::string> kNewer = {"max.NaN", "min.NaN", "cp.async", "fma.rn.bf16x2", "cvt.rn.bf16",
                                         "min.f16x2", "min.bf16x2", "mma.sync", "wgmma", "cluster"};

std::vector<std::string> newer_in(const std::string& ptx) {
  std::vector<std::string> found;
  for (const std::string& instr : kNewer)
    if (ptx.find(instr) != std::string::npos) found.push_back(instr);
  return found;
}

Problem problem(Semiring s, DType d, bool argmax = false) {
  Problem p;
  p.semiring = s, p.dtype = d, p.shape = {64, 512, 512, 512}, p.with_argmax = argmax;
  return p;
}

} // namespace

TEST_CASE("at feature level sm_75 the default kernels hold no instruction newer than sm_75; natively they do") {
  std::vector<GeneratedKernel> kernels;
  for (Semiring s : {Semiring::log, Semiring::max_plus, Semiring::min_plus, Semiring::max_times})
    for (DType d : {DType::f32, DType::f16, DType::bf16})
      kernels.push_back(emit_kernel(default_spec(problem(s, d))));
  kernels.push_back(emit_kernel(default_spec(problem(Semiring::max_plus, DType::bf16, true))));
  kernels.push_back(emit_kernel(default_grad_spec(problem(Semiring::log, DType::bf16), Pass::grad_a)));
  ChainProblem chain;
  chain.dtype = DType::bf16, chain.B = 4, chain.T = 16, chain.C = 64;
  for (GeneratedKernel& unit : emit_chain_units(default_chain_spec(chain))) kernels.push_back(std::move(unit));
  // Both compiles of every kernel side by side (NVRTC is thread-safe), then the checks.
  std::vector<std::future<std::string>> old_paths, native;
  for (const GeneratedKernel& k : kernels) {
    old_paths.push_back(std::async(std::launch::async, [&k] {
      return compile_to_ptx(k, "compute_90", arch_features(75)).binary;
    }));
    native.push_back(std::async(std::launch::async, [&k] { return compile_to_ptx(k, "compute_90").binary; }));
  }
  int native_newer = 0;
  for (std::size_t i = 0; i < kernels.size(); ++i) {
    CAPTURE(kernels[i].name);
    const std::vector<std::string> newer = newer_in(old_paths[i].get());
    CHECK(newer.empty());
    for (const std::string& instr : newer) MESSAGE("sm_75 features, yet " << instr);
    native_newer += !newer_in(native[i].get()).empty();
  }
  // The same sources with sm_90's features use max.NaN, the half pairs or cp.async: the options made the difference.
  CHECK(native_newer >= int(kernels.size()) / 2);
}

TEST_CASE("a spec that needs a feature the level lacks is refused by name before NVRTC runs") {
  KernelSpec tf32 = default_spec(problem(Semiring::log, DType::f32), Strategy::exp_matmul);
  REQUIRE(tf32.math == Math::tf32x3);
  const GeneratedKernel k = emit_kernel(tf32);
  CHECK_NOTHROW(compile_to_ptx(k, "compute_80"));
  for (const char* arch : {"compute_75", "sm_75"}) {
    CAPTURE(arch);
    try {
      compile_to_ptx(k, arch);
      FAIL("compiled");
    } catch (const std::invalid_argument& e) {
      CHECK(std::string(e.what()).find("TF32/BF16 mma (sm_80 and later)") != std::string::npos);
    }
  }
  try {
    compile_to_cubin(k, "sm_90", arch_features(75));
    FAIL("compiled");
  } catch (const std::invalid_argument& e) {
    CHECK(std::string(e.what()).find("feature level sm_75 on sm_90") != std::string::npos);
  }
}
