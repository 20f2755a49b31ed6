// Compile-only: the chain units for every semiring, dtype (f16 and bf16 at fewer state counts) and input form, at
// state counts that reach each shape of the kernels (one lane per state, groups of lanes, the next step's potentials
// in registers or not, more states than threads, a cluster of blocks per sequence), build for sm_90 without spills
// in any entry but a bounded few in the saving forward of the clusters the rule takes and in half forwards (all of
// them with JITBMM_NVRTC_SWEEP=full, else the subset sweep.hpp chooses); and the modules a chain plan takes by default
// build for every supported architecture (archs.hpp), with clusters where it has them. No GPU needed.
#include <doctest/doctest.h>

#include <algorithm>
#include <future>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "generator/chain_source.hpp"
#include "generator/distribution_source.hpp"
#include "generator/step_source.hpp"
#include "jitbmm/types.hpp"
#include "nvrtc/archs.hpp"
#include "nvrtc/compile_pool.hpp"
#include "nvrtc/sweep.hpp"
#include "runtime/chain_plan.hpp"
#include "runtime/nvrtc_compiler.hpp"
#include "templates/chain/edge_params.cuh"

using namespace jitbmm;

// The clusters the rule takes: their saving forward keeps both recursions' next steps in registers where the
// estimate says they fit, and a few words of that may spill. Measured with its spill (80 bytes) at B, T, C = 16, 256,
// 256 it was still the fastest variant (2.59 ms against 3.62 for clusters of 2 without), so a bound, not none.
constexpr int kRuleClusterSpillBytes = 256;
// Half types' terms wait in registers as stored, 16-bit values that take a register each and a few more than the
// estimate counts: at 128 states in one block of 512 threads the forward spills 20 bytes, and measured no slower
// than f32's unspilled forward there. A bound for the half forwards, none for their backward.
constexpr int kHalfForwardSpillBytes = 64;
// The HMM form's saving forward the rule compiles for two blocks an SM (with_rule_saving_blocks): the loop of one
// block's registers held in 128, which ptxas keeps by spilling a few words (measured faster all the same where its
// launch outnumbers the SMs). A bound, so that more shows.
constexpr int kTwoBlockSpillBytes = 256;
// The HMM backward's mma blocks ("_edges_mma", 128 registers a thread): their fragments' sums and the transitions
// they hold for the term-by-term path leave ptxas a few words to spill at some sizes (stores and loads of 16 and 32
// bytes at 128 states, 34 and 72 at 224, none at 192 and 256). A bound, so that more shows.
constexpr int kMmaEdgeSpillBytes = 96;
// A ring the device's shared memory shortens (ChainSpec::shared_limit below sm_90's) changes how ptxas keeps a loop's
// registers: f64's saving forward of 128 states keeps its five stages on sm_90 unspilled and spills 136 bytes in the
// four an A100 holds. Not timed on such a GPU: a bound, so that more shows.
constexpr int kShortRingSpillBytes = 192;
// The expectations' saving forward, both sweeps in one kernel ("_saving"): where one sweep alone fills a thread's share
// of the registers (f32 in blocks of 512 threads, f64 of 1,024 states) ptxas keeps the two by spilling a few words.
// A bound, so that more shows.
constexpr int kSavingSweepsSpillBytes = 64;

namespace {

// A chain unit's features for the sweep's subset (sweep.hpp): its spec's fields but the block sizes, which unit, the
// shapes of the loops it runs, the templates it inlines.
std::vector<std::string> unit_features(const ChainSpec& s, ChainUnit unit) {
  std::vector<std::string> features;
  std::istringstream fields(to_string(s));
  for (std::string f; fields >> f;)
    if (f.rfind("semiring=", 0) == 0 || f.rfind("dtype=", 0) == 0 || f.rfind("C=", 0) == 0) features.push_back(f);
  features.push_back(s.form == ChainForm::hmm ? "form=hmm" : "form=crf");
  const char* names[] = {"forward", "saving", "backward"};
  features.push_back(std::string("unit=") + names[int(unit)]);
  std::vector<const ChainLoop*> loops;
  if (unit == ChainUnit::forward) loops = {&s.forward};
  if (unit == ChainUnit::saving) loops = {&s.saving};
  for (const ChainLoop* loop : loops) {
    const std::string at = loop == &s.forward ? "forward " : "saving ";
    features.push_back(at + "cluster=" + std::to_string(loop->cluster));
    features.push_back(at + "blocks=" + std::to_string(loop->blocks));
    features.push_back(at + "prefetch=" + std::to_string(s.prefetch(*loop)));
    features.push_back(at + "lanes>1=" + std::to_string(loop->lanes > 1));
    features.push_back(at + "states>threads=" + std::to_string(s.C > loop->threads));
  }
  if (unit == ChainUnit::saving) features.push_back("beta staged=" + std::to_string(s.beta_staged()));
  for (std::string& t : test::inlined_templates(emit_chain_kernel(s, unit).source)) features.push_back(std::move(t));
  return features;
}

// A spec's units with what each is: the forward, log's saving forward, the backward.
std::vector<std::pair<GeneratedKernel, ChainUnit>> units_of(const ChainSpec& spec) {
  std::vector<std::pair<GeneratedKernel, ChainUnit>> units;
  for (ChainUnit unit : {ChainUnit::forward, ChainUnit::saving, ChainUnit::backward})
    if (unit != ChainUnit::saving || spec.semiring == Semiring::log)
      units.emplace_back(emit_chain_kernel(spec, unit), unit);
  return units;
}

// A chain spec's features: its units'.
std::vector<std::string> chain_features(const ChainSpec& s) {
  std::vector<std::string> features;
  for (const auto& [kernel, unit] : units_of(s))
    for (std::string& f : unit_features(s, unit)) features.push_back(std::move(f));
  std::sort(features.begin(), features.end());
  features.erase(std::unique(features.begin(), features.end()), features.end());
  return features;
}

// The spill bounds above, for a unit of `spec` (`rule_clustered`: clusters the rule takes).
int allowed_spill_bytes(const ChainSpec& spec, bool rule_clustered, ChainUnit unit) {
  return unit == ChainUnit::saving && spec.saving.blocks > 1          ? kTwoBlockSpillBytes
         : rule_clustered && unit == ChainUnit::saving                ? kRuleClusterSpillBytes
         : dtype_info(spec.dtype).half && unit != ChainUnit::backward ? kHalfForwardSpillBytes
                                                                      : 0;
}

} // namespace

TEST_CASE("every chain unit compiles for sm_90 without spills (a few words in the rule's clustered saving forward "
          "and half forwards)") {
  std::vector<ChainSpec> specs;
  std::vector<bool> rule_clustered; // specs[i] is a clustered spec the rule takes
  for (ChainForm form : {ChainForm::crf, ChainForm::hmm})
    for (Semiring semiring : {Semiring::log, Semiring::max_plus})
      for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16})
        for (int64_t C : {1, 2, 32, 33, 64, 128, 129, 256, 257, 1024}) {
          // Half inputs change what a load reads, not the kernels' shapes: fewer state counts for them.
          if (dtype_info(dtype).half && (C == 2 || C == 32 || C == 64 || C == 129 || C == 256)) continue;
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
          // and the saving forward for two blocks an SM the rule takes where a launch outnumbers the SMs
          for (int64_t B : {8, 16, 256}) {
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
  for (const ChainSpec& s : specs) items.push_back({chain_features(s)});
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
  MESSAGE(test::describe(choice, plan, specs.size(), "chain specs"));
  std::vector<ChainSpec> chosen;
  std::vector<bool> chosen_rule_clustered;
  for (std::size_t i : choice.chosen) chosen.push_back(specs[i]), chosen_rule_clustered.push_back(rule_clustered[i]);
  specs.swap(chosen);
  rule_clustered.swap(chosen_rule_clustered);
  // Each unit once (specs that differ in one loop share the others), with the spec and unit that bound its spills.
  struct Unit {
    GeneratedKernel kernel;
    std::size_t spec;
    ChainUnit unit;
  };
  std::vector<Unit> units;
  std::map<std::string, std::size_t> seen; // a unit's name (its text's hash in it) → where in `units`
  for (std::size_t i = 0; i < specs.size(); ++i)
    for (auto& [kernel, unit] : units_of(specs[i])) {
      const auto [at, added] = seen.emplace(kernel.name, units.size());
      if (added)
        units.push_back({std::move(kernel), i, unit});
      else if (!rule_clustered[i]) // the stricter bound where one spec of the unit has it
        units[at->second].spec = i;
    }
  // NVRTC is thread-safe: compile on every core, check on this thread.
  std::vector<std::future<std::string>> logs;
  const std::size_t workers = std::max(2u, std::thread::hardware_concurrency());
  std::vector<std::string> done;
  test::SweepProgress progress("jitbmm_test_nvrtc chain units", units.size());
  for (std::size_t i = 0; i < units.size(); ++i) {
    logs.push_back(std::async(std::launch::async, [&kernel = units[i].kernel, &progress] {
      std::string log = compile_to_cubin(kernel, "sm_90", PtxasReport::wanted).log;
      progress.one_done();
      return log;
    }));
    if (logs.size() == workers || i + 1 == units.size()) {
      for (auto& f : logs) {
        REQUIRE_NOTHROW(done.push_back(f.get()));
      }
      logs.clear();
    }
  }
  for (std::size_t i = 0; i < done.size(); ++i) {
    const Unit& u = units[i];
    CAPTURE(to_string(specs[u.spec]));
    CAPTURE(u.kernel.name);
    for (const std::string& entry : u.kernel.entries) {
      CAPTURE(entry);
      const PtxasResources r = parse_ptxas_log(done[i], u.kernel.name + entry);
      const int allowed = entry == "_edges_mma" ? kMmaEdgeSpillBytes
                                                : allowed_spill_bytes(specs[u.spec], rule_clustered[u.spec], u.unit);
      CHECK(r.registers > 0);
      CHECK(r.spill_store_bytes <= allowed);
      CHECK(r.spill_load_bytes <= allowed);
      for (const int kind : {jb::kEdgeNarrow, jb::kEdgeWide, jb::kEdgeMma}) {
        if (entry != ChainSpec::edge_entry(kind)) continue; // the shared memory HmmSums::split counts on an SM
        const ChainSpec& s = specs[u.spec];
        const unsigned shared = jb::edge_shape(int(s.C), s.edge_threads(kind), s.edge_rows(kind),
                                               dtype_info(s.dtype).acc_bytes, s.semiring == Semiring::log, kind)
                                    .shared;
        CHECK(unsigned(r.shared_bytes) <= shared);
        CHECK(unsigned(r.shared_bytes) + 64 >= shared); // not so far above that it wastes the SM's blocks
      }
    }
  }
}

TEST_CASE("the chunked strategy's modules compile for sm_90 without spills, every semiring and dtype, 1 to 1024 states") {
  test::NoSpills spills("chunked modules");
  for (Semiring semiring : {Semiring::log, Semiring::max_plus})
    for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16})
      for (int C : {1, 33, 64, 1024})
        spills.add(emit_chunk_kernel(semiring, dtype, C), 90, C == 1024 && dtype == DType::f64);
  spills.check();
}

TEST_CASE("the stepped strategy's modules compile for the oldest and the newest architecture without spills") {
  test::NoSpills spills("stepped modules");
  // One module per semiring, dtype and form serves every C; the floor's and sm_90's code paths differ (features.cuh).
  for (int sm : {75, 90})
    for (ChainForm form : {ChainForm::crf, ChainForm::hmm})
      for (Semiring semiring : {Semiring::log, Semiring::max_plus})
        for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16})
          for (bool backward : {false, true})
            spills.add(emit_step_kernel(semiring, dtype, form, backward), sm, dtype == DType::f64);
  spills.check();
}

TEST_CASE("the stepped strategy's fused units compile for the oldest and the newest architecture without spills") {
  test::NoSpills spills("fused units");
  for (int sm : {75, 90})
    for (Semiring semiring : {Semiring::log, Semiring::max_plus})
      for (DType dtype : {DType::f32, DType::f16, DType::bf16})
        for (bool resident : {false, true})
          for (bool beta : {false, true})
            if (!beta || semiring == Semiring::log) // the resident entries hold the most
              spills.add(emit_fused_step_kernel(semiring, dtype, beta, resident), sm, resident && dtype == DType::f32);
  // The paired entries have 64 registers a thread, where the others have 128: what they keep across a position (the
  // rows' pointers and lengths, the carried outputs) spills to local memory, read once a position, which costs less
  // than running the saving forward's two passes one after the other (bench/RESULTS.md).
  for (int sm : {75, 90})
    for (DType dtype : {DType::f32, DType::f16, DType::bf16})
      for (bool beta : {false, true})
        spills.add(emit_fused_step_kernel(Semiring::log, dtype, beta, true, true), sm, false, {""}, 320);
  spills.check();
  CHECK_THROWS_WITH_AS(emit_fused_step_kernel(Semiring::log, DType::f64, false, true), doctest::Contains("dtype"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(emit_fused_step_kernel(Semiring::plus_times, DType::f32, false, true),
                       doctest::Contains("semiring"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(emit_fused_step_kernel(Semiring::max_plus, DType::f32, true, true), doctest::Contains("beta"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(emit_fused_step_kernel(Semiring::max_plus, DType::f32, false, true, true),
                       doctest::Contains("paired"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(emit_fused_step_kernel(Semiring::log, DType::f32, false, false, true),
                       doctest::Contains("paired"), std::invalid_argument);
}

TEST_CASE("the expectation modules compile for the oldest and the newest architecture without spills (a few words in "
          "the saving forward's two sweeps), 1 to 1024 states") {
  test::NoSpills spills("expectation modules");
  const auto add = [&](GeneratedKernel kernel, int sm, bool largest = false) {
    spills.add(std::move(kernel), sm, largest, {"_saving"}, kSavingSweepsSpillBytes);
  };
  // One block a sequence whose lanes and threads depend on C and the dtype's accumulator: a step's terms held a step
  // ahead in registers up to 128 states (f32), loaded round by round past them; lanes that split the states unevenly
  // at 33 and 600.
  for (int sm : {75, 90})
    for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16})
      for (int C : {1, 16, 33, 128, 600, 1024})
        add(emit_expect_kernel(dtype, C), sm, C == 1024 && !dtype_info(dtype).half);
  // A sequence a cluster of blocks (sm_90), each a share of the target states: 16 of 128 in 8 blocks, 33 of 129 in 4
  // (the last 30).
  for (DType dtype : {DType::f32, DType::f64})
    for (auto [C, cluster] : {std::pair{128, 8}, {129, 4}, {1024, 8}}) add(emit_expect_kernel(dtype, C, cluster), 90);
  // The fields that are a second chain: its messages beside p's, from the same loads.
  for (int field : {1, 2})
    for (auto [C, cluster] : {std::pair{128, 1}, {128, 8}, {1024, 1}})
      add(emit_expect_kernel(DType::f32, C, cluster, field), 90);
  add(emit_expect_kernel(DType::f64, 1024, 1, 1), 90, true); // its warps' sums in a message buffer
  add(emit_expect_kernel(DType::bf16, 128, 1, 2), 75);
  // The HMM form's: its terms formed from the tables in the accumulator type, and its gradients' passes over the
  // states, the transitions' tiles and their sums.
  for (int field : {0, 1, 2}) {
    for (int C : {1, 33, 600, 1024}) add(emit_expect_kernel(DType::f32, C, 1, field, true), 90);
    add(emit_expect_kernel(DType::f64, 1024, 1, field, true), 90, true);
    add(emit_expect_kernel(DType::f32, 129, 4, field, true), 90);
  }
  for (DType dtype : {DType::f64, DType::f16, DType::bf16}) add(emit_expect_kernel(dtype, 64, 1, 2, true), 75);
  spills.check();
  CHECK(emit_expect_kernel(DType::f32, 64, 1, 0, true).name.find("_hmm") != std::string::npos);
  CHECK_THROWS_WITH_AS(emit_expect_kernel(DType::f32, 128, 1, 3), doctest::Contains("field:"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(emit_expect_kernel(DType::f32, 128, 3), doctest::Contains("cluster:"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(emit_expect_kernel(DType::f32, 128, 16), doctest::Contains("cluster:"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(emit_expect_kernel(DType::f32, 1025), doctest::Contains("C:"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(emit_expect_kernel(DType::f32, 0), doctest::Contains("C:"), std::invalid_argument);
}

TEST_CASE("the sampling modules compile for the oldest and the newest architecture without spills") {
  test::NoSpills spills("sampling modules");
  for (int sm : {75, 90})
    for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16})
      for (int C : {1, 33, 1024, 16384})
        spills.add(emit_sample_kernel(dtype, C), sm, C == 16384 && dtype == DType::f64);
  spills.check();
  CHECK_THROWS_WITH_AS(emit_sample_kernel(DType::f32, 16385), doctest::Contains("C:"), std::invalid_argument);
}

TEST_CASE("the k-best modules compile for the oldest and the newest architecture without spills, 1 to 1024 states") {
  test::NoSpills spills("k-best modules");
  // The fewest lanes and threads (1 state), uneven rounds of targets (33, 600), the most registers a lane (1,024);
  // half types only load differently.
  for (int sm : {75, 90}) {
    for (DType dtype : {DType::f32, DType::f64})
      for (int C : {1, 33, 600, 1024})
        for (int k : {1, 16}) spills.add(emit_kbest_kernel(dtype, C, k), sm, C == 1024 && k == 16);
    for (DType dtype : {DType::f16, DType::bf16}) spills.add(emit_kbest_kernel(dtype, 64, 4), sm);
  }
  // A sequence a cluster of blocks (sm_90), each choosing for a share of the target states.
  for (auto [C, cluster] : {std::pair{128, 8}, {129, 4}, {1024, 8}})
    spills.add(emit_kbest_kernel(DType::f32, C, 4, cluster), 90);
  // The HMM form, which also loads each round's emission ahead: its most registers a lane, uneven rounds, a cluster.
  for (DType dtype : {DType::f32, DType::f64})
    for (auto [C, k] : {std::pair{33, 4}, {600, 16}, {1024, 16}})
      spills.add(emit_kbest_kernel(dtype, C, k, 1, true), 90, C == 1024);
  spills.add(emit_kbest_kernel(DType::bf16, 16, 3, 1, true), 75);
  spills.add(emit_kbest_kernel(DType::f32, 129, 4, 4, true), 90);
  spills.check();
  CHECK_THROWS_WITH_AS(emit_kbest_kernel(DType::f32, 128, 4, 3), doctest::Contains("cluster:"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(emit_kbest_kernel(DType::f32, 1025, 4), doctest::Contains("C:"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(emit_kbest_kernel(DType::f32, 8, 0), doctest::Contains("k:"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(emit_kbest_kernel(DType::f32, 8, 17), doctest::Contains("k:"), std::invalid_argument);
}

TEST_CASE("the expectation semiring's product compiles for the oldest and the newest architecture without spills") {
  test::NoSpills spills("entropy products");
  for (int sm : {75, 90})
    for (DType dtype : {DType::f32, DType::f64}) spills.add(emit_entropy_product_kernel(dtype), sm);
  spills.check();
  CHECK_THROWS_WITH_AS(emit_entropy_product_kernel(DType::bf16), doctest::Contains("dtype"), std::invalid_argument);
}

TEST_CASE("the k-max semiring's product compiles for the oldest and the newest architecture without spills") {
  test::NoSpills spills("k-max products");
  // k = 16 holds 16 values and their origins in registers, and two vectors' entries a step.
  for (int sm : {75, 90})
    for (DType dtype : {DType::f32, DType::f64})
      for (int k : {1, 4, 16}) spills.add(emit_kmax_product_kernel(dtype, k), sm, k == 16);
  spills.check();
  CHECK_THROWS_WITH_AS(emit_kmax_product_kernel(DType::f32, 17), doctest::Contains("k:"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(emit_kmax_product_kernel(DType::f16, 4), doctest::Contains("dtype"), std::invalid_argument);
}

TEST_CASE("the default chain units compile for every supported architecture: clusters where it has them") {
  const test::TestArchs archs = test::test_archs();
  CHECK_MESSAGE(archs.missing.empty(), "NVRTC " << nvrtc_version() << " cannot target " << test::sm_names(archs.missing));
  if (!archs.note.empty()) MESSAGE(archs.note);
  // What ChainPlan::get takes with no decision stored (choose_chain_spec): the rule's spec for a device of 132 SMs
  // that lends them to clusters (sm_90) or none, and the chunked strategy's module where default_chain_chunk takes it.
  struct Job {
    GeneratedKernel kernel;
    int sm;
    ChainSpec spec;        // of a sequential unit
    ChainUnit unit;        // which
    bool clustered, chunk; // by the rule; the chunked strategy's module
  };
  std::map<std::pair<std::string, int>, std::size_t> seen; // source and architecture: each compiled once
  std::vector<Job> jobs;
  std::vector<test::SweepItem> items;
  for (int sm : archs.sms)
    for (ChainForm form : {ChainForm::crf, ChainForm::hmm})
      for (Semiring semiring : {Semiring::log, Semiring::max_plus})
        for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16})
          for (int64_t C : {1, 2, 33, 64, 128, 257, 512, 1024})
            for (int64_t B : {1, 3, 16}) {
              ChainProblem problem;
              problem.form = form, problem.semiring = semiring, problem.dtype = dtype;
              problem.B = B, problem.T = 4096, problem.C = C;
              ChainSpec spec = default_chain_spec(problem, arch_features(sm).has(kClusters) ? 132 : 0);
              spec.shared_limit = test::shared_optin_bytes(sm); // as a plan on such a GPU makes it
              const bool clustered = std::max(spec.forward.cluster, spec.saving.cluster) > 1;
              std::vector<std::tuple<GeneratedKernel, ChainUnit, bool>> modules;
              for (auto& [kernel, unit] : units_of(spec)) modules.emplace_back(std::move(kernel), unit, false);
              if (default_chain_chunk(problem) > 0)
                modules.emplace_back(emit_chunk_kernel(semiring, dtype, int(C)), ChainUnit::forward, true);
              for (auto& [kernel, unit, chunk] : modules) {
                if (!seen.emplace(std::make_pair(kernel.source, sm), jobs.size()).second) continue;
                std::vector<std::string> features = unit_features(spec, unit);
                if (chunk) {
                  features = {"chunked module", "chunked dtype=" + std::string(dtype_info(dtype).name),
                              "chunked semiring=" + std::string(semiring_info(semiring).name)};
                  for (std::string& t : test::inlined_templates(kernel.source)) features.push_back(std::move(t));
                }
                // Each template, the chunked modules and the clusters on every kind of architecture that has them.
                items.push_back(test::on_arch(features, sm_name(sm), {"template:", "chunked module", "forward cluster="},
                                              test::feature_kind(sm, archs.sms)));
                items.back().cost = double(C);
                jobs.push_back({std::move(kernel), sm, spec, unit, clustered, chunk});
              }
            }
  test::SweepPlan plan = test::sweep_plan_from_env();
  plan.sample_share /= 4; // of five architectures' modules: about as many drawn as for one
  const test::SweepChoice choice = test::select_sweep(items, plan);
  MESSAGE(test::describe(choice, plan, items.size(), "default chain units on each architecture"));
  std::vector<std::pair<GeneratedKernel, int>> chosen;
  for (std::size_t i : choice.chosen) chosen.emplace_back(jobs[i].kernel, jobs[i].sm);
  const std::vector<test::ArchCompile> done = test::compile_on_archs(chosen, "jitbmm_test_nvrtc default chains");
  for (std::size_t n = 0; n < done.size(); ++n) {
    const Job& job = jobs[choice.chosen[n]];
    CAPTURE(job.kernel.name);
    CAPTURE(sm_name(job.sm));
    CHECK_MESSAGE(done[n].error.empty(), done[n].error);
    for (const std::string& entry : job.kernel.entries) {
      CAPTURE(entry);
      const PtxasResources r = parse_ptxas_log(done[n].log, job.kernel.name + entry);
      ChainSpec unbounded = job.spec;
      unbounded.shared_limit = 0;
      const bool short_ring = unbounded.stages(job.spec.forward) != job.spec.stages(job.spec.forward) ||
                              unbounded.stages(job.spec.saving) != job.spec.stages(job.spec.saving) ||
                              unbounded.stages(job.spec.beta()) != job.spec.stages(job.spec.beta());
      const int allowed = (job.chunk ? 0 : allowed_spill_bytes(job.spec, job.clustered, job.unit)) +
                          test::older_arch_spill_bytes(job.sm) + (!job.chunk && short_ring ? kShortRingSpillBytes : 0);
      CHECK(r.registers > 0);
      CHECK(r.spill_store_bytes <= allowed);
      CHECK(r.spill_load_bytes <= allowed);
      // Its static shared memory and the dynamic shared memory its launches ask for fit such a GPU's block.
      if (job.chunk) continue;
      const ChainSpec& s = job.spec;
      const unsigned dynamic = job.unit == ChainUnit::forward  ? s.dynamic_bytes(s.forward)
                               : job.unit == ChainUnit::saving ? s.saving_dynamic_bytes()
                                                               : 0u;
      CHECK(r.shared_bytes >= 0);
      CHECK(unsigned(r.shared_bytes) + dynamic <= unsigned(s.shared_limit));
    }
  }
}
