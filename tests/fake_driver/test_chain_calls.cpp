// Chain calls on the fake driver (test_with_fake_driver.cpp says how it runs), seen through the driver's log: what a
// call launches, and that a refused call launches nothing.
#include <doctest/doctest.h>

#include "tests/fake_driver/driver_log.hpp"
#include "tests/temp_dir.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cache/disk_cache.hpp"
#include "runtime/autotune.hpp"
#include "runtime/tuner/tuning_db.hpp"
#include "jitbmm/c_api.h"
#include "jitbmm/chain.hpp"
#include "jitbmm/chain_expectation.hpp"
#include "jitbmm/chain_kbest.hpp"
#include "jitbmm/entropy_product.hpp"
#include "jitbmm/kmax_product.hpp"
#include "jitbmm/chain_samples.hpp"
#include "jitbmm/reference.hpp"
#include "runtime/chain_chunked.hpp"
#include "runtime/chain_plan.hpp"
#include "runtime/chain_sequential.hpp"
#include "runtime/chain_stepped.hpp"
#include "runtime/device.hpp"
#include "runtime/device_memory.hpp"
#include "runtime/driver_api.hpp"
#include "runtime/tuner/chain_trials.hpp"
#include "runtime/tuner/policy.hpp"

using namespace jitbmm;
using test::DriverLog;

namespace {

// A kernel's name without its source's hash ("_" and 8 hex digits): the unit, and the entry point of a launch.
std::string without_hash(const std::string& name) {
  static const std::regex hash("_[0-9a-f]{8}(?=_|$)");
  return std::regex_replace(name, hash, "");
}

// An HMM's shared table [C][C], emissions [B][T][C] and initial table [C] in one f32 buffer: the inputs, or the
// gradients.
struct SharedHmmTables {
  DeviceBuffer bytes;
  std::size_t table, emissions;
  explicit SharedHmmTables(const ChainProblem& p)
      : bytes(std::size_t(p.C) * std::size_t(p.C) * 4 + std::size_t(p.B * p.T * p.C) * 4 + 4 * std::size_t(p.C)),
        table(std::size_t(p.C) * std::size_t(p.C) * 4), emissions(std::size_t(p.B * p.T * p.C) * 4) {}
  char* at(std::size_t offset) const { return static_cast<char*>(bytes.get()) + offset; }
  HmmInputs inputs() const { return HmmInputs{at(table), at(0), at(table + emissions)}; }
  HmmGradients gradients() const { return HmmGradients{at(table), at(0), at(table + emissions)}; }
};

// A forward of `plan` saving its messages, into outputs and a workspace of its own.
struct SavingForward {
  DeviceBuffer score, saved, work;
  explicit SavingForward(const ChainPlan& plan)
      : score(4 * std::size_t(plan.problem().B)), saved(plan.saved_bytes()), work(plan.workspace_bytes(false)) {}
  void operator()(const ChainPlan& plan, const HmmInputs& in) const {
    plan(in, nullptr, score.get(), saved.get(), nullptr, nullptr, nullptr,
         Workspace{work.get(), plan.workspace_bytes(false)});
  }
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

// The C ABI names the strategy the plan runs, ChainPlan::strategy()'s, by the rule where no decision is stored (T = 64:
// buckets no test of this process stores a decision for): the sequential kernels for few sequences of few states,
// the chunked strategy for one long sequence, the stepped one for an HMM's table shared by many sequences of many
// states and for any chain beyond the sequential kernels' 1024 states.
TEST_CASE("jitbmm_chain_plan_strategy names the plan's strategy; a null argument is refused, naming it") {
  struct Case {
    jitbmm_chain_problem p;
    const char* strategy;
  };
  jitbmm_chain_problem batched = chain_problem("hmm", 512, 64, 128); // stepped with its table shared
  batched.batched_transitions = 1;
  jitbmm_chain_problem viterbi = chain_problem("hmm", 1, 4096, 64);
  viterbi.semiring = "max_plus";
  const Case cases[] = {{chain_problem("crf", 2, 5, 3), "sequential"},
                        {chain_problem("hmm", 8, 64, 128), "sequential"},
                        {batched, "sequential"},
                        {chain_problem("crf", 1, 1024, 32), "chunked"},
                        {viterbi, "chunked"},
                        {chain_problem("hmm", 512, 64, 512), "stepped"},
                        {chain_problem("hmm", 2, 64, 2048), "stepped"},
                        {chain_problem("crf", 2, 64, 2048), "stepped"}};
  for (const Case& k : cases) {
    INFO(k.p.form << " B=" << k.p.B << " T=" << k.p.T << " C=" << k.p.C << (k.p.batched_transitions ? " batched" : ""));
    jitbmm_chain_plan* plan = nullptr;
    REQUIRE(jitbmm_chain_plan_create(&k.p, &plan) == JITBMM_OK);
    const char* strategy = nullptr;
    CHECK(jitbmm_chain_plan_strategy(plan, &strategy) == JITBMM_OK);
    CHECK(std::string(strategy) == k.strategy);
    CHECK(jitbmm_chain_plan_strategy(plan, nullptr) == JITBMM_INVALID_ARGUMENT);
    CHECK(std::string(jitbmm_last_error()).rfind("strategy: ", 0) == 0);
    jitbmm_chain_plan_destroy(plan);
  }
  const char* strategy = nullptr;
  CHECK(jitbmm_chain_plan_strategy(nullptr, &strategy) == JITBMM_INVALID_ARGUMENT);
  CHECK(std::string(jitbmm_last_error()).rfind("plan: ", 0) == 0);
  CHECK(strategy == nullptr);
}

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

// `saved` needs the alignment of its widest load, 16 bytes, not a workspace's 256: XLA aligns a buffer to as little as
// that. Less is refused, naming it, before anything is launched, in the forward and the backward of every form.
TEST_CASE("a log chain's saved at 16 bytes past an aligned start runs; at 8 it is refused, naming saved") {
  DeviceBuffer inputs(16 << 20), outputs(16 << 20), saved(16 << 20), work(16 << 20), grads(16 << 20);
  char* const base = static_cast<char*>(saved.get());
  auto expect_saved_refused = [](jitbmm_status status) {
    CHECK(status == JITBMM_INVALID_ARGUMENT);
    CHECK_MESSAGE(std::string(jitbmm_last_error()).rfind("saved: ", 0) == 0, jitbmm_last_error());
  };
  for (const char* form : {"crf", "hmm"})
    for (const int64_t T : {5, 1024}) { // the sequential kernels, and for the CRF the chunked strategy
      CAPTURE(form);
      CAPTURE(T);
      const jitbmm_chain_problem p = chain_problem(form, 1, T, form[0] == 'c' && T > 5 ? 32 : 4);
      jitbmm_chain_plan* plan = nullptr;
      REQUIRE(jitbmm_chain_plan_create(&p, &plan) == JITBMM_OK);
      size_t forward_bytes = 0, backward_bytes = 0, saved_bytes = 0;
      REQUIRE(jitbmm_chain_plan_workspace_bytes(plan, 0, &forward_bytes) == JITBMM_OK);
      REQUIRE(jitbmm_chain_plan_backward_workspace_bytes(plan, &backward_bytes) == JITBMM_OK);
      REQUIRE(jitbmm_chain_plan_saved_bytes(plan, &saved_bytes) == JITBMM_OK);
      REQUIRE(std::max({forward_bytes, backward_bytes, saved_bytes + 16}) <= work.size());
      const bool hmm = form[0] == 'h';
      char* in = static_cast<char*>(inputs.get());
      char* g = static_cast<char*>(grads.get());
      auto forward = [&](char* at) {
        return hmm ? jitbmm_chain_plan_run_hmm(plan, in, in + (4 << 20), in + (8 << 20), nullptr, outputs.get(), at,
                                               nullptr, nullptr, work.get(), forward_bytes, nullptr)
                   : jitbmm_chain_plan_run(plan, in, nullptr, outputs.get(), at, nullptr, nullptr, work.get(),
                                           forward_bytes, nullptr);
      };
      auto backward = [&](char* at) {
        return hmm ? jitbmm_chain_plan_backward_hmm(plan, in, in + (4 << 20), in + (8 << 20), nullptr, at, nullptr,
                                                    outputs.get(), g, g + (4 << 20), g + (8 << 20), work.get(),
                                                    backward_bytes, nullptr)
                   : jitbmm_chain_plan_backward_with_workspace(plan, in, nullptr, at, nullptr, outputs.get(), g,
                                                               work.get(), backward_bytes, nullptr);
      };
      {
        const DriverLog log;
        expect_saved_refused(forward(base + 8));
        expect_saved_refused(backward(base + 8));
        CHECK(log.launched().empty());
      }
      const DriverLog log;
      CHECK_MESSAGE(forward(base + 16) == JITBMM_OK, jitbmm_last_error());
      CHECK_MESSAGE(backward(base + 16) == JITBMM_OK, jitbmm_last_error());
      CHECK_FALSE(log.launched().empty());
      jitbmm_chain_plan_destroy(plan);
    }
}

// The best path in chunks (max_plus, either form): its forward checks the scratch the path takes before its first
// launch, then runs the chunk module's tree, the chain of chunks, every chunk's steps again and, with a path, the two
// walks back; its backward reads the path, as the sequential kernels' does, and takes no scratch of the chunks.
TEST_CASE("a chunked best path checks its workspace before launching, then runs its chain, its chunks and its walks") {
  for (ChainForm form : {ChainForm::crf, ChainForm::hmm}) {
    CAPTURE(int(form));
    ChainProblem p;
    p.semiring = Semiring::max_plus, p.form = form, p.B = 1, p.T = 4096, p.C = 32;
    const ChainPlan plan = ChainPlan::get(p);
    REQUIRE(std::string(plan.strategy()) == "chunked");
    CHECK(plan.chunk() == 64);
    const std::size_t with_path = plan.workspace_bytes(true), without = plan.workspace_bytes(false);
    CHECK(with_path >= without + std::size_t(p.B * p.T * p.C) * 2); // the back-pointers, and the chunks' maps
    if (form == ChainForm::crf) CHECK(plan.backward_workspace_bytes() == 0);
    DeviceBuffer inputs(std::size_t(p.T * p.C * p.C) * 4), score(4), path(std::size_t(p.T) * 4), work(with_path);
    auto forward = [&](int32_t* best, std::size_t bytes) {
      const Workspace w{work.get(), bytes};
      if (form == ChainForm::crf)
        plan(inputs.get(), nullptr, score.get(), nullptr, nullptr, best, nullptr, w);
      else
        plan(HmmInputs{inputs.get(), inputs.get(), inputs.get()}, nullptr, score.get(), nullptr, nullptr, best,
             nullptr, w);
    };
    auto entries = [](const std::vector<std::string>& launched) {
      std::set<std::string> suffixes;
      for (const std::string& name : launched)
        for (const char* suffix : {"_chain", "_rerun", "_compose", "_expand"})
          if (name.size() > std::strlen(suffix) && name.compare(name.size() - std::strlen(suffix), std::string::npos,
                                                                suffix) == 0)
            suffixes.insert(suffix);
      return suffixes;
    };
    auto* best = static_cast<int32_t*>(path.get());
    {
      const DriverLog log;
      CHECK_THROWS_WITH_AS(forward(best, with_path - 1), doctest::Contains("workspace"), std::invalid_argument);
      CHECK(log.launched().empty());
      forward(best, with_path);
      CHECK(entries(log.launched()) == std::set<std::string>{"_chain", "_rerun", "_compose", "_expand"});
    }
    const DriverLog log; // without a path: the chain of chunks and the chunk at each sequence's end
    forward(nullptr, without);
    CHECK(entries(log.launched()) == std::set<std::string>{"_chain", "_rerun"});
  }
}

// A chunked plan calls the sequential kernels where the chunks have nothing of their own: alpha (the chunks have no
// messages of their positions) comes from the sequential module's forward before the chunks' launches, and
// max_plus's backward (it reads the path) is the sequential kernels' backward unit, beside the forward's unit whose
// name the plan gives.
TEST_CASE("a chunked plan runs the sequential kernels for alpha and for max_plus's backward") {
  ChainProblem p;
  p.semiring = Semiring::max_plus, p.B = 1, p.T = 4096, p.C = 32;
  const ChainPlan plan = ChainPlan::get(p);
  REQUIRE(std::string(plan.strategy()) == "chunked");
  const std::string module = plan.kernel_name();
  REQUIRE(module.rfind("chain_", 0) == 0);
  DeviceBuffer inputs(std::size_t(p.T * p.C * p.C) * 4), score(4), alpha(std::size_t(p.T * p.C) * 4),
      path(std::size_t(p.T) * 4), work(plan.workspace_bytes(true)), g(4), grad(std::size_t(p.T * p.C * p.C) * 4);
  auto* best = static_cast<int32_t*>(path.get());
  {
    const DriverLog log;
    plan(inputs.get(), nullptr, score.get(), nullptr, alpha.get(), best, nullptr,
         Workspace{work.get(), plan.workspace_bytes(true)});
    const std::vector<std::string> launched = log.launched();
    REQUIRE(launched.size() > 1);
    CHECK(launched.front() == module); // the sequential forward, for alpha
    CHECK(std::count(launched.begin(), launched.end(), module) == 1);
  }
  {
    const DriverLog log; // without alpha: the chunks alone
    plan(inputs.get(), nullptr, score.get(), nullptr, nullptr, best, nullptr,
         Workspace{work.get(), plan.workspace_bytes(true)});
    const std::vector<std::string> launched = log.launched();
    CHECK(std::count(launched.begin(), launched.end(), module) == 0);
  }
  const DriverLog log;
  plan.backward(inputs.get(), nullptr, nullptr, best, g.get(), grad.get());
  const std::vector<std::string> launched = log.launched();
  REQUIRE(launched.size() == 1);
  CHECK(launched[0].rfind("chain_max_plus_f32_c32_backward_g", 0) == 0);
}

// The fake device is an sm_90, and every generated kernel waits for the one before it: each launch may overlap the end
// of the kernel before it (runtime/launch.hpp), the chain's as the products'.
TEST_CASE("on sm_90 every launch of a generated kernel may overlap the end of the kernel before it") {
  ChainProblem p;
  p.semiring = Semiring::max_plus, p.B = 1, p.T = 4096, p.C = 32;
  const ChainPlan plan = ChainPlan::get(p);
  DeviceBuffer inputs(std::size_t(p.T * p.C * p.C) * 4), score(4), alpha(std::size_t(p.T * p.C) * 4),
      path(std::size_t(p.T) * 4), work(plan.workspace_bytes(true));
  const DriverLog log;
  plan(inputs.get(), nullptr, score.get(), nullptr, alpha.get(), static_cast<int32_t*>(path.get()), nullptr,
       Workspace{work.get(), plan.workspace_bytes(true)});
  const std::vector<test::LoggedLaunch> launches = log.launches();
  REQUIRE(launches.size() > 1);
  for (const test::LoggedLaunch& l : launches) CHECK_MESSAGE(l.programmatic, l.kernel);
}

// The HMM form's log-likelihood in chunks: its backward checks the scratch it takes (the tree's and the tables' sums)
// before its first launch, then sends the steps' gradients down the tree and sums them into the tables asked for.
TEST_CASE("a chunked HMM backward checks its workspace, then sums the steps' gradients into the tables asked for") {
  ChainProblem p;
  p.form = ChainForm::hmm, p.B = 2, p.T = 1024, p.C = 32;
  const ChainPlan plan = chain_plan_for(p, chosen_chain_spec(p, *current_device()), 64);
  REQUIRE(std::string(plan.strategy()) == "chunked");
  const std::size_t bytes = plan.backward_workspace_bytes();
  DeviceBuffer tables(std::size_t(p.B * p.T * p.C + p.C * p.C + p.C) * 4), score(8), saved(plan.saved_bytes()),
      g(8), grads(std::size_t(p.B * p.T * p.C + p.C * p.C + p.C) * 4), work(bytes);
  auto* t = static_cast<char*>(tables.get());
  const HmmInputs hmm{t, t, t};
  plan(hmm, nullptr, score.get(), saved.get());
  auto* gr = static_cast<char*>(grads.get());
  auto suffixes = [](const std::vector<std::string>& launched) {
    std::set<std::string> out;
    for (const std::string& name : launched)
      if (const std::size_t at = name.find("_hmm_"); at != std::string::npos) out.insert(name.substr(at));
    return out;
  };
  {
    const DriverLog log;
    CHECK_THROWS_WITH_AS(plan.backward(hmm, nullptr, saved.get(), nullptr, g.get(), HmmGradients{gr, gr, gr}, nullptr,
                                       Workspace{work.get(), bytes - 1}),
                         doctest::Contains("workspace"), std::invalid_argument);
    CHECK(log.launched().empty());
    plan.backward(hmm, nullptr, saved.get(), nullptr, g.get(), HmmGradients{gr, gr, gr}, nullptr,
                  Workspace{work.get(), bytes});
    CHECK(suffixes(log.launched()) == std::set<std::string>{"_hmm_nodes", "_hmm_edges", "_hmm_sums", "_hmm_cast"});
  }
  const DriverLog log; // the emissions' gradient alone: no sums
  plan.backward(hmm, nullptr, saved.get(), nullptr, g.get(), HmmGradients{gr, nullptr, nullptr});
  CHECK(suffixes(log.launched()) == std::set<std::string>{"_hmm_nodes"});
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
  CHECK_THROWS_WITH_AS(ChunkedChain(p, 16, std::nullopt, device), doctest::Contains("chain of chunks: a log chain"),
                       std::invalid_argument);
  // A max_plus chain in chunks runs its own chain of chunks (templates/chain/chunk_viterbi.cuh), and takes no plan.
  ChainProblem viterbi = p;
  viterbi.semiring = Semiring::max_plus;
  CHECK(ChunkedChain(viterbi, 16, std::nullopt, device).chunk() == 16);
  CHECK_THROWS_WITH_AS(ChunkedChain(viterbi, 16, chain_plan_for(top, chosen_chain_spec(top, *device)), device),
                       doctest::Contains("chain of chunks: a max_plus chain"), std::invalid_argument);
}

namespace {

// The first sequence's score on the CPU, from the inputs a chain trial uploaded (read back from its buffers).
double first_score(const ChainProblem& p, const ChainTrialBuffers& t) {
  ChainProblem first = p;
  first.B = 1;
  const std::size_t bytes = dtype_info(p.dtype).size_bytes;
  auto read = [&](const void* at, int64_t elements) {
    std::vector<unsigned char> host(std::size_t(elements) * bytes);
    check(driver().cuMemcpyDtoH(host.data(), reinterpret_cast<CUdeviceptr>(at), host.size()), "cuMemcpyDtoH");
    return host;
  };
  double score = 0;
  if (p.form == ChainForm::hmm) {
    const auto emissions = read(t.hmm.emissions, p.T * p.C), transitions = read(t.hmm.transitions, p.C * p.C),
               initial = read(t.hmm.initial, p.C);
    reference::chain_forward(first, HmmInputs{emissions.data(), transitions.data(), initial.data()}, nullptr, &score,
                             nullptr, nullptr);
  } else {
    reference::chain_forward(first, read(t.potentials, (p.T - 1) * p.C * p.C).data(), nullptr, &score, nullptr,
                             nullptr);
  }
  return score;
}

} // namespace

// A chain trial runs a candidate's calls on its buffers, with saved (log) or the path (max_plus) and the scratch the
// candidate asks for, and checks each: the first score after either forward as the products' trials check an output
// (the reference's score, to the output dtype's tolerance, f64: 1e-12 of max(1, |score|), passes, and one further off
// does not), and the backward's first and last steps of the first sequence as marginals (log) or the best path's
// indicator (max_plus).
TEST_CASE("a chain trial times a candidate's calls and checks both forwards' first score and its backward") {
  const auto device = current_device();
  ScopedContext scope(device->context);
  for (const DType dtype : {DType::f32, DType::f64})
    for (const ChainForm form : {ChainForm::crf, ChainForm::hmm})
      for (const Semiring semiring : {Semiring::log, Semiring::max_plus}) {
        CAPTURE(dtype_info(dtype).name);
        CAPTURE(int(form));
        CAPTURE(int(semiring));
        ChainProblem p;
        p.semiring = semiring, p.dtype = dtype, p.form = form;
        p.B = 3, p.T = 5, p.C = 4;
        ChainTrial trial(p);
        const bool log = semiring == Semiring::log;
        const bool hmm = form == ChainForm::hmm;
        int forwards = 0, saving = 0, backwards = 0;
        // How far each forward's score is from the reference's, times max(1, |score|); what the backward writes of
        // each step: a distribution (log: uniform marginals; max_plus: a one-hot path), or one step's values doubled.
        double forward_off = 0, saving_off = 0;
        bool doubled_last_step = false;
        ChainCandidate c;
        c.saved_bytes = 64, c.workspace_bytes = 128, c.backward_workspace_bytes = 256;
        c.forward = [&](const ChainTrialBuffers& t, void* saved, int32_t* path, Stream, const Workspace& ws) {
          CHECK(ws.bytes == 128);
          CHECK(ws.ptr != nullptr);
          double off = forward_off;
          if (!saved && !path) {
            ++forwards;
          } else {
            ++saving;
            off = saving_off;
            CHECK((saved != nullptr) == log); // log keeps saved, max_plus the best path
            CHECK((path != nullptr) == !log);
          }
          const double want = first_score(p, t);
          std::vector<unsigned char> score(dtype_info(dtype).size_bytes);
          store_element(dtype, score.data(), 0, want + off * std::max(1.0, std::fabs(want)));
          check(driver().cuMemcpyHtoD(reinterpret_cast<CUdeviceptr>(t.score), score.data(), score.size()),
                "cuMemcpyHtoD");
        };
        c.backward = [&](const ChainTrialBuffers& t, const void* saved, const int32_t* path, Stream,
                         const Workspace& ws) {
          CHECK(ws.bytes == 256);
          CHECK((saved != nullptr) == log);
          CHECK((path != nullptr) == !log);
          ++backwards;
          const int64_t steps = hmm ? p.T : p.T - 1, values = hmm ? p.C : p.C * p.C;
          std::vector<unsigned char> grad(std::size_t(steps * values) * dtype_info(dtype).size_bytes);
          for (int64_t s = 0; s < steps; ++s)
            for (int64_t v = 0; v < values; ++v) {
              const double x = log ? 1.0 / double(values) : double(v == s % values);
              store_element(dtype, grad.data(), s * values + v, doubled_last_step && s == steps - 1 ? 2 * x : x);
            }
          void* at = hmm ? t.grad_hmm.emissions : t.grad_potentials;
          check(driver().cuMemcpyHtoD(reinterpret_cast<CUdeviceptr>(at), grad.data(), grad.size()), "cuMemcpyHtoD");
        };
        CHECK(trial.measure(c, 2).checked);
        CHECK(forwards == 5); // three to warm up, two timed
        CHECK(saving == 5);
        CHECK(backwards == 5);
        const double off = dtype == DType::f64 ? 5e-12 : 5e-5;
        forward_off = off; // the score-only forward wrong, the saving one right
        CHECK_FALSE(trial.measure(c, 2).checked);
        forward_off = 0, saving_off = off;
        CHECK_FALSE(trial.measure(c, 2).checked);
        saving_off = 0, doubled_last_step = true;
        CHECK_FALSE(trial.measure(c, 2).checked);
        doubled_last_step = false;
        CHECK(trial.measure(c, 2).checked);
      }
}

// The stepped strategy launches, per pass over the positions, its table's copy (once per pass for a shared HMM
// table), a product per step and one position launch per position; with saved the backward messages' pass beside the
// forward's; max_plus with a path adds its walk back. A workspace one byte short is refused before any launch.
TEST_CASE("the stepped strategy: a product a step and a launch a position, per pass; a short workspace launches nothing") {
  for (const Semiring semiring : {Semiring::log, Semiring::max_plus}) {
    CAPTURE(semiring_info(semiring).name);
    ChainProblem p;
    p.semiring = semiring;
    p.form = ChainForm::hmm;
    p.B = 3, p.T = 5, p.C = 8;
    const ChainPlan plan = chain_plan_for(p, ChainSpec{}, 0, false, true, StepKernel::products);
    CHECK(std::string(plan.strategy()) == "stepped");
    const std::string module = plan.kernel_name();
    REQUIRE(module.rfind("hmm_steps_", 0) == 0);
    DeviceBuffer tables(1 << 16), score(64), saved(plan.saved_bytes() + 1), path(4 * p.B * p.T);
    const bool log_chain = semiring == Semiring::log;
    const std::size_t bytes = plan.workspace_bytes(!log_chain);
    DeviceBuffer work(bytes);
    char* t = static_cast<char*>(tables.get());
    const HmmInputs in{t, t + 4096, t + 8192};
    auto forward = [&](std::size_t given) {
      plan(in, nullptr, score.get(), log_chain ? saved.get() : nullptr, nullptr,
           log_chain ? nullptr : static_cast<int32_t*>(path.get()), nullptr, Workspace{work.get(), given});
    };
    {
      const DriverLog log;
      CHECK_THROWS_WITH_AS(forward(bytes - 1), doctest::Contains("workspace"), std::invalid_argument);
      if (!log_chain) // saved given to max_plus: refused naming saved, whatever the workspace
        CHECK_THROWS_WITH_AS(plan(in, nullptr, score.get(), saved.get(), nullptr, nullptr, nullptr,
                                  Workspace{work.get(), bytes}),
                             doctest::Contains("saved:"), std::invalid_argument);
      CHECK(log.launched().empty());
    }
    const DriverLog log;
    forward(bytes);
    const std::vector<std::string> launched = log.launched();
    const auto count = [&](const std::string& name) { return std::count(launched.begin(), launched.end(), name); };
    const int passes = log_chain ? 2 : 1; // with saved, the backward messages' too
    CHECK(count(module) == passes * p.T);
    CHECK(count(module + "_widen") == passes);
    CHECK(count(module + "_path") == (log_chain ? 0 : 1));
    // The rest are the products' launches: at least one a step of each pass.
    const long products = long(launched.size()) - count(module) - count(module + "_widen") - count(module + "_path");
    CHECK(products >= passes * (p.T - 1));
  }
}

// The stepped strategy's products, by the rule fitted on the step shapes (runtime/chain_step_products.cpp): a few
// sequences of many states split each step's long sum over the SMs; a wide batch of 512 states keeps whole tiles of
// max_plus, and log's sums in parts take the warpgroup tiles (the fake GPU is an sm_90).
TEST_CASE("the stepped strategy's products: few sequences of 1024 states split each step's sum; 512 sequences do not") {
  struct Expect {
    Semiring semiring;
    int64_t B, C;
    bool path;
    const char* product; // the prefix of every product kernel's name
  };
  const Expect expect[] = {{Semiring::max_plus, 16, 1024, false, "max_plus_f32_split_k_32x32x16_t2x2_"},
                           {Semiring::max_plus, 16, 1024, true, "max_plus_f32_warp_"},
                           {Semiring::max_plus, 64, 1024, true, "max_plus_f32_split_k_32x32x16_t2x2_"},
                           {Semiring::log, 16, 1024, false, "log_f32_split_k_32x32x16_t2x2_"},
                           {Semiring::max_plus, 512, 512, true, "max_plus_f32_tiled_32x32x16_t2x2_"},
                           {Semiring::log, 512, 512, false, "log_f32_exp_matmul_"},
                           // Wider steps whose whole tiles would leave SMs idle: the sum in parts (a batch each).
                           {Semiring::log, 512, 1024, false, "log_f32_exp_matmul_wgmma_tf32x3_128x128x32_"},
                           {Semiring::log, 64, 2048, false, "log_f32_exp_matmul_wgmma_tf32x3_64x128x32_"}};
  for (const Expect& e : expect) {
    CAPTURE(e.product);
    ChainProblem p;
    p.semiring = e.semiring;
    p.form = ChainForm::hmm;
    p.B = e.B, p.T = 3, p.C = e.C;
    const ChainPlan plan = chain_plan_for(p, ChainSpec{}, 0, false, true, StepKernel::products);
    const std::string module = plan.kernel_name();
    const SharedHmmTables tables(p);
    const HmmInputs in = tables.inputs();
    DeviceBuffer score(4 * p.B), path(4 * p.B * p.T), work(plan.workspace_bytes(e.path));
    const DriverLog log;
    plan(in, nullptr, score.get(), nullptr, nullptr, e.path ? static_cast<int32_t*>(path.get()) : nullptr, nullptr,
         Workspace{work.get(), plan.workspace_bytes(e.path)});
    long products = 0, named = 0;
    for (const std::string& name : log.launched()) {
      if (name.rfind(module, 0) == 0) continue;
      ++products;
      named += name.rfind(e.product, 0) == 0;
    }
    CHECK(named >= p.T - 1);
    CHECK(named == products); // every launch not of the chain's own module is one of those products' kernels
  }
}

// A shared table's log steps in the products' form make exp_matmul's factors of the table once a pass: every
// position's prepare after the first launches the blocks of the messages' rows alone. A saving forward runs both
// directions' steps as one product a position (the tables side by side, 2 parts each at 512 × 1024). The backward's
// two products of the transitions' gradient share their right operand, the saved messages: the second prepares its
// left alone.
TEST_CASE("the stepped strategy's products prepare a shared table's factors once a pass") {
  ChainProblem p;
  p.semiring = Semiring::log;
  p.form = ChainForm::hmm;
  p.B = 512, p.T = 4, p.C = 1024;
  const ChainPlan plan = chain_plan_for(p, ChainSpec{}, 0, false, true, StepKernel::products);
  const SharedHmmTables tables(p);
  const HmmInputs in = tables.inputs();
  const SavingForward forward(plan);
  {
    const DriverLog log;
    forward(plan, in);
    const std::vector<unsigned> prepares = log.grids("_prepare");
    REQUIRE(prepares.size() == std::size_t(p.T - 1)); // a product a step for both passes
    CHECK(prepares[1] < prepares[0]);
    CHECK(std::count(prepares.begin(), prepares.end(), prepares[1]) == p.T - 2);
    const std::vector<std::string> names = log.launched();
    const std::string module = plan.kernel_name();
    const auto positions = std::count_if(names.begin(), names.end(), [&](const std::string& n) { return n == module; });
    CHECK(positions == 2 * p.T); // the forward's and the backward's position kernels, at every position
    for (const test::LoggedLaunch& l : log.launches("_prepare"))
      CHECK_MESSAGE(l.kernel.rfind("log_f32_exp_matmul_wgmma_tf32x3_128x128x32_", 0) == 0, l.kernel);
  }
  {
    // The forward alone: 4 parts, the table's factors made once.
    DeviceBuffer score(4 * p.B), work(plan.workspace_bytes(false));
    const DriverLog log;
    plan(in, nullptr, score.get(), nullptr, nullptr, nullptr, nullptr,
         Workspace{work.get(), plan.workspace_bytes(false)});
    const std::vector<unsigned> prepares = log.grids("_prepare");
    REQUIRE(prepares.size() == std::size_t(p.T - 1));
    CHECK(prepares[1] < prepares[0]);
    CHECK(std::count(prepares.begin(), prepares.end(), prepares[1]) == p.T - 2);
  }
  const SharedHmmTables grads(p);
  DeviceBuffer g(4 * p.B), back(plan.backward_workspace_bytes());
  const DriverLog log;
  plan.backward(in, nullptr, forward.saved.get(), nullptr, g.get(), grads.gradients(), nullptr,
                Workspace{back.get(), plan.backward_workspace_bytes()});
  const std::vector<unsigned> prepares = log.grids("_prepare");
  REQUIRE(prepares.size() == 2);
  CHECK(prepares[1] < prepares[0]);
}

// A chain plan builds every kernel its first forward and backward load when it is made (runtime/tuner/build_ahead.hpp):
// the stepped strategy's module, its fused form's passes or its step products, and the log HMM's transitions'
// gradient's product; the chunked strategy's module and its tree's products with their backward passes. The calls
// after the plan then load no module. Problems no other test plans (f16 tables, 40 states): their own modules at
// least are loaded for the first time here (kernels they share with other plans may have been loaded before).
TEST_CASE("a chain plan builds the kernels of its first forward and backward when it is made") {
  ChainProblem fused;
  fused.form = ChainForm::hmm;
  fused.dtype = DType::f16;
  fused.B = 512, fused.T = 5, fused.C = 512;
  ChainProblem products = fused;
  products.C = 1024; // more tiles than SMs: the step products
  for (const ChainProblem& p : {products, fused}) {
    CAPTURE(p.C);
    const DriverLog log;
    const ChainPlan plan = chain_plan_for(p, ChainSpec{}, 0, false, true);
    CHECK(std::string(plan.strategy()) == "stepped");
    const std::size_t built = log.loads();
    CHECK(built >= (p.C == 512 ? 2u : 1u)); // the fused form's two units; the products' step module
    const SharedHmmTables tables(p), grads(p);
    const SavingForward forward(plan);
    forward(plan, tables.inputs());
    DeviceBuffer g(4 * p.B), back(plan.backward_workspace_bytes());
    plan.backward(tables.inputs(), nullptr, forward.saved.get(), nullptr, g.get(), grads.gradients(), nullptr,
                  Workspace{back.get(), plan.backward_workspace_bytes()});
    CHECK(log.loads() == built);
  }
  ChainProblem chunked;
  chunked.B = 1, chunked.T = 1024, chunked.C = 40;
  const DriverLog log;
  const ChainPlan plan = ChainPlan::get(chunked);
  REQUIRE(plan.chunk() > 0);
  const std::size_t built = log.loads();
  CHECK(built >= 1); // the chunk module
  const std::size_t potentials = std::size_t(chunked.B * (chunked.T - 1) * chunked.C * chunked.C) * 4;
  DeviceBuffer pot(potentials), score(4), saved(plan.saved_bytes()), grad(potentials), g(4),
      work(std::max(plan.workspace_bytes(false), plan.backward_workspace_bytes()));
  plan(pot.get(), nullptr, score.get(), saved.get(), nullptr, nullptr, nullptr,
       {work.get(), plan.workspace_bytes(false)});
  plan.backward(pot.get(), nullptr, saved.get(), nullptr, g.get(), grad.get(), nullptr,
                {work.get(), plan.backward_workspace_bytes()});
  CHECK(log.loads() == built);
}

// The transitions' gradient of a shared table is a product over every (b, t) in slices of the sequences: enough of
// them that the product's prepare, which walks 32 of a slice's 2C lines (its operands' rows and columns) a block, has
// a block an SM (the fake device has 132), each slice summing at least 256 positions.
TEST_CASE("the stepped strategy's transitions' gradient is sliced so that its prepare has a block an SM") {
  const int sms = current_device()->sm_count;
  for (const int64_t C : {1024, 2048}) {
    ChainProblem p;
    p.semiring = Semiring::log;
    p.form = ChainForm::hmm;
    p.B = 512, p.T = 4, p.C = C;
    INFO("C = " << C);
    const ChainPlan plan = chain_plan_for(p, ChainSpec{}, 0, false, true, StepKernel::products);
    const SharedHmmTables tables(p), grads(p);
    const SavingForward forward(plan);
    forward(plan, tables.inputs());
    DeviceBuffer g(4 * p.B), back(plan.backward_workspace_bytes());
    const DriverLog log;
    plan.backward(tables.inputs(), nullptr, forward.saved.get(), nullptr, g.get(), grads.gradients(), nullptr,
                  Workspace{back.get(), plan.backward_workspace_bytes()});
    const std::vector<unsigned> prepares = log.grids("_prepare");
    REQUIRE(prepares.size() == 2);
    const unsigned per_slice = unsigned(2 * C / 32); // a's rows and b's columns, 32 a block
    CHECK(prepares[0] % per_slice == 0);
    CHECK(prepares[0] >= unsigned(sms));
    CHECK(prepares[0] / per_slice <= unsigned(p.B * p.T / 256));
  }
}

// The stepped strategy's fused forms (templates/chain/fused_steps.cuh, fused_viterbi.cuh): where the rule takes them,
// an HMM with one shared table runs each pass in one cooperative launch of at most one block an SM (what the fake
// driver holds at once), after the table's copy and its columns' maxima (log: and factors): no product a position.
// Where each tile has a block to itself and its table's side fits in shared memory, the passes are the resident
// entries; at 1024 states it does not fit. Where the fused forms do not apply, asking for them is refused.
TEST_CASE("the stepped strategy's fused forms: a pass is one launch; asked for where they do not apply, refused") {
  ChainProblem p;
  p.form = ChainForm::hmm;
  p.B = 512, p.T = 5, p.C = 512;
  const ChainPlan plan = chain_plan_for(p, ChainSpec{}, 0, false, true);
  CHECK(plan.kernel_name().rfind("hmm_fused_steps_log_f32_resident_", 0) == 0);
  const SharedHmmTables tables(p);
  const HmmInputs in = tables.inputs();
  const SavingForward forward(plan);
  const DriverLog log;
  forward(plan, in);
  std::vector<std::string> fused, other;
  for (const std::string& name : log.launched()) {
    if (name.rfind("hmm_fused_steps_", 0) == 0)
      fused.push_back(without_hash(name));
    else
      other.push_back(name);
  }
  // A unit a pass: the forward's, then the backward messages'.
  CHECK(fused == std::vector<std::string>{
                     "hmm_fused_steps_log_f32_resident_factors", "hmm_fused_steps_log_f32_resident",
                     "hmm_fused_steps_log_f32_resident_beta_factors", "hmm_fused_steps_log_f32_resident_beta"});
  CHECK(other.size() == 2); // the table copied for each direction, by the step module
  for (const std::string& name : other) CHECK_MESSAGE(name.find("_widen") != std::string::npos, name);
  // A block a tile, each row of tiles (8 of 64 states) one cluster that meets at its own barrier (sm_90 on).
  for (const test::LoggedLaunch& l : log.launches())
    if (l.kernel.rfind("hmm_fused_steps_log_f32_resident", 0) == 0 && l.kernel.find("_factors") == std::string::npos) {
      CHECK(l.grid_x == 128);
      CHECK(l.cluster == 8);
    }

  // 128 sequences of 1024 states: 64 tiles, each table side 256 KiB, the streaming entries.
  ChainProblem large = p;
  large.B = 128, large.C = 1024;
  const ChainPlan streaming = chain_plan_for(large, ChainSpec{}, 0, false, true);
  CHECK(without_hash(streaming.kernel_name()) == "hmm_fused_steps_log_f32");
  const SharedHmmTables large_tables(large);
  DeviceBuffer large_score(4 * large.B), large_work(streaming.workspace_bytes(false));
  const DriverLog large_log;
  streaming(large_tables.inputs(), nullptr, large_score.get(), nullptr, nullptr, nullptr, nullptr,
            Workspace{large_work.get(), streaming.workspace_bytes(false)});
  std::vector<std::string> passes;
  for (const std::string& name : large_log.launched())
    if (name.rfind("hmm_fused_steps_", 0) == 0) passes.push_back(without_hash(name));
  CHECK(passes == std::vector<std::string>{"hmm_fused_steps_log_f32_factors", "hmm_fused_steps_log_f32"});

  // The best path: one pass, its back-pointers and walk inside it.
  ChainProblem viterbi = p;
  viterbi.semiring = Semiring::max_plus;
  const ChainPlan best = chain_plan_for(viterbi, ChainSpec{}, 0, false, true);
  CHECK(without_hash(best.kernel_name()) == "hmm_fused_steps_max_plus_f32_resident");
  DeviceBuffer path(4 * std::size_t(p.B * p.T)), best_work(best.workspace_bytes(true));
  const DriverLog best_log;
  best(in, nullptr, forward.score.get(), nullptr, nullptr, static_cast<int32_t*>(path.get()), nullptr,
       Workspace{best_work.get(), best.workspace_bytes(true)});
  std::vector<std::string> launched;
  for (const std::string& name : best_log.launched())
    launched.push_back(name.rfind(best.kernel_name(), 0) == 0 ? name.substr(best.kernel_name().size()) : name);
  REQUIRE(launched.size() == 3);
  CHECK_MESSAGE(launched[0].find("_widen") != std::string::npos, launched[0]);
  CHECK(std::vector<std::string>(launched.begin() + 1, launched.end()) ==
        std::vector<std::string>{"_factors", ""});

  ChainProblem batched = p;
  batched.batched_transitions = true;
  ChainProblem wide = p;
  wide.dtype = DType::f64;
  ChainProblem crf = p;
  crf.form = ChainForm::crf;
  for (const ChainProblem& q : {batched, wide, crf})
    CHECK_THROWS_WITH_AS(chain_plan_for(q, ChainSpec{}, 0, false, true, StepKernel::fused),
                         doctest::Contains("steps: the fused steps"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(chain_plan_for(p, ChainSpec{}, 0, false, false, StepKernel::fused),
                       doctest::Contains("steps: a form of the stepped strategy"), std::invalid_argument);
}

// The stepped strategy serves chains beyond the sequential kernels' 1024 states, in every form; its host loop takes
// at most 2^24 positions, and a longer chain of any sequence is refused naming T.
TEST_CASE("chains of more than 1024 states plan the stepped strategy; beyond 2^24 positions they are refused") {
  ChainProblem p;
  p.B = 2, p.T = 3, p.C = kMaxSequentialChainStates + 1;
  CHECK(std::string(ChainPlan::get(p).strategy()) == "stepped");
  p.form = ChainForm::hmm;
  p.batched_transitions = true;
  CHECK(std::string(ChainPlan::get(p).strategy()) == "stepped");
  p.T = kMaxSteppedChainLength + 1;
  CHECK_THROWS_WITH_AS(ChainPlan::get(p), doctest::Contains("chain.T"), std::invalid_argument);
  p.B = 0; // no sequence: nothing launches, however long
  CHECK(std::string(ChainPlan::get(p).strategy()) == "stepped");
  p.B = 2;
  p.C = 128; // the sequential kernels have no such bound (nor chunks at 128 states in the HMM form's log)
  CHECK(std::string(ChainPlan::get(p).strategy()) == "sequential");
  p.C = kMaxChainStates + 1;
  CHECK_THROWS_WITH_AS(ChainPlan::get(p), doctest::Contains("chain.C"), std::invalid_argument);
}

// A forward that saves for a backward runs the backward messages on a stream of the plan's beside the caller's: one
// for each caller stream, so that calls on two streams never wait for each other's work (one shared side stream made
// each caller wait for the other's queued passes); past SideStreams::kMax caller streams, none more.
TEST_CASE("a stepped plan's backward messages run on a side stream of its own for each caller stream") {
  void* fake = ::dlopen(std::getenv("JITBMM_LIBCUDA"), RTLD_NOW | RTLD_LOCAL); // the library's own handle
  auto* live = fake ? reinterpret_cast<long (*)()>(::dlsym(fake, "jitbmm_fake_cuda_live_streams")) : nullptr;
  const bool exported = live != nullptr;
  REQUIRE(exported);
  ChainProblem p;
  p.form = ChainForm::hmm;
  p.B = 2, p.T = 3, p.C = kMaxSequentialChainStates + 1;
  const ChainPlan plan = ChainPlan::get(p);
  REQUIRE(std::string(plan.strategy()) == "stepped");
  const std::size_t C = std::size_t(p.C);
  DeviceBuffer emissions(std::size_t(p.B * p.T) * C * 4), table(C * C * 4), initial(C * 4), score(8),
      saved(plan.saved_bytes());
  const HmmInputs in{emissions.get(), table.get(), initial.get()};
  std::vector<CUstream> callers(SideStreams::kMax + 2);
  for (CUstream& s : callers) check(driver().cuStreamCreate(&s, 0), "cuStreamCreate");
  const long before = live();
  for (int twice = 0; twice < 2; ++twice)
    for (int i = 0; i < 2; ++i)
      plan(in, nullptr, score.get(), saved.get(), nullptr, nullptr, reinterpret_cast<Stream>(callers[i]));
  CHECK(live() - before == 2); // one for each of the two caller streams, made once
  for (CUstream s : callers) plan(in, nullptr, score.get(), saved.get(), nullptr, nullptr, reinterpret_cast<Stream>(s));
  CHECK(live() - before == long(SideStreams::kMax)); // the rest run both passes on their own stream
  for (CUstream s : callers) driver().cuStreamDestroy(s);
}

// The fused form's two passes of a saving forward run side by side, the backward messages' on the plan's side stream
// with a table and scratch of their own, where every row of tiles is a cluster and the GPU holds both passes'
// clusters at once (the fake GPU: 132 SMs, a block each): 256 sequences of 256 states make 8 rows of 4 tiles, 16
// clusters of 33. 512 sequences of 512 states make 16 rows of 8 tiles, as many as it holds of one pass: one after
// the other there, on the caller's stream, sharing one scratch. 4096 sequences of 64 states make 128 rows of one tile
// and 2048 of 128 states 64 rows of two: more than half the SMs a pass, so side by side in the paired entries, of which
// it holds two blocks an SM; the forward alone takes the others.
TEST_CASE("a fused saving forward runs its passes side by side where the GPU holds both at once") {
  void* fake = ::dlopen(std::getenv("JITBMM_LIBCUDA"), RTLD_NOW | RTLD_LOCAL);
  auto* live = fake ? reinterpret_cast<long (*)()>(::dlsym(fake, "jitbmm_fake_cuda_live_streams")) : nullptr;
  const bool exported = live != nullptr;
  REQUIRE(exported);
  const struct {
    int64_t B, C;
    bool beside, paired;
  } shapes[] = {{256, 256, true, false}, {512, 512, false, false}, {4096, 64, true, true}, {2048, 128, true, true}};
  for (const auto& s : shapes) {
    CAPTURE(s.B);
    CAPTURE(s.C);
    ChainProblem p;
    p.form = ChainForm::hmm;
    p.B = s.B, p.T = 5, p.C = s.C;
    const ChainPlan plan = chain_plan_for(p, ChainSpec{}, 0, false, true);
    REQUIRE(plan.kernel_name().rfind("hmm_fused_steps_log_f32_resident_", 0) == 0);
    CHECK(plan.kernel_name().find("_paired") == std::string::npos);
    const SharedHmmTables tables(p);
    const SavingForward forward(plan);
    const auto passes = [](const DriverLog& log, bool paired) {
      std::size_t n = 0;
      for (const std::string& name : log.launched())
        n += name.rfind("hmm_fused_steps_", 0) == 0 && name.find("_factors") == std::string::npos &&
             (name.find("_paired") != std::string::npos) == paired;
      return n;
    };
    {
      const long before = live();
      const DriverLog log;
      forward(plan, tables.inputs());
      CHECK(live() - before == (s.beside ? 1 : 0));
      CHECK(passes(log, s.paired) == 2);
    }
    DeviceBuffer score(4 * p.B), work(plan.workspace_bytes(false));
    const DriverLog log;
    plan(tables.inputs(), nullptr, score.get(), nullptr, nullptr, nullptr, nullptr,
         Workspace{work.get(), plan.workspace_bytes(false)});
    CHECK(passes(log, false) == 1); // the forward alone
  }
}

namespace {

// A strategy of a problem made for its sizes alone (runtime/chain_strategy.hpp) or built: each as chain_plan_for
// makes it.
std::shared_ptr<const ChainStrategy> strategy(const ChainProblem& p, int64_t chunk, bool stepped, StepKernel steps,
                                              StrategyBuild build) {
  const auto device = current_device();
  if (stepped) return std::make_shared<const SteppedChain>(p, device, false, steps, build);
  const ChainSpec spec = chosen_chain_spec(p, *device);
  std::shared_ptr<const ChainStrategy> sequential = std::make_shared<const SequentialChain>(p, spec, device, build);
  if (!chunk) return sequential;
  std::optional<ChainPlan> top;
  if (p.semiring == Semiring::log && build != StrategyBuild::sizes) {
    const ChainProblem chunks = chain_of_chunks(p, chunk);
    top = chain_plan_for(chunks, chosen_chain_spec(chunks, *device));
  }
  return std::make_shared<const ChunkedChain>(p, chunk, top, device, false, sequential, build);
}

// What the file at `path` holds.
std::string text_of(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

} // namespace

// A strategy made for its sizes alone, what a plan announces while a stand-in runs: each of its workspaces at least
// the built strategy's (whose products are planned), and no call taken.
TEST_CASE("a chain strategy made for its sizes alone bounds the built one's workspaces and takes no call") {
  struct Case {
    const char* what;
    ChainProblem problem;
    int64_t chunk;
    bool stepped;
    StepKernel steps;
  };
  const auto problem = [](Semiring semiring, ChainForm form, int64_t B, int64_t T, int64_t C) {
    ChainProblem p;
    p.semiring = semiring, p.form = form, p.B = B, p.T = T, p.C = C;
    return p;
  };
  const std::vector<Case> cases = {
      {"sequential hmm log", problem(Semiring::log, ChainForm::hmm, 4, 8, 40), 0, false, StepKernel::rule},
      {"sequential crf max_plus", problem(Semiring::max_plus, ChainForm::crf, 4, 8, 40), 0, false, StepKernel::rule},
      {"chunked crf log", problem(Semiring::log, ChainForm::crf, 1, 512, 32), 64, false, StepKernel::rule},
      {"chunked hmm log", problem(Semiring::log, ChainForm::hmm, 1, 512, 32), 64, false, StepKernel::rule},
      {"chunked crf max_plus", problem(Semiring::max_plus, ChainForm::crf, 1, 512, 32), 64, false, StepKernel::rule},
      {"stepped hmm log products", problem(Semiring::log, ChainForm::hmm, 64, 5, 256), 0, true, StepKernel::products},
      {"stepped hmm max_plus products", problem(Semiring::max_plus, ChainForm::hmm, 64, 5, 256), 0, true,
       StepKernel::products},
      {"stepped hmm log fused", problem(Semiring::log, ChainForm::hmm, 64, 5, 256), 0, true, StepKernel::fused},
      {"stepped crf log products", problem(Semiring::log, ChainForm::crf, 8, 5, 64), 0, true, StepKernel::products},
  };
  for (const Case& c : cases) {
    INFO(std::string(c.what));
    const ChainProblem& p = c.problem;
    const auto sizes = strategy(p, c.chunk, c.stepped, c.steps, StrategyBuild::sizes);
    const auto built = strategy(p, c.chunk, c.stepped, c.steps, StrategyBuild::kernels);
    const ChainWorkspaces bound(*sizes, p), real(*built, p);
    INFO("forward " << real.forward(false, false) << "/" << bound.forward(false, false) << ", "
                    << real.forward(true, true) << "/" << bound.forward(true, true) << "; backward "
                    << real.backward(false) << "/" << bound.backward(false) << ", " << real.backward(true) << "/"
                    << bound.backward(true));
    CHECK(real.within(bound));
    // Tight where nothing is left to choose: every product's variant is the one its plan takes.
    CHECK(bound.within(real));
    CHECK_THROWS_WITH_AS(sizes->forward(jb::ChainParams{}, nullptr, nullptr, Workspace{}),
                         doctest::Contains("sizes alone"), std::logic_error);
    CHECK_THROWS_WITH_AS(sizes->backward(jb::ChainParams{}, nullptr, nullptr, Workspace{}),
                         doctest::Contains("sizes alone"), std::logic_error);
  }
}

// A chunked chain whose tree's products take scratch of their own (split_k's partials, by decisions stored for the
// levels' problems): its workspace counts it, its sizes alone say so before it is built, and its calls given that
// workspace take nothing from jitbmm's pool.
TEST_CASE("a chunked chain's products take their scratch from its workspace, which its sizes alone count") {
  const DriverLog log;
  ChainProblem p;
  p.B = 1, p.T = 512, p.C = 20; // 8 chunks of 64 steps, one pass of the tree: 256, 128, ..., 8 products a level
  const auto device = current_device();
  const TuningDevice td = tuning_device(*device);
  for (int64_t batch = 256; batch >= 8; batch /= 2) {
    const Problem q = chunk_level_problem(p, batch);
    TuneReport report;
    report.best = default_spec(q, Strategy::split_k);
    report.candidates.push_back({report.best, 1.0, "ok"});
    put_decision(*DiskCache::process_cache(), tuning_key(q, td, false), decision_from(q, td, report));
  }
  const auto sizes = strategy(p, 64, false, StepKernel::rule, StrategyBuild::sizes);
  const auto built = strategy(p, 64, false, StepKernel::rule, StrategyBuild::kernels);
  const ChainWorkspaces bound(*sizes, p), real(*built, p);
  CHECK(real.within(bound));
  CHECK(bound.within(real));
  // More than the tree's own pieces: the products' partials.
  const std::size_t tree = (std::size_t(8) * 64 + std::size_t(8) * 32) * 20 * 20 * 4;
  CHECK(real.forward(false, false) > tree);
  const ChainPlan plan = chain_plan_for(p, chosen_chain_spec(p, *device), 64);
  REQUIRE(plan.chunk() == 64);
  CHECK(plan.workspace_bytes(false) == std::max(real.forward(false, false), real.forward(true, false)));
  const std::size_t potentials = std::size_t(p.B * (p.T - 1) * p.C * p.C) * 4;
  DeviceBuffer pot(potentials), grad(potentials), score(4), g(4), saved(plan.saved_bytes()),
      forward(plan.workspace_bytes(false)), backward(plan.backward_workspace_bytes());
  release_pool_memory();
  const std::size_t from = text_of(log.path).size();
  plan(pot.get(), nullptr, score.get(), saved.get(), nullptr, nullptr, nullptr,
       {forward.get(), plan.workspace_bytes(false)});
  plan.backward(pot.get(), nullptr, saved.get(), nullptr, g.get(), grad.get(), nullptr,
                {backward.get(), plan.backward_workspace_bytes()});
  const std::string calls = text_of(log.path).substr(from);
  CHECK(calls.find("split_k") != std::string::npos); // the products ran split_k
  CHECK(calls.find("pool-alloc") == std::string::npos);
}

// A chain expectation's forward is one launch: the forward messages alone, or where it saves for a backward both
// sweeps ("_saving", whose messages `saved` holds: four arrays, six with q's); its backward the gradients alone, with
// no scratch, and nothing where no gradient is asked for.
TEST_CASE("chain expectations: a launch forward (_saving where it saves), one backward, none for no gradient asked") {
  ChainProblem p;
  p.B = 3, p.T = 6, p.C = 7;
  const ChainExpectation plan = ChainExpectation::get(p);
  const std::string module = plan.kernel_name();
  REQUIRE(module.rfind("chain_expect_f32_c7", 0) == 0);
  CHECK(plan.saved_bytes() == 2 * 2 * 3 * 6 * 7 * sizeof(float));
  CHECK(ChainExpectation::saved_bytes(p) == plan.saved_bytes());
  CHECK(ChainExpectation::saved_bytes(p, ExpectationField::chain) == 2 * 3 * 3 * 6 * 7 * sizeof(float));
  CHECK(ChainExpectation::get(p, ExpectationField::difference).saved_bytes() ==
        ChainExpectation::saved_bytes(p, ExpectationField::difference));
  CHECK(plan.backward_workspace_bytes() == 0);
  DeviceBuffer pot(4 * 3 * 5 * 49), out(64), saved(plan.saved_bytes()), grad(4 * 3 * 5 * 49);
  {
    const DriverLog log;
    plan(pot.get(), pot.get(), nullptr, out.get(), out.get());
    plan(pot.get(), pot.get(), nullptr, out.get(), out.get(), saved.get());
    CHECK(log.launched() == std::vector<std::string>{module, module + "_saving"});
  }
  auto backward = [&](void* grad_potentials, void* grad_field) {
    plan.backward(pot.get(), pot.get(), nullptr, saved.get(), out.get(), out.get(), out.get(), nullptr, grad_potentials,
                  grad_field, nullptr);
  };
  {
    const DriverLog log;
    backward(nullptr, nullptr);
    CHECK(log.launched().empty());
  }
  const DriverLog log;
  backward(grad.get(), nullptr);
  CHECK(log.launched() == std::vector<std::string>{module + "_edges"});
  CHECK(text_of(log.path).find("pool-alloc") == std::string::npos);
}

// The HMM form's expectation: a module of its own (its name ends "_hmm"), one launch forward (both sweeps where it
// saves, after copies of tables stored [to][from] into `saved`); backward the gradients of the states (emissions,
// initial), of the transitions and their sums, and nothing where no gradient is asked for or a workspace is short;
// the same through the C ABI, which names a missing table set. No sequence launches nothing and clears the shared
// tables' gradients alone.
TEST_CASE("chain expectations, the HMM form: a launch forward (_transpose first for tables stored [to][from]), "
          "_nodes, _transitions and _reduce backward, through C++ and the C ABI; none for B = 0, whose shared "
          "gradients are cleared") {
  ChainProblem p;
  p.form = ChainForm::hmm;
  p.B = 3, p.T = 6, p.C = 7;
  p.batched_transitions = true;
  p.transition_strides[0] = 49, p.transition_strides[1] = 1, p.transition_strides[2] = 7; // read transposed
  const ChainExpectation plan = ChainExpectation::get(p);
  const std::string module = plan.kernel_name();
  CHECK(without_hash(module) == "chain_expect_f32_c7_hmm");
  CHECK(without_hash(ChainExpectation::get(p, ExpectationField::chain).kernel_name()) ==
        "chain_expect_f32_c7_chain_hmm");
  DeviceBuffer e(4 * 3 * 6 * 7), t(4 * 3 * 49), i(4 * 7), out(64), saved(plan.saved_bytes()), g_e(4 * 3 * 6 * 7),
      g_t(4 * 3 * 49), g_i(4 * 7), work(plan.backward_workspace_bytes());
  const HmmInputs hmm{e.get(), t.get(), i.get()};
  const HmmGradients grads{g_e.get(), g_t.get(), g_i.get()};
  const std::vector<std::string> backward_entries{module + "_nodes", module + "_transitions", module + "_reduce"};
  CHECK(plan.saved_bytes() == 2 * 2 * 3 * 6 * 7 * sizeof(float)); // stored [from][to]: no copies
  {
    const DriverLog log;
    plan(hmm, hmm, nullptr, out.get(), out.get(), saved.get());
    CHECK(log.launched() == std::vector<std::string>{module + "_saving"});
  }
  auto backward = [&](const HmmGradients& gp, const HmmGradients& gf, std::size_t given) {
    plan.backward(hmm, hmm, nullptr, saved.get(), out.get(), out.get(), out.get(), nullptr, gp, gf, nullptr,
                  Workspace{work.get(), given});
  };
  {
    const DriverLog log;
    CHECK_THROWS_WITH_AS(backward(grads, HmmGradients{}, plan.backward_workspace_bytes() - 1),
                         doctest::Contains("workspace"), std::invalid_argument);
    backward(HmmGradients{}, HmmGradients{}, plan.backward_workspace_bytes());
    CHECK(log.launched().empty());
  }
  for (const HmmGradients& gf : {HmmGradients{}, grads}) {
    const DriverLog log;
    backward(gf.emissions ? HmmGradients{} : grads, gf, plan.backward_workspace_bytes());
    CHECK(log.launched() == backward_entries);
  }
  { // tables stored [to][from]: the backward messages read copies of them, which the saving forward makes first, at
    // the end of `saved`; the backward reads them no more
    ChainProblem rows = p;
    rows.transition_strides[0] = rows.transition_strides[1] = rows.transition_strides[2] = 0; // contiguous
    const ChainExpectation by_rows = ChainExpectation::get(rows);
    CHECK(by_rows.saved_bytes() == plan.saved_bytes() + 2 * 3 * 49 * 4);
    CHECK(ChainExpectation::saved_bytes(rows) == by_rows.saved_bytes());
    CHECK(by_rows.backward_workspace_bytes() == plan.backward_workspace_bytes());
    rows.T = 1; // no steps, no copies
    CHECK(ChainExpectation::saved_bytes(rows) == 2 * 2 * 3 * 1 * 7 * sizeof(float));
    DeviceBuffer more(by_rows.saved_bytes());
    const DriverLog log;
    by_rows(hmm, hmm, nullptr, out.get(), out.get(), more.get());
    by_rows.backward(hmm, hmm, nullptr, more.get(), out.get(), out.get(), out.get(), nullptr, grads, HmmGradients{},
                     nullptr, Workspace{work.get(), by_rows.backward_workspace_bytes()});
    std::vector<std::string> copied{module + "_transpose", module + "_saving"};
    copied.insert(copied.end(), backward_entries.begin(), backward_entries.end());
    CHECK(log.launched() == copied);
  }
  CHECK_THROWS_WITH_AS(plan(e.get(), e.get(), nullptr, out.get(), out.get()), doctest::Contains("potentials"),
                       std::invalid_argument);

  // The C ABI's calls of the same plan.
  jitbmm_chain_problem c = chain_problem("hmm", 3, 6, 7);
  c.batched_transitions = 1;
  c.transition_strides[0] = 49, c.transition_strides[1] = 1, c.transition_strides[2] = 7;
  jitbmm_chain_expectation* ex = nullptr;
  REQUIRE(jitbmm_chain_expectation_create(&c, 0, &ex) == JITBMM_OK);
  std::size_t saved_bytes = 0, work_bytes = 0;
  REQUIRE(jitbmm_chain_expectation_bytes(ex, &saved_bytes, &work_bytes) == JITBMM_OK);
  CHECK(saved_bytes == plan.saved_bytes());
  CHECK(work_bytes == plan.backward_workspace_bytes());
  std::size_t planless = 0;
  REQUIRE(jitbmm_chain_expectation_saved_bytes(&c, 0, &planless) == JITBMM_OK);
  CHECK(planless == saved_bytes);
  CHECK(jitbmm_chain_expectation_saved_bytes(&c, 3, &planless) == JITBMM_INVALID_ARGUMENT);
  CHECK_MESSAGE(std::string(jitbmm_last_error()).rfind("field: ", 0) == 0, jitbmm_last_error());
  CHECK(jitbmm_chain_expectation_saved_bytes(&c, 0, nullptr) == JITBMM_INVALID_ARGUMENT);
  const jitbmm_hmm_tables tables{e.get(), t.get(), i.get()};
  const jitbmm_hmm_gradients c_grads{g_e.get(), g_t.get(), g_i.get()};
  auto run = [&](const jitbmm_hmm_tables* h, const jitbmm_hmm_tables* f) {
    return jitbmm_chain_expectation_run_hmm(ex, h, f, nullptr, out.get(), out.get(), saved.get(), nullptr);
  };
  auto run_backward = [&](const jitbmm_hmm_tables* h, const jitbmm_hmm_tables* f, const jitbmm_hmm_gradients* gp,
                          const jitbmm_hmm_gradients* gf) {
    return jitbmm_chain_expectation_backward_hmm(ex, h, f, nullptr, saved.get(), out.get(), out.get(), out.get(),
                                                 nullptr, gp, gf, work.get(), work_bytes, nullptr);
  };
  {
    const DriverLog log;
    CHECK(run(&tables, &tables) == JITBMM_OK);
    CHECK(run_backward(&tables, &tables, &c_grads, nullptr) == JITBMM_OK);
    CHECK(run_backward(&tables, &tables, nullptr, nullptr) == JITBMM_OK); // no gradient asked: nothing launched
    std::vector<std::string> want{module + "_saving"};
    want.insert(want.end(), backward_entries.begin(), backward_entries.end());
    CHECK(log.launched() == want);
  }
  {
    const DriverLog log;
    for (const char* name : {"hmm", "field"}) {
      const bool h = name[0] == 'h';
      CHECK(run(h ? nullptr : &tables, h ? &tables : nullptr) == JITBMM_INVALID_ARGUMENT);
      CHECK_MESSAGE(std::string(jitbmm_last_error()).rfind(std::string(name) + ": ", 0) == 0, jitbmm_last_error());
      CHECK(run_backward(h ? nullptr : &tables, h ? &tables : nullptr, &c_grads, nullptr) == JITBMM_INVALID_ARGUMENT);
      CHECK_MESSAGE(std::string(jitbmm_last_error()).rfind(std::string(name) + ": ", 0) == 0, jitbmm_last_error());
    }
    const jitbmm_hmm_tables no_initial{e.get(), t.get(), nullptr};
    CHECK(run(&tables, &no_initial) == JITBMM_INVALID_ARGUMENT);
    CHECK_MESSAGE(std::string(jitbmm_last_error()).rfind("field.initial: ", 0) == 0, jitbmm_last_error());
    const jitbmm_hmm_gradients odd{static_cast<char*>(g_e.get()) + 1, nullptr, nullptr};
    CHECK(run_backward(&tables, &tables, nullptr, &odd) == JITBMM_INVALID_ARGUMENT);
    CHECK_MESSAGE(std::string(jitbmm_last_error()).rfind("grad_field.emissions: ", 0) == 0, jitbmm_last_error());
    CHECK(jitbmm_chain_expectation_run(ex, e.get(), e.get(), nullptr, out.get(), out.get(), nullptr, nullptr) ==
          JITBMM_INVALID_ARGUMENT);
    CHECK_MESSAGE(std::string(jitbmm_last_error()).rfind("potentials: ", 0) == 0, jitbmm_last_error());
    CHECK(log.launched().empty());
  }
  jitbmm_chain_expectation_destroy(ex);

  // No sequence: no module and no launch; the shared transitions' gradients zeros, the per-sequence initial's left.
  ChainProblem none = p;
  none.B = 0;
  none.batched_transitions = false, none.batched_initial = true;
  none.transition_strides[0] = 0;
  const ChainExpectation empty = ChainExpectation::get(none);
  CHECK(empty.kernel_name().empty());
  c.B = 0, c.batched_transitions = 0, c.batched_initial = 1, c.transition_strides[0] = 0;
  jitbmm_chain_expectation* c_empty = nullptr;
  REQUIRE(jitbmm_chain_expectation_create(&c, 0, &c_empty) == JITBMM_OK);
  const jitbmm_hmm_tables nothing{};
  for (int through_c = 0; through_c < 2; ++through_c) {
    CAPTURE(through_c);
    for (DeviceBuffer* d : {&g_t, &g_i, &g_e}) d->fill_bytes(0x7f);
    const DriverLog log;
    if (through_c) {
      const jitbmm_hmm_gradients gp{nullptr, g_t.get(), g_i.get()}, gf{nullptr, g_e.get(), nullptr};
      CHECK(jitbmm_chain_expectation_run_hmm(c_empty, &nothing, &nothing, nullptr, nullptr, nullptr, nullptr,
                                             nullptr) == JITBMM_OK);
      CHECK(jitbmm_chain_expectation_backward_hmm(c_empty, &nothing, &nothing, nullptr, nullptr, nullptr, nullptr,
                                                  nullptr, nullptr, &gp, &gf, nullptr, 0, nullptr) == JITBMM_OK);
    } else {
      empty(HmmInputs{}, HmmInputs{}, nullptr, nullptr, nullptr);
      empty.backward(HmmInputs{}, HmmInputs{}, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                     HmmGradients{nullptr, g_t.get(), g_i.get()}, HmmGradients{nullptr, g_e.get(), nullptr});
    }
    CHECK(log.launched().empty());
    std::vector<unsigned char> table(49 * 4), field_table(49 * 4), initial(7 * 4);
    g_t.download(table.data(), table.size());
    g_e.download(field_table.data(), field_table.size());
    g_i.download(initial.data(), initial.size());
    CHECK(std::all_of(table.begin(), table.end(), [](unsigned char x) { return x == 0; }));
    CHECK(std::all_of(field_table.begin(), field_table.end(), [](unsigned char x) { return x == 0; }));
    CHECK(std::all_of(initial.begin(), initial.end(), [](unsigned char x) { return x == 0x7f; }));
    // Nothing past the shared table: its gradient is [C][C], not a batch of them.
    std::vector<unsigned char> after(4);
    g_t.download(after.data(), after.size(), table.size());
    CHECK(after == std::vector<unsigned char>(4, 0x7f));
  }
  jitbmm_chain_expectation_destroy(c_empty);
}

// A chain sampler's call is the chain plan's forward, then one launch of the sampling kernel; n = 0 launches nothing,
// and a workspace one byte short is refused before any launch.
TEST_CASE("chain samples: the chain's forward, then a launch of the sampler; none for n = 0 or a short workspace") {
  ChainProblem p;
  p.B = 3, p.T = 6, p.C = 7;
  const ChainSampler sampler = ChainSampler::get(p);
  const std::string module = sampler.kernel_name();
  REQUIRE(module.rfind("chain_sample_f32_c7", 0) == 0);
  DeviceBuffer pot(4 * 3 * 5 * 49), paths(4 * 3 * 10 * 6), work(sampler.workspace_bytes());
  auto draw = [&](int64_t n, std::size_t given) {
    sampler(pot.get(), nullptr, n, 1, static_cast<int32_t*>(paths.get()), nullptr, Workspace{work.get(), given});
  };
  {
    const DriverLog log;
    CHECK_THROWS_WITH_AS(draw(10, sampler.workspace_bytes() - 1), doctest::Contains("workspace"),
                         std::invalid_argument);
    draw(0, sampler.workspace_bytes());
    CHECK(log.launched().empty());
  }
  const DriverLog log;
  draw(10, sampler.workspace_bytes());
  const std::vector<std::string> launched = log.launched();
  REQUIRE(launched.size() == 2);
  CHECK(launched[0] == ChainPlan::get(p).kernel_name());
  CHECK(launched[1] == module);
}

// The k best paths are one launch of their kernel with two positions' lists in dynamic shared memory; B = 0 launches
// nothing, a workspace one byte short is refused before any launch, and what the kernel cannot hold is refused at
// get() naming the field.
TEST_CASE("chain k best: one launch; none for B = 0 or a short workspace; the limits name their fields") {
  ChainProblem p;
  p.semiring = Semiring::max_plus;
  p.B = 3, p.T = 6, p.C = 7;
  const ChainKBest best = ChainKBest::get(p, 4);
  CHECK(best.k() == 4);
  CHECK(best.workspace_bytes() >= std::size_t(3 * 5 * 7 * 4 * 4));
  const std::string module = best.kernel_name();
  REQUIRE(module.rfind("chain_kbest_f32_c7_k4", 0) == 0);
  DeviceBuffer pot(4 * 3 * 5 * 49), scores(4 * 3 * 4), paths(4 * 3 * 4 * 6), work(best.workspace_bytes());
  auto run = [&](const ChainKBest& plan, std::size_t given) {
    plan(pot.get(), nullptr, scores.get(), static_cast<int32_t*>(paths.get()), nullptr, Workspace{work.get(), given});
  };
  {
    const DriverLog log;
    CHECK_THROWS_WITH_AS(run(best, best.workspace_bytes() - 1), doctest::Contains("workspace"),
                         std::invalid_argument);
    ChainProblem empty = p;
    empty.B = 0;
    const ChainKBest none = ChainKBest::get(empty, 4);
    CHECK(none.kernel_name().empty());
    run(none, 0);
    CHECK(log.launched().empty());
  }
  {
    const DriverLog log;
    run(best, best.workspace_bytes());
    CHECK(log.launched() == std::vector<std::string>{module});
  }
  CHECK_THROWS_WITH_AS(ChainKBest::get(p, 0), doctest::Contains("k:"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(ChainKBest::get(p, 17), doctest::Contains("k:"), std::invalid_argument);
  ChainProblem log_chain = p;
  log_chain.semiring = Semiring::log;
  CHECK_THROWS_WITH_AS(ChainKBest::get(log_chain, 4), doctest::Contains("chain.semiring"), std::invalid_argument);
  ChainProblem wide = p;
  wide.C = 1025;
  CHECK_THROWS_WITH_AS(ChainKBest::get(wide, 1), doctest::Contains("chain.C"), std::invalid_argument);
  // 1,024 states of 16 doubles, two positions: 256 KiB, beyond the fake device's 227 KiB a block.
  wide.C = 1024, wide.dtype = DType::f64;
  CHECK_THROWS_WITH_AS(ChainKBest::get(wide, 16), doctest::Contains("k:"), std::invalid_argument);
  CHECK_NOTHROW(ChainKBest::get(wide, 8));
}

// The HMM form's k best paths and samples: the same launches as the CRF form's (the HMM form's own k-best module; the
// sampler after the HMM plan's forward), through C++ and the C ABI; the other form's call is refused naming it.
TEST_CASE("chain k best and samples, the HMM form: their launches through C++ and the C ABI; the other form named") {
  ChainProblem p;
  p.semiring = Semiring::max_plus;
  p.form = ChainForm::hmm;
  p.B = 3, p.T = 6, p.C = 7;
  p.batched_transitions = true;
  p.transition_strides[0] = 49, p.transition_strides[1] = 1, p.transition_strides[2] = 7; // read transposed
  DeviceBuffer e(4 * 3 * 6 * 7), t(4 * 3 * 49), i(4 * 7), scores(4 * 3 * 4), paths(4 * 3 * 10 * 6);
  const HmmInputs hmm{e.get(), t.get(), i.get()};
  const ChainKBest best = ChainKBest::get(p, 4);
  const std::string module = best.kernel_name();
  REQUIRE(module.rfind("chain_kbest_f32_c7_k4", 0) == 0);
  CHECK(module.find("_hmm") != std::string::npos);
  DeviceBuffer work(best.workspace_bytes());
  {
    const DriverLog log;
    best(hmm, nullptr, scores.get(), static_cast<int32_t*>(paths.get()), nullptr,
         Workspace{work.get(), best.workspace_bytes()});
    CHECK(log.launched() == std::vector<std::string>{module});
  }
  CHECK_THROWS_WITH_AS(best(e.get(), nullptr, scores.get(), nullptr), doctest::Contains("potentials"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(best(HmmInputs{e.get(), t.get(), nullptr}, nullptr, scores.get(), nullptr),
                       doctest::Contains("hmm.initial"), std::invalid_argument);
  ChainProblem crf;
  crf.semiring = Semiring::max_plus;
  crf.B = 3, crf.T = 6, crf.C = 7;
  CHECK_THROWS_WITH_AS(ChainKBest::get(crf, 4)(hmm, nullptr, scores.get(), nullptr), doctest::Contains("hmm"),
                       std::invalid_argument);

  ChainProblem lp = p;
  lp.semiring = Semiring::log;
  const ChainSampler sampler = ChainSampler::get(lp);
  {
    const DriverLog log;
    sampler(hmm, nullptr, 10, 1, static_cast<int32_t*>(paths.get()));
    const std::vector<std::string> launched = log.launched();
    REQUIRE(launched.size() == 2);
    CHECK(launched[0] == ChainPlan::get(lp).kernel_name());
    CHECK(launched[1] == sampler.kernel_name());
  }
  CHECK_THROWS_WITH_AS(sampler(e.get(), nullptr, 10, 1, static_cast<int32_t*>(paths.get())),
                       doctest::Contains("potentials"), std::invalid_argument);

  // The C ABI's calls of the same plans.
  jitbmm_chain_problem c{};
  c.semiring = "max_plus", c.dtype = "f32", c.B = 3, c.T = 6, c.C = 7;
  c.form = "hmm", c.batched_transitions = 1;
  c.transition_strides[0] = 49, c.transition_strides[1] = 1, c.transition_strides[2] = 7;
  jitbmm_chain_kbest* kb = nullptr;
  REQUIRE(jitbmm_chain_kbest_create(&c, 4, &kb) == JITBMM_OK);
  {
    const DriverLog log;
    CHECK(jitbmm_chain_kbest_run_hmm(kb, e.get(), t.get(), i.get(), nullptr, scores.get(),
                                     static_cast<int32_t*>(paths.get()), nullptr, 0, nullptr) == JITBMM_OK);
    CHECK(log.launched() == std::vector<std::string>{module});
  }
  CHECK(jitbmm_chain_kbest_run(kb, e.get(), nullptr, scores.get(), nullptr, nullptr, 0, nullptr) ==
        JITBMM_INVALID_ARGUMENT);
  jitbmm_chain_kbest_destroy(kb);
  c.semiring = "log";
  jitbmm_chain_sampler* sp = nullptr;
  REQUIRE(jitbmm_chain_sampler_create(&c, &sp) == JITBMM_OK);
  DeviceBuffer seed(8);
  {
    const DriverLog log;
    CHECK(jitbmm_chain_sampler_run_hmm(sp, e.get(), t.get(), i.get(), nullptr, 10, 3,
                                       static_cast<int32_t*>(paths.get()), nullptr, 0, nullptr) == JITBMM_OK);
    CHECK(jitbmm_chain_sampler_run_hmm_device_seed(
              sp, e.get(), t.get(), i.get(), nullptr, 10, static_cast<const uint64_t*>(seed.get()),
              static_cast<int32_t*>(paths.get()), nullptr, 0, nullptr) == JITBMM_OK);
    CHECK(log.launched().size() == 4);
  }
  jitbmm_chain_sampler_destroy(sp);
}

// The expectation semiring's product: one launch forward, one a gradient asked for; nothing for an empty product.
TEST_CASE("entropy product: one launch forward, one per gradient asked for, none when empty") {
  const EntropyProduct product = EntropyProduct::get(DType::f32, 2, 3, 4, 5);
  const std::string module = product.kernel_name();
  REQUIRE(module.rfind("entropy_product_f32", 0) == 0);
  DeviceBuffer a(2 * 2 * 3 * 4 * 4), b(2 * 2 * 4 * 5 * 4), out(2 * 2 * 3 * 5 * 4), grad(2 * 2 * 3 * 5 * 4),
      ga(2 * 2 * 3 * 4 * 4), gb(2 * 2 * 4 * 5 * 4);
  {
    const DriverLog log;
    product(a.get(), b.get(), out.get());
    product.backward(a.get(), b.get(), out.get(), grad.get(), ga.get(), gb.get());
    product.backward(a.get(), b.get(), out.get(), grad.get(), nullptr, gb.get());
    product.backward(a.get(), b.get(), out.get(), grad.get(), nullptr, nullptr);
    CHECK(log.launched() ==
          std::vector<std::string>{module, module + "_grad_a", module + "_grad_b", module + "_grad_b"});
  }
  const DriverLog log;
  const EntropyProduct empty = EntropyProduct::get(DType::f64, 0, 3, 4, 5);
  CHECK(empty.kernel_name().empty());
  empty(nullptr, nullptr, nullptr);
  empty.backward(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr);
  // No output (M or N 0) but terms: the operand with elements gets a gradient of zeros (the fake driver's memory is
  // the host's), written without a launch.
  for (const bool rows : {true, false}) {
    CAPTURE(rows);
    const int64_t M = rows ? 0 : 3, N = rows ? 5 : 0;
    const EntropyProduct no_output = EntropyProduct::get(DType::f32, 2, M, 4, N);
    std::memset(ga.get(), 0xff, ga.size());
    std::memset(gb.get(), 0xff, gb.size());
    no_output.backward(a.get(), b.get(), out.get(), grad.get(), ga.get(), gb.get());
    const auto* g = static_cast<const unsigned char*>(rows ? gb.get() : ga.get());
    const std::size_t bytes = std::size_t(2 * 2 * 4 * (rows ? N : M)) * 4;
    CHECK(std::all_of(g, g + bytes, [](unsigned char c) { return c == 0; }));
  }
  CHECK(log.launched().empty());
  CHECK_THROWS_WITH_AS(product(nullptr, b.get(), out.get()), doctest::Contains("a"), std::invalid_argument);
}

// The k-max semiring's product: one launch; none when empty; its limits name their fields.
TEST_CASE("kmax product: one launch, none when empty, the limits named") {
  const KMaxProduct product = KMaxProduct::get(DType::f32, 4, 2, 3, 5, 6);
  const std::string module = product.kernel_name();
  REQUIRE(module.rfind("kmax_product_f32_k4", 0) == 0);
  DeviceBuffer a(4 * 2 * 3 * 5 * 4), b(4 * 2 * 5 * 6 * 4), out(4 * 2 * 3 * 6 * 4), index(4 * 2 * 3 * 6 * 4);
  {
    const DriverLog log;
    product(a.get(), b.get(), out.get(), static_cast<int32_t*>(index.get()));
    CHECK(log.launched() == std::vector<std::string>{module});
  }
  const DriverLog log;
  const KMaxProduct empty = KMaxProduct::get(DType::f64, 2, 3, 0, 5, 6);
  CHECK(empty.kernel_name().empty());
  empty(nullptr, nullptr, nullptr, nullptr);
  CHECK(log.launched().empty());
  CHECK_THROWS_WITH_AS(KMaxProduct::get(DType::f32, 17, 1, 1, 1, 1), doctest::Contains("k:"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(KMaxProduct::get(DType::bf16, 2, 1, 1, 1, 1), doctest::Contains("dtype"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(product(a.get(), b.get(), out.get(), nullptr), doctest::Contains("index"),
                       std::invalid_argument);
}

// A chain whose inputs fill much of the device: the chunked strategy's passes take at most an eighth of its memory
// (the fake's 2 GiB here), however large the inputs, so its backward's scratch leaves room for them and their
// gradient; the layout's sizes and the launches agree.
TEST_CASE("the chunked strategy's scratch stays within an eighth of the device's memory, whatever the inputs") {
  ChainProblem p;
  p.B = 1, p.T = 65537, p.C = 64; // 1 GiB of f32 potentials: four times them would be 4 GiB
  const ChainPlan plan = ChainPlan::get(p);
  REQUIRE(std::string(plan.strategy()) == "chunked");
  const std::size_t eighth = current_device()->total_memory / 8;
  CHECK(current_device()->total_memory == std::size_t(2) << 30);
  CHECK(plan.backward_workspace_bytes() <= eighth + (std::size_t(64) << 20)); // its passes, and what is not in them
  CHECK(plan.workspace_bytes(false) <= eighth + (std::size_t(64) << 20));
}

// A stepped plan of one position has no step: its first call plans and builds no product (a compile, a module load
// inside a call that a graph may be capturing).
TEST_CASE("a stepped chain plan of one position loads no product kernel at its first call") {
  ChainProblem p;
  p.B = 2, p.T = 1, p.C = 2048; // beyond 1024 states: the stepped strategy
  const ChainPlan plan = ChainPlan::get(p);
  REQUIRE(std::string(plan.strategy()) == "stepped");
  DeviceBuffer inputs(64), score(std::size_t(p.B) * 4), saved(plan.saved_bytes() + 1),
      work(std::max<std::size_t>(plan.workspace_bytes(false), 1));
  const DriverLog log;
  plan(inputs.get(), nullptr, score.get(), saved.get(), nullptr, nullptr, nullptr,
       Workspace{work.get(), plan.workspace_bytes(false)});
  CHECK(log.loads() == 0);
}
