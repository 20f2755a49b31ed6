// Compile-only: the chain modules for every semiring, dtype (f16 and bf16 at fewer state counts) and input form, at
// state counts that reach each shape of the kernels (one lane per state, groups of lanes, the next step's potentials
// in registers or not, more states than threads, a cluster of blocks per sequence), build for sm_90 without spills
// in any entry but a bounded few in the saving forward of the clusters the rule takes and in half forwards (all of
// them with JITBMM_NVRTC_SWEEP=full, else the subset sweep.hpp chooses). No GPU needed.
#include <doctest/doctest.h>

#include <algorithm>
#include <future>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "generator/chain_source.hpp"
#include "jitbmm/types.hpp"
#include "nvrtc/sweep.hpp"
#include "runtime/nvrtc_compiler.hpp"

using namespace jitbmm;

// The clusters the rule takes: their saving forward keeps both recursions' next steps in registers where the
// estimate says they fit, and a few words of that may spill. Measured with its spill (80 bytes) at B, T, C = 16, 256,
// 256 it was still the fastest variant (2.59 ms against 3.62 for clusters of 2 without), so a bound, not none.
constexpr int kRuleClusterSpillBytes = 256;
// Half types' terms wait in registers as stored, 16-bit values that take a register each and a few more than the
// estimate counts: at 128 states in one block of 512 threads the forward spills 20 bytes, and measured no slower
// than f32's unspilled forward there. A bound for the half forwards, none for their backward.
constexpr int kHalfForwardSpillBytes = 64;

TEST_CASE("every chain module compiles for sm_90 without spills (a few words in the rule's clustered saving forward "
          "and half forwards)") {
  std::vector<ChainSpec> specs;
  std::vector<bool> rule_clustered; // specs[i] is a clustered spec the rule takes
  for (ChainForm form : {ChainForm::crf, ChainForm::hmm})
    for (Semiring semiring : {Semiring::log, Semiring::max_plus})
      for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16})
        for (int64_t C : {1, 2, 33, 64, 128, 129, 256, 257, 1024}) {
          // Half inputs change what a load reads, not the kernels' shapes: fewer state counts for them.
          if (dtype_info(dtype).half && (C == 2 || C == 64 || C == 129 || C == 256)) continue;
          ChainProblem problem;
          problem.form = form;
          problem.semiring = semiring;
          problem.dtype = dtype;
          problem.B = 3;
          problem.T = 5;
          problem.C = C;
          specs.push_back(default_chain_spec(problem));
          rule_clustered.push_back(false);
          // Each sequence over a cluster of blocks (sm_90), where a block keeps one state, a few, or many; and the
          // clusters the rule takes on 132 SMs for batches of 8 and 16 (the two forwards' sizes may differ).
          if (C == 33 || C == 128 || C == 1024)
            for (int cluster : {2, 4, 8})
              if (const ChainSpec s = clustered_chain_spec(problem, cluster); s.registers_fit()) {
                specs.push_back(s);
                rule_clustered.push_back(false);
              }
          for (int64_t B : {8, 16}) {
            problem.B = B;
            const ChainSpec s = default_chain_spec(problem, 132);
            if (std::find(specs.begin(), specs.end(), s) == specs.end()) {
              specs.push_back(s);
              rule_clustered.push_back(true);
            }
          }
        }
  // The sweep's subset (sweep.hpp): each spec's fields but the block sizes, the shapes of its loops, the templates it
  // inlines; the largest state count and the clusters the rule takes (the bounded spills) always.
  std::vector<test::SweepItem> items;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const ChainSpec& s = specs[i];
    test::SweepItem item;
    std::istringstream fields(to_string(s));
    for (std::string f; fields >> f;)
      if (f.rfind("semiring=", 0) == 0 || f.rfind("dtype=", 0) == 0 || f.rfind("C=", 0) == 0)
        item.features.push_back(f);
    item.features.push_back(s.form == ChainForm::hmm ? "form=hmm" : "form=crf");
    for (const ChainLoop* loop : {&s.forward, &s.saving}) {
      const std::string at = loop == &s.forward ? "forward " : "saving ";
      item.features.push_back(at + "cluster=" + std::to_string(loop->cluster));
      item.features.push_back(at + "prefetch=" + std::to_string(s.prefetch(*loop)));
      item.features.push_back(at + "lanes>1=" + std::to_string(loop->lanes > 1));
      item.features.push_back(at + "states>threads=" + std::to_string(s.C > loop->threads));
    }
    for (std::string& t : test::inlined_templates(emit_chain_kernel(s).source)) item.features.push_back(std::move(t));
    items.push_back(std::move(item));
  }
  // The largest: in each form, of f32 and of a half type (their forwards' own bound), the most states in the clusters
  // the rule takes, whose spills are bounded rather than none (the cover reaches the most states in one block).
  std::map<std::string, std::size_t> most;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    if (!rule_clustered[i] || (specs[i].dtype != DType::f32 && specs[i].dtype != DType::f16)) continue;
    const std::string group =
        std::string(dtype_info(specs[i].dtype).name) + (specs[i].form == ChainForm::hmm ? " hmm" : " crf");
    const auto it = most.find(group);
    if (it == most.end() || specs[it->second].C < specs[i].C) most[group] = i;
  }
  for (const auto& [group, i] : most) items[i].largest = true;
  const test::SweepPlan plan = test::sweep_plan_from_env();
  const test::SweepChoice choice = test::select_sweep(items, plan);
  MESSAGE(test::describe(choice, plan, specs.size(), "chain modules"));
  std::vector<ChainSpec> chosen;
  std::vector<bool> chosen_rule_clustered;
  for (std::size_t i : choice.chosen) chosen.push_back(specs[i]), chosen_rule_clustered.push_back(rule_clustered[i]);
  specs.swap(chosen);
  rule_clustered.swap(chosen_rule_clustered);
  // NVRTC is thread-safe: compile on every core, check on this thread.
  std::vector<std::future<std::pair<GeneratedKernel, std::string>>> logs;
  const std::size_t workers = std::max(2u, std::thread::hardware_concurrency());
  std::vector<std::pair<GeneratedKernel, std::string>> done;
  test::SweepProgress progress("jitbmm_test_nvrtc chain modules", specs.size());
  for (std::size_t i = 0; i < specs.size(); ++i) {
    logs.push_back(std::async(std::launch::async, [spec = specs[i], &progress] {
      const GeneratedKernel k = emit_chain_kernel(spec);
      auto compiled = std::make_pair(k, compile_to_cubin(k, "sm_90", PtxasReport::wanted).log);
      progress.one_done();
      return compiled;
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
      const bool forward = entry.empty() || entry == "_saving";
      const int allowed = rule_clustered[i] && entry == "_saving" ? kRuleClusterSpillBytes
                          : dtype_info(specs[i].dtype).half && forward ? kHalfForwardSpillBytes
                                                                        : 0;
      CHECK(r.registers > 0);
      CHECK(r.spill_store_bytes <= allowed);
      CHECK(r.spill_load_bytes <= allowed);
    }
  }
}

TEST_CASE("the chunked strategy's modules compile for sm_90 without spills, every dtype, one to 1024 states") {
  for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16})
    for (int C : {1, 33, 64, 1024}) {
      const GeneratedKernel k = emit_chunk_kernel(dtype, C);
      CAPTURE(k.name);
      const std::string log = compile_to_cubin(k, "sm_90", PtxasReport::wanted).log;
      for (const std::string& entry : k.entries) {
        CAPTURE(entry);
        const PtxasResources r = parse_ptxas_log(log, k.name + entry);
        CHECK(r.registers > 0);
        CHECK(r.spill_store_bytes == 0);
      }
    }
}
