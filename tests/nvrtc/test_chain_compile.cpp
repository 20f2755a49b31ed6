// Compile-only: the chain modules for every semiring, dtype and input form they serve, at state counts that reach
// each shape of the kernels (one lane per state, groups of lanes, the next step's potentials in registers or not,
// more states than threads, a cluster of blocks per sequence), build for sm_90 without spills in any entry. No GPU
// needed.
#include <doctest/doctest.h>

#include <algorithm>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "generator/chain_source.hpp"
#include "jitbmm/types.hpp"
#include "runtime/nvrtc_compiler.hpp"

using namespace jitbmm;

TEST_CASE("every chain module compiles for sm_90 without spills") {
  std::vector<ChainSpec> specs;
  for (ChainForm form : {ChainForm::crf, ChainForm::hmm})
    for (Semiring semiring : {Semiring::log, Semiring::max_plus})
      for (DType dtype : {DType::f32, DType::f64})
        for (int64_t C : {1, 2, 33, 64, 128, 129, 256, 257, 1024}) {
          ChainProblem problem;
          problem.form = form;
          problem.semiring = semiring;
          problem.dtype = dtype;
          problem.B = 3;
          problem.T = 5;
          problem.C = C;
          specs.push_back(default_chain_spec(problem));
          // Each sequence over a cluster of blocks (sm_90), where a block keeps one state, a few, or many.
          if (C == 33 || C == 128 || C == 1024)
            for (int cluster : {2, 8})
              if (const ChainSpec s = clustered_chain_spec(problem, cluster); s.registers_fit()) specs.push_back(s);
        }
  // NVRTC is thread-safe: compile on every core, check on this thread.
  std::vector<std::future<std::pair<GeneratedKernel, std::string>>> logs;
  const std::size_t workers = std::max(2u, std::thread::hardware_concurrency());
  std::vector<std::pair<GeneratedKernel, std::string>> done;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    logs.push_back(std::async(std::launch::async, [spec = specs[i]] {
      const GeneratedKernel k = emit_chain_kernel(spec);
      return std::make_pair(k, compile_to_cubin(k, "sm_90", PtxasReport::wanted).log);
    }));
    if (logs.size() == workers || i + 1 == specs.size()) {
      for (auto& f : logs) {
        REQUIRE_NOTHROW(done.push_back(f.get()));
      }
      logs.clear();
    }
  }
  for (std::size_t i = 0; i < done.size(); ++i) {
    CAPTURE(to_string(specs[i]));
    const auto& [k, log] = done[i];
    for (const std::string& entry : k.entries) {
      CAPTURE(entry);
      const PtxasResources r = parse_ptxas_log(log, k.name + entry);
      CHECK(r.registers > 0);
      CHECK(r.spill_store_bytes == 0);
      CHECK(r.spill_load_bytes == 0);
    }
  }
}
