// Compile-only: the chain modules for every semiring and dtype they serve, at the state counts the tests use, build
// for sm_90 without spills in either entry. No GPU needed.
#include <doctest/doctest.h>

#include <string>

#include "jitbmm/types.hpp"

#include "generator/chain_source.hpp"
#include "runtime/nvrtc_compiler.hpp"

using namespace jitbmm;

TEST_CASE("every chain module compiles for sm_90 without spills") {
  for (Semiring semiring : {Semiring::log, Semiring::max_plus})
    for (DType dtype : {DType::f32, DType::f64})
      for (int64_t C : {1, 2, 31, 33, 64, 128, 129, 256, 257, 1024}) {
        ChainProblem problem;
        problem.semiring = semiring;
        problem.dtype = dtype;
        problem.B = 3;
        problem.T = 5;
        problem.C = C;
        const ChainSpec spec = default_chain_spec(problem);
        CAPTURE(to_string(spec));
        const GeneratedKernel k = emit_chain_kernel(spec);
        CompiledKernel c;
        REQUIRE_NOTHROW(c = compile_to_cubin(k, "sm_90", PtxasReport::wanted));
        for (const std::string& entry : k.entries) {
          CAPTURE(entry);
          const PtxasResources r = parse_ptxas_log(c.log, k.name + entry);
          CHECK(r.registers > 0);
          CHECK(r.spill_store_bytes == 0);
          CHECK(r.spill_load_bytes == 0);
        }
      }
}
