// Chain calls on the fake driver (test_with_fake_driver.cpp says how it runs), seen through the driver's log: what a
// call launches, and that a refused call launches nothing.
#include <doctest/doctest.h>

#include "tests/temp_dir.hpp"

#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "jitbmm/c_api.h"
#include "jitbmm/chain.hpp"
#include "runtime/chain_chunked.hpp"
#include "runtime/chain_plan.hpp"
#include "runtime/device.hpp"
#include "runtime/device_memory.hpp"
#include "runtime/tuner/policy.hpp"

using namespace jitbmm;

namespace {

// The kernels the fake driver's log says were launched ("launch <kernel> grid=... block=..."), in order.
std::vector<std::string> launches(const std::string& log) {
  std::ifstream in(log);
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) {
    std::istringstream words(line);
    std::string word, kernel;
    if (words >> word >> kernel && word == "launch") out.push_back(kernel);
  }
  return out;
}

// The driver's log in a directory of its own while it lives.
struct DriverLog {
  TempDir dir;
  std::string path = dir.path + "/driver.log";
  DriverLog() { ::setenv("JITBMM_FAKE_CUDA_LOG", path.c_str(), 1); }
  ~DriverLog() { ::unsetenv("JITBMM_FAKE_CUDA_LOG"); }
  std::vector<std::string> launched() const { return launches(path); }
};

void expect_workspace_refused(jitbmm_status status) {
  CHECK(status == JITBMM_INVALID_ARGUMENT);
  CHECK_MESSAGE(std::string(jitbmm_last_error()).rfind("workspace: ", 0) == 0, jitbmm_last_error());
}

jitbmm_chain_problem chain_problem(const char* form, int64_t B, int64_t T, int64_t C) {
  jitbmm_chain_problem p{};
  p.semiring = "log", p.dtype = "f32", p.form = form;
  p.B = B, p.T = T, p.C = C;
  return p;
}

} // namespace

// Every chain call checks its workspace with its other arguments, before its first launch: a refused call has
// written nothing. The sequential CRF backward takes no scratch, and still refuses a workspace no call could use.
TEST_CASE("a chain call given a bad workspace is refused, naming it, before it launches anything") {
  const DriverLog log;
  DeviceBuffer inputs(16 << 20), outputs(16 << 20), saved(16 << 20), work(16 << 20), grads(16 << 20);
  char* const misaligned = static_cast<char*>(work.get()) + 8;

  SUBCASE("the sequential CRF backward") {
    const jitbmm_chain_problem p = chain_problem("crf", 2, 5, 3);
    jitbmm_chain_plan* plan = nullptr;
    REQUIRE(jitbmm_chain_plan_create(&p, &plan) == JITBMM_OK);
    auto backward = [&](void* workspace, size_t bytes) {
      return jitbmm_chain_plan_backward_with_workspace(plan, inputs.get(), nullptr, saved.get(), nullptr, outputs.get(),
                                                       grads.get(), workspace, bytes, nullptr);
    };
    expect_workspace_refused(backward(nullptr, 256));
    expect_workspace_refused(backward(misaligned, 256));
    CHECK(log.launched().empty());
    CHECK(backward(work.get(), 256) == JITBMM_OK); // a workspace it does not need is fine
    CHECK(log.launched().size() == 1);
    jitbmm_chain_plan_destroy(plan);
  }
  SUBCASE("the HMM backward, whose first launch (the emissions' gradient) comes before its scratch is taken") {
    const jitbmm_chain_problem p = chain_problem("hmm", 2, 40, 4);
    jitbmm_chain_plan* plan = nullptr;
    REQUIRE(jitbmm_chain_plan_create(&p, &plan) == JITBMM_OK);
    size_t bytes = 0;
    REQUIRE(jitbmm_chain_plan_backward_workspace_bytes(plan, &bytes) == JITBMM_OK);
    REQUIRE(bytes > 0); // the transitions' partial sums
    auto backward = [&](void* workspace, size_t given) {
      char* g = static_cast<char*>(grads.get());
      return jitbmm_chain_plan_backward_hmm(plan, inputs.get(), inputs.get(), inputs.get(), nullptr, saved.get(),
                                            nullptr, outputs.get(), g, g + (1 << 20), g + (2 << 20), workspace, given,
                                            nullptr);
    };
    expect_workspace_refused(backward(misaligned, bytes));
    expect_workspace_refused(backward(work.get(), bytes - 1));
    expect_workspace_refused(backward(nullptr, bytes));
    CHECK(log.launched().empty());
    CHECK(backward(work.get(), bytes) == JITBMM_OK);
    CHECK_FALSE(log.launched().empty());
    jitbmm_chain_plan_destroy(plan);
  }
  SUBCASE("the chunked forward with alpha, which the sequential forward computes before the chunks") {
    const jitbmm_chain_problem p = chain_problem("crf", 1, 1024, 32); // chunks of 64 steps (default_chain_chunk)
    jitbmm_chain_plan* plan = nullptr;
    REQUIRE(jitbmm_chain_plan_create(&p, &plan) == JITBMM_OK);
    size_t bytes = 0;
    REQUIRE(jitbmm_chain_plan_workspace_bytes(plan, 0, &bytes) == JITBMM_OK);
    REQUIRE(bytes > 0); // the tree's levels: the chunked strategy
    REQUIRE(bytes <= work.size());
    auto forward = [&](void* workspace, size_t given) {
      return jitbmm_chain_plan_run(plan, inputs.get(), nullptr, outputs.get(), nullptr, saved.get(), nullptr, workspace,
                                   given, nullptr);
    };
    expect_workspace_refused(forward(work.get(), bytes - 1));
    expect_workspace_refused(forward(misaligned, bytes));
    CHECK(log.launched().empty());
    jitbmm_chain_plan_destroy(plan);
  }
}

// A chain plan tunes nothing, whatever the policy: under bucket a chunked chain's first forward and backward take
// their products' stored decisions or the default variants, so they launch exactly the kernels they launch under
// never. A tuning would time its candidates first (on the fake driver each then fails the check against the CPU
// reference, with a warning): other kernels in the driver's log.
TEST_CASE("a chunked chain's first calls tune none of its products, under any policy") {
  ChainProblem p;
  p.B = 1, p.T = 1024, p.C = 32;
  const std::size_t potentials = std::size_t(p.B * (p.T - 1) * p.C * p.C) * 4;
  DeviceBuffer pot(potentials), grad(potentials), score(4), g(4);
  auto first_calls = [&](TunePolicy policy) {
    set_tune_policy(policy);
    const DriverLog log;
    const ChainPlan plan = ChainPlan::get(p); // a plan of its own: its products are planned on its first call
    REQUIRE(plan.chunk() == 64);
    DeviceBuffer saved(plan.saved_bytes());
    plan(pot.get(), nullptr, score.get(), saved.get());
    plan.backward(pot.get(), nullptr, saved.get(), nullptr, g.get(), grad.get());
    const std::vector<std::string> launched = log.launched();
    return std::set<std::string>(launched.begin(), launched.end());
  };
  const std::set<std::string> never = first_calls(TunePolicy::never);
  const std::set<std::string> bucket = first_calls(TunePolicy::bucket);
  set_tune_policy(TunePolicy::never);
  CHECK(!never.empty());
  CHECK(bucket == never);
}

// The chunked strategy runs the chain plan its caller made of its chain of chunks, at fixed places in `saved` and
// with no scratch of that plan's own counted: a plan of another chain, or one that itself runs in chunks, is refused.
TEST_CASE("a chunked chain takes the plan of its own chain of chunks, in the sequential kernels, and no other") {
  ChainProblem p;
  p.B = 1, p.T = 8193, p.C = 16;
  const auto device = current_device();
  const ChainProblem top = chain_of_chunks(p, 16);
  CHECK(top.B == 1);
  CHECK(top.T == 513);
  CHECK(top.C == 16);
  CHECK(ChunkedChain(p, 16, chain_plan_for(top, chosen_chain_spec(top, *device)), device).chunk() == 16);
  ChainProblem shorter = top;
  shorter.T = 512;
  CHECK_THROWS_WITH_AS(ChunkedChain(p, 16, chain_plan_for(shorter, chosen_chain_spec(shorter, *device)), device),
                       doctest::Contains("chain of chunks"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(ChunkedChain(p, 16, chain_plan_for(top, chosen_chain_spec(top, *device), 16), device),
                       doctest::Contains("chain of chunks"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(chain_of_chunks(p, 3), doctest::Contains("chunk: must be a power of two"),
                       std::invalid_argument);
}
