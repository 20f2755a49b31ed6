// jitbmm's host paths with a driver present, on machines without a GPU: run with $JITBMM_LIBCUDA naming
// libjitbmm_fake_cuda.so (fake_cuda.cpp says what it does and does not do) and $JITBMM_TUNE=never. Kernels are really
// compiled by NVRTC and handed to the fake, which records a SHA-256 of every image it is given; nothing computes.
//
// Run as `jitbmm_test_fake_driver --plan <semiring> <dtype> <B> <M> <K> <N>` it is the helper process of the disk
// cache tests: it plans once (policy never) and prints "compiles=<NVRTC compiles> kernel=<name>".
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "tests/fake_driver/helper_process.hpp"
#include "tests/fake_driver/driver_log.hpp"
#include "tests/temp_dir.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cache/disk_cache.hpp"
#include "support/sha256.hpp"
#include "jitbmm/c_api.h"
#include "jitbmm/chain.hpp"
#include "jitbmm/errors.hpp"
#include "jitbmm/plan.hpp"
#include "jitbmm/reference.hpp"
#include "generator/emit_source.hpp"
#include "runtime/autotune.hpp"
#include "runtime/backward.hpp"
#include "runtime/chain_fused_steps.hpp"
#include "runtime/chain_plan.hpp"
#include "runtime/tuner/chain_decisions.hpp"
#include "runtime/device.hpp"
#include "runtime/device_memory.hpp"
#include "runtime/driver_api.hpp"
#include "runtime/repair_watch.hpp"
#include "templates/exp_matmul/bounds.cuh"

using namespace jitbmm;
namespace fs = std::filesystem;

namespace {

const Semiring kSemirings[] = {Semiring::log, Semiring::max_plus, Semiring::min_plus, Semiring::max_times,
                               Semiring::plus_times};
const DType kDTypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16};

std::string file_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct LoadedImage {
  std::string sha256;
  std::size_t bytes = 0; // as the image's ELF header sizes it
  bool operator==(const LoadedImage& o) const { return sha256 == o.sha256 && bytes == o.bytes; }
};

// Every image the fake driver loaded, as its log lists them ("load <sha256> <bytes>").
std::vector<LoadedImage> loaded_images(const std::string& log) {
  std::vector<LoadedImage> out;
  std::istringstream in(file_text(log));
  for (std::string word; in >> word;) {
    LoadedImage image;
    if (word == "load" && in >> image.sha256 >> image.bytes)
      out.push_back(image);
    else
      in.ignore(1 << 20, '\n');
  }
  return out;
}

bool is_image(const LoadedImage& loaded, const std::string& cubin) {
  return loaded.bytes <= cubin.size() && sha256_hex(std::string_view(cubin).substr(0, loaded.bytes)) == loaded.sha256;
}

struct ChildResult : test::HelperRun {
  explicit ChildResult(test::HelperRun run) : test::HelperRun(std::move(run)) {}
  long compiles = -1;
  std::string kernel;
};

// This executable, run as the --plan helper with a cache directory and a fake-driver log of its own.
// With `tune`, the helper plans under policy bucket (tuning, were no decision stored) and its stderr is captured too.
ChildResult plan_in_child(const std::string& cache_dir, const std::string& log, const std::string& semiring = "log",
                          const std::string& dtype = "f32", bool tune = false, const Shape& shape = {2, 33, 17, 40}) {
  ChildResult r(test::run_helper({tune ? "--plan-bucket" : "--plan", semiring, dtype, std::to_string(shape.B),
                                  std::to_string(shape.M), std::to_string(shape.K), std::to_string(shape.N)},
                                 {{"JITBMM_CACHE_DIR", cache_dir}, {"JITBMM_FAKE_CUDA_LOG", log}}, tune));
  char name[512] = {0};
  const std::size_t line = r.output.find("compiles=");
  if (line != std::string::npos &&
      std::sscanf(r.output.c_str() + line, "compiles=%ld kernel=%511s", &r.compiles, name) == 2)
    r.kernel = name;
  return r;
}

int plan_main(int argc, char** argv) {
  if (argc != 8) {
    std::fprintf(stderr, "usage: %s --plan|--plan-bucket <semiring> <dtype> <B> <M> <K> <N>\n", argv[0]);
    return 2;
  }
  try {
    set_tune_policy(std::strcmp(argv[1], "--plan-bucket") == 0 ? TunePolicy::bucket : TunePolicy::never);
    Problem p;
    p.semiring = parse_semiring(argv[2]);
    p.dtype = parse_dtype(argv[3]);
    p.shape = {std::stoll(argv[4]), std::stoll(argv[5]), std::stoll(argv[6]), std::stoll(argv[7])};
    const SemiringBMM plan = SemiringBMM::get(p);
    std::printf("compiles=%ld kernel=%s\n", stats().nvrtc_compiles, plan.kernel_name().c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "plan failed: %s\n", e.what());
    return 1;
  }
}

Problem small_problem(Semiring s, DType d) {
  Problem p;
  p.semiring = s;
  p.dtype = d;
  p.shape = {2, 33, 17, 40};
  return p;
}

// The --watch helper (its own cache directory, from $JITBMM_CACHE_DIR): stores decisions for log f32 4x256x256x256,
// an exp_matmul variant for well-behaved data and a tiled one for wide-range data, then runs the plan 3 times with a
// workspace whose repair counter says `percent`% of the outputs were repaired (the fake runs no kernel, so the counter
// keeps what is written there), printing the variant each call ran: "call <i> <strategy>" (a move to the wide-data
// variant happens at the start of a call, once an earlier call's count has landed).
int watch_main(int argc, char** argv) {
  if (argc != 3 && !(argc == 4 && std::strcmp(argv[3], "unwatched") == 0)) return 2;
  try {
    set_tune_policy(TunePolicy::never);
    Problem p;
    p.shape = {4, 256, 256, 256};
    KernelSpec em = default_spec(p), wide = default_spec(p);
    em.strategy = Strategy::exp_matmul, em.math = Math::fma;
    wide.strategy = Strategy::tiled;
    const auto device = current_device();
    const TuningDevice td = tuning_device(*device);
    DiskCache* disk = DiskCache::process_cache();
    if (!disk) return 3;
    for (const auto& [spec, range] : {std::pair{em, InputRange::normal}, std::pair{wide, InputRange::wide}}) {
      TuneReport report;
      report.best = spec;
      report.candidates.push_back({spec, 1.0, "ok"});
      put_decision(*disk, tuning_key(p, td, false, Pass::forward, range), decision_from(p, td, report, Pass::forward,
                                                                                         range));
    }
    const SemiringBMM plan = SemiringBMM::get(p);
    const std::size_t bytes = plan.workspace_bytes();
    DeviceBuffer a(4 << 20), b(4 << 20), out(4 << 20), ws(bytes);
    const jb::EmWorkspace w = jb::em_workspace(4, 256, 256, 256, 4, 4, false);
    const uint64_t repaired = uint64_t(4 * 256 * 256) * std::stoi(argv[2]) / 100;
    for (int call = 1; call <= 3; ++call) {
      ws.upload(&repaired, sizeof repaired, static_cast<std::size_t>(w.repaired));
      std::optional<UnwatchedCalls> unwatched;
      if (argc == 4) unwatched.emplace();
      plan(a.get(), b.get(), out.get(), nullptr, nullptr, Workspace{ws.get(), bytes});
      std::printf("call %d %s\n", call, strategy_name(plan.spec().strategy));
    }
    // A repair report is of the variant calls run now: none where the plan moved to a variant without repairs.
    try {
      plan.run_with_repair_report(a.get(), b.get(), out.get());
    } catch (const std::invalid_argument& e) {
      std::printf("report: %s\n", e.what());
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "watch failed: %s\n", e.what());
    return 1;
  }
}

// The --share helpers (their own cache directories, from $JITBMM_CACHE_DIR), for log f32 2x33x17x40 under policy
// never: "--share-export" stores an exact decision naming a warp kernel (not the default), plans with it and prints
// export_choices(); "--share-import <file>" plans (the default), imports the file's choices, plans again and prints
// "before <spec>" and "after <spec>".
int share_main(int argc, char** argv) {
  try {
    set_tune_policy(TunePolicy::never);
    Problem p;
    p.shape = {2, 33, 17, 40};
    if (std::strcmp(argv[1], "--share-export") == 0) {
      DiskCache* disk = DiskCache::process_cache();
      if (!disk) return 3;
      const TuningDevice td = tuning_device(*current_device());
      TuneReport report;
      report.best = parse_spec("semiring=log dtype=f32 out=f32 argmax=0 strategy=warp index64=0 block=8x32");
      put_decision(*disk, tuning_key(p, td, false), decision_from(p, td, report));
      SemiringBMM::get(p);
      std::printf("%s", export_choices().c_str());
      return 0;
    }
    if (argc != 3) return 2;
    const std::string before = to_string(SemiringBMM::get(p).spec());
    const std::size_t n = import_choices(file_text(argv[2]));
    std::printf("imported %zu\nbefore %s\nafter %s\n", n, before.c_str(), to_string(SemiringBMM::get(p).spec()).c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "share failed: %s\n", e.what());
    return 1;
  }
}

// The --c-plan helper: plans log f32 2x3x4x5 through the C ABI alone and prints "status <s>: <last error>".
int c_plan_main() {
  jitbmm_problem p;
  jitbmm_status s = jitbmm_problem_row_major(&p, "log", "f32", 2, 3, 4, 5);
  jitbmm_plan* plan = nullptr;
  if (s == JITBMM_OK) s = jitbmm_plan_create(&p, &plan);
  std::printf("status %d: %s\n", static_cast<int>(s), jitbmm_last_error());
  jitbmm_plan_destroy(plan);
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  // Tests name the strategy a chain plan takes: the stand-in only where a test turns it on (test_stand_in.cpp).
  ::setenv("JITBMM_STAND_IN", "off", 0);
  if (argc == 2 && std::strcmp(argv[1], "--c-plan") == 0) return c_plan_main();
  if (argc == 3 && std::strcmp(argv[1], "--stand-in") == 0) return test::stand_in_helper(argv[2]);
  if (argc == 2 && std::strcmp(argv[1], "--context-reset") == 0) return test::context_reset_helper();
  if (argc > 1 && std::strncmp(argv[1], "--share-", 8) == 0) return share_main(argc, argv);
  if (argc > 1 && (std::strcmp(argv[1], "--plan") == 0 || std::strcmp(argv[1], "--plan-bucket") == 0))
    return plan_main(argc, argv);
  if (argc > 1 && std::strcmp(argv[1], "--watch") == 0) return watch_main(argc, argv);
  if (argc == 2 && (std::strcmp(argv[1], "--device-level") == 0 || std::strcmp(argv[1], "--old-device") == 0))
    return test::arch_level_helper(argv[1]);
  const char* lib = std::getenv("JITBMM_LIBCUDA");
  if (!lib || !std::strstr(lib, "fake_cuda")) {
    std::fprintf(stderr, "run with JITBMM_LIBCUDA naming libjitbmm_fake_cuda.so (ctest does)\n");
    return 2;
  }
  set_tune_policy(TunePolicy::never);
  doctest::Context context(argc, argv);
  return context.run();
}

TEST_CASE("the fake driver is the driver loaded, and describes an H100") {
  CHECK(driver().library.find("fake_cuda") != std::string::npos);
  const auto device = current_device();
  CHECK(device->name == "Fake H100");
  CHECK(device->arch() == "sm_90");
  CHECK(device->sm_count == 132);
  CHECK(device->max_shared_per_block_optin == 227 * 1024);
  CHECK(device->driver_version == 13000);
}

TEST_CASE("a plan for every semiring and dtype (policy never), launched forward and backward") {
  DeviceBuffer a(1 << 16), b(1 << 16), out(1 << 16), grad_a(1 << 16), grad_b(1 << 16), grad_out(1 << 16);
  DeviceBuffer argmax(2 * 33 * 40 * 4);
  for (Semiring s : kSemirings)
    for (DType d : kDTypes) {
      Problem p = small_problem(s, d);
      p.with_argmax = semiring_info(s).has_argmax;
      CAPTURE(describe(p));
      const SemiringBMM plan = SemiringBMM::get(p);
      CHECK(!plan.kernel_name().empty());
      CHECK(plan.kernel_name().find(semiring_info(s).name) == 0);
      CHECK(plan.arch() == "sm_90");
      CHECK(plan.device_name() == "Fake H100");
      CHECK(plan.registers() == 64); // the fake's answer: proof the module went through it
      auto* arg = p.with_argmax ? static_cast<int32_t*>(argmax.get()) : nullptr;
      CHECK_NOTHROW(plan(a.get(), b.get(), out.get(), arg));
      if (d == DType::f32) // the backward passes once per semiring: each compiles two more kernels
        CHECK_NOTHROW(plan.backward(a.get(), b.get(), out.get(), arg, grad_out.get(), grad_a.get(), grad_b.get()));
    }
  CHECK_THROWS_AS(SemiringBMM::get(small_problem(Semiring::log, DType::f32))(nullptr, nullptr, nullptr),
                  std::invalid_argument);
}

TEST_CASE("prepare loads a first training step's kernels at once: the plan and its backward then load none") {
  // min_plus f16's passes: no other test differentiates it, so prepare finds its kernels unloaded.
  Problem p = small_problem(Semiring::min_plus, DType::f16);
  p.with_argmax = true;
  test::DriverLog log;
  SemiringBMM::prepare(p, true, true);
  const std::size_t prepared = loaded_images(log.path).size();
  CHECK(prepared >= 2); // grad_a's and grad_b's kernels at least (the forward's may be loaded already)
  const SemiringBMM plan = SemiringBMM::get(p);
  DeviceBuffer a(1 << 16), b(1 << 16), out(1 << 16), argmax(1 << 16), grad_out(1 << 16), grad_a(1 << 16),
      grad_b(1 << 16);
  const auto* arg = static_cast<const int32_t*>(argmax.get());
  CHECK_NOTHROW(plan(a.get(), b.get(), out.get(), static_cast<int32_t*>(argmax.get())));
  CHECK_NOTHROW(plan.backward(a.get(), b.get(), out.get(), arg, grad_out.get(), grad_a.get(), grad_b.get()));
  CHECK(loaded_images(log.path).size() == prepared);
  Problem bad = p;
  bad.shape.K = -1;
  CHECK_THROWS_AS(SemiringBMM::prepare(bad, true, true), std::invalid_argument);
  CHECK(jitbmm_plan_prepare(nullptr, 1, 1) == JITBMM_INVALID_ARGUMENT);
  CHECK(std::string(jitbmm_last_error()).find("problem") != std::string::npos);
}

TEST_CASE("an HMM backward's scratch (the transitions' partial sums) keeps a forward + backward within four times the "
          "tables, or takes at most half their bytes") {
  struct Case {
    int64_t B, T, C;
    DType dtype;
    bool batched;
  };
  // The chains the results page measures, half tables, per-sequence transitions, and one too short to split.
  const Case cases[] = {{32, 128, 32, DType::f32, false}, {32, 512, 64, DType::f32, false},
                        {8, 1024, 128, DType::f32, false}, {16, 256, 256, DType::f32, false},
                        {32, 128, 32, DType::bf16, false}, {4, 512, 64, DType::f32, true},
                        {2, 5, 16, DType::f32, false}};
  for (const Case& c : cases) {
    ChainProblem p;
    p.form = ChainForm::hmm;
    p.dtype = c.dtype;
    p.B = c.B, p.T = c.T, p.C = c.C;
    p.batched_transitions = c.batched;
    INFO("B, T, C = " << c.B << ", " << c.T << ", " << c.C << ", " << std::string(dtype_info(c.dtype).name)
                      << (c.batched ? ", a table per sequence" : ""));
    const std::size_t size = std::size_t(dtype_info(c.dtype).size_bytes);
    const std::size_t tables = (std::size_t(c.B * c.T * c.C) + std::size_t((c.batched ? c.B : 1) * c.C * c.C) +
                                std::size_t(c.C)) * size;
    const std::size_t scratch = ChainPlan::get(p).backward_workspace_bytes();
    // Beside the saved messages and the tables' gradients (the tables' size), which a backward holds at its peak.
    const std::size_t saved = chain_saved_bytes(p), rest = 3 * tables > saved ? 3 * tables - saved : 0;
    CHECK(scratch <= std::max(tables / 2, rest) + 256); // rounded up to the workspace's alignment
    // Every chain long enough splits its steps over several blocks (sums to add), within the bound.
    CHECK((scratch > 0) == (c.T > 5));
  }
}

TEST_CASE("a chain plan takes the clusters a stored decision names for its bucket; a damaged one, the rule's") {
  ChainProblem p;
  p.B = 3, p.T = 9, p.C = 130;
  const auto device = current_device();
  DiskCache* disk = DiskCache::process_cache();
  REQUIRE(disk);
  const std::string key = chain_tuning_key(p, tuning_device(*device));
  const ChainSpec rule = default_chain_spec(p, cluster_sms(*device));
  // The forward fastest in clusters of 2, the saving forward + backward in 4.
  put_chain_decision(*disk, key, choose_chain_clusters(p, {{2, 1.0, 2.0, 0.5}, {4, 2.0, 1.0, 0.5}}, 1.0));
  const ChainChoice choice = choose_chain_spec(p, *device);
  CHECK(choice.from_decision);
  REQUIRE(choice.decision);
  CHECK(choice.decision->timed.size() == 2);
  const ChainSpec tuned = choice.spec;
  CHECK(tuned.forward.cluster == 2);
  CHECK(tuned.saving.cluster == 4);
  CHECK(tuned == clustered_chain_spec(p, 2, 4));
  CHECK_FALSE(tuned == rule);
  // A sequence count of the same bucket reads the same decision; ChainPlan::get builds that module.
  ChainProblem same_bucket = p;
  same_bucket.B = 4;
  CHECK(ChainPlan::get(same_bucket).kernel_name() == emit_chain_kernel(clustered_chain_spec(same_bucket, 2, 4)).name);
  // Another bucket does not.
  ChainProblem longer = p;
  longer.T = 17;
  CHECK(chosen_chain_spec(longer, *device) == default_chain_spec(longer, cluster_sms(*device)));
  // A damaged entry is the rule's, and moved aside.
  REQUIRE(disk->put(key, "chaintune", "forward_cluster 3\n"));
  forget_chain_decisions(); // a plan reads its bucket's decision once per process
  const ChainChoice damaged = choose_chain_spec(p, *device);
  CHECK(damaged.spec == rule);
  CHECK_FALSE(damaged.decision);
  CHECK_FALSE(damaged.from_decision);
  CHECK_FALSE(disk->get(key, "chaintune"));
  // One under this key whose text names another bucket (written by hand) is not taken either.
  put_chain_decision(*disk, key, choose_chain_clusters(longer, {{2, 1.0, 1.0, 0.5}}, 1.0));
  CHECK_FALSE(choose_chain_spec(p, *device).from_decision);
  // The forward's lanes a decision names: its clusters with groups of that many lanes, in the module ChainPlan::get
  // builds.
  put_chain_decision(*disk, key,
                     choose_chain_clusters(p, {{2, 1.0, 2.0, 0.5}, {4, 2.0, 1.0, 0.5}}, 1.0, {}, std::nullopt,
                                           {{4, 0.5, 2.0, 0.5}}));
  const ChainChoice lanes = choose_chain_spec(p, *device);
  CHECK(lanes.from_decision);
  CHECK(lanes.spec == chain_spec_with_forward_lanes(p, 2, 4, 4));
  CHECK(lanes.spec.forward.lanes == 4);
  CHECK(lanes.spec.saving == clustered_chain_spec(p, 2, 4).saving);
  CHECK_FALSE(lanes.spec.forward.lanes == rule.forward.lanes);
  CHECK(ChainPlan::get(same_bucket).kernel_name() ==
        emit_chain_kernel(chain_spec_with_forward_lanes(same_bucket, 2, 4, 4)).name);
}

namespace {

// How many "pool-alloc" lines the fake driver's log holds.
int pool_allocations(const std::string& log) {
  std::istringstream in(file_text(log));
  int n = 0;
  for (std::string line; std::getline(in, line);) n += line.rfind("pool-alloc ", 0) == 0;
  return n;
}

} // namespace

TEST_CASE("a chain of one long sequence runs in chunks: scratch from the caller's workspace, checked, or the pool") {
  TempDir dir;
  const std::string log = dir.path + "/driver.log";
  ::setenv("JITBMM_FAKE_CUDA_LOG", log.c_str(), 1);
  ChainProblem p;
  p.B = 1, p.T = 1024, p.C = 32;
  p.with_lengths = true;
  const ChainPlan plan = ChainPlan::get(p);
  REQUIRE(plan.chunk() == 64);
  const std::size_t potentials = std::size_t(p.B * (p.T - 1) * p.C * p.C) * 4;
  const std::size_t forward = plan.workspace_bytes(false), backward = plan.backward_workspace_bytes();
  // A pass of the tree over every chunk: 1.5 times the potentials for the forward (less with saved, which holds
  // the chunks' products), 3.5 for the backward, and the products' own scratch.
  CHECK(forward >= potentials * 3 / 2);
  CHECK(forward <= potentials * 3 / 2 + (1 << 20));
  CHECK(backward >= potentials * 7 / 2);
  CHECK(backward <= potentials * 7 / 2 + (1 << 20));
  CHECK(plan.workspace_bytes(true) == forward);
  DeviceBuffer pot(potentials), lengths(8), score(4), saved(plan.saved_bytes()), grad(potentials), g(4),
      work(backward);
  const auto* len = static_cast<const int64_t*>(lengths.get());
  release_pool_memory();
  const int before = pool_allocations(log);
  CHECK_NOTHROW(plan(pot.get(), len, score.get(), saved.get(), nullptr, nullptr, nullptr, {work.get(), forward}));
  CHECK_NOTHROW(plan.backward(pot.get(), len, saved.get(), nullptr, g.get(), grad.get(), nullptr,
                              {work.get(), backward}));
  // The products' own scratch is in the workspace too: none from the pool.
  const int with_workspace = pool_allocations(log) - before;
  CHECK(with_workspace == 0);
  CHECK_THROWS_WITH_AS(plan(pot.get(), len, score.get(), nullptr, nullptr, nullptr, nullptr, {work.get(), forward - 1}),
                       doctest::Contains("workspace"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(plan.backward(pot.get(), len, saved.get(), nullptr, g.get(), grad.get(), nullptr,
                                     {work.get(), backward - 1}),
                       doctest::Contains("workspace"), std::invalid_argument);
  CHECK_NOTHROW(plan.backward(pot.get(), len, saved.get(), nullptr, g.get(), grad.get()));
  CHECK(pool_allocations(log) > before + with_workspace);
  // Other chains stay sequential; a chunk that does not fit names itself.
  p.B = 8;
  CHECK(ChainPlan::get(p).chunk() == 0);
  CHECK(ChainPlan::get(p).backward_workspace_bytes() == 0);
  CHECK_THROWS_WITH_AS(chain_plan_for(p, chosen_chain_spec(p, *current_device()), 2),
                       doctest::Contains("chunk: the products"), std::invalid_argument);
  ::unsetenv("JITBMM_FAKE_CUDA_LOG");
}

TEST_CASE("a chain plan takes the strategy a stored decision names for its bucket, where its chunks fit") {
  ChainProblem p;
  p.B = 2, p.T = 2048, p.C = 32;
  const auto device = current_device();
  DiskCache* disk = DiskCache::process_cache();
  REQUIRE(disk);
  REQUIRE(default_chain_chunk(p) == 64);
  const std::string key = chain_tuning_key(p, tuning_device(*device));
  // The sequential kernels measured faster: taken where the rule would take chunks.
  put_chain_decision(*disk, key, choose_chain_clusters(p, {{1, 1.0, 1.0, 0.5}}, 1.0, {{64, 0.5, 1.0, 1.0}}));
  CHECK(ChainPlan::get(p).chunk() == 0);
  CHECK(choose_chain_spec(p, *device).chunk_from_decision);
  // Chunks of 256 measured faster: every problem of the bucket takes them.
  put_chain_decision(*disk, key, choose_chain_clusters(p, {{1, 1.0, 5.0, 0.5}}, 1.0, {{256, 0.5, 1.0, 1.0}}));
  CHECK(ChainPlan::get(p).chunk() == 256);
  ChainProblem shorter = p;
  shorter.T = 1500;
  CHECK(choose_chain_spec(shorter, *device).chunk == 256);
  // One the bucket's problem cannot take (its products would not fit in saved) is the rule's.
  put_chain_decision(*disk, key, choose_chain_clusters(p, {{1, 1.0, 5.0, 0.5}}, 1.0, {{2, 0.5, 1.0, 1.0}}));
  const ChainChoice unfit = choose_chain_spec(p, *device);
  CHECK(unfit.chunk == 64);
  CHECK_FALSE(unfit.chunk_from_decision);
  // A decision stored before strategies were tuned names none: the rule's.
  ChainDecision before = choose_chain_clusters(p, {{1, 1.0, 5.0, 0.5}}, 1.0);
  before.chunk.reset();
  before.stepped.reset();
  put_chain_decision(*disk, key, before);
  CHECK(ChainPlan::get(p).chunk() == 64);
}

namespace {

// An HMM of B sequences of T positions and C states, its transitions shared unless `batched`.
ChainProblem hmm_problem(int64_t B, int64_t T, int64_t C, bool batched = false) {
  ChainProblem p;
  p.form = ChainForm::hmm;
  p.B = B, p.T = T, p.C = C;
  p.batched_transitions = batched;
  return p;
}

} // namespace

TEST_CASE("a chain plan takes the stepped strategy by the rule: an HMM's table shared by many sequences of many "
          "states, and every chain beyond the sequential kernels' states") {
  const auto device = current_device();
  struct Case {
    ChainProblem p;
    bool stepped;
  };
  // T = 64: buckets no test stores a decision for. Log's fused form from 2^23 terms a step (512 × 128, 64 × 512),
  // not below (256 × 128) nor where it does not apply (too many tiles: 8192 × 64).
  const Case cases[] = {
      {hmm_problem(512, 64, 512), true},  {hmm_problem(8, 64, 64), false},    {hmm_problem(512, 64, 512, true), false},
      {hmm_problem(512, 64, 128), true},  {hmm_problem(256, 64, 128), false}, {hmm_problem(64, 64, 512), true},
      {hmm_problem(8192, 64, 64), false}, {hmm_problem(64, 64, 2048), true},  {hmm_problem(2, 64, 16384), true}};
  for (const Case& k : cases) {
    INFO(chain_bucket_text(k.p) << (k.p.batched_transitions ? " (a table per sequence)" : ""));
    CHECK(default_chain_stepped(k.p, device->sm_count) == k.stepped);
    const ChainChoice c = choose_chain_spec(k.p, *device);
    CHECK_FALSE(c.decision);
    CHECK(c.stepped == k.stepped);
    CHECK_FALSE(c.stepped_from_decision);
    CHECK(c.chunk == 0);
  }
  ChainProblem crf = hmm_problem(4, 64, 2048);
  crf.form = ChainForm::crf;
  CHECK(choose_chain_spec(crf, *device).stepped);
}

TEST_CASE("a chain plan takes the stepped strategy where a stored decision names it, and not where it says not") {
  const auto device = current_device();
  DiskCache* disk = DiskCache::process_cache();
  REQUIRE(disk);
  // The rule keeps the sequential kernels here; the decision measured the stepped strategy faster.
  const ChainProblem few = hmm_problem(8, 32, 64);
  REQUIRE_FALSE(default_chain_stepped(few, device->sm_count));
  const std::string key = chain_tuning_key(few, tuning_device(*device));
  put_chain_decision(*disk, key,
                     choose_chain_clusters(few, {{1, 1.0, 1.0, 1.0}}, 1.0, {}, SteppedTiming{1.0, 0.5, 1.0}));
  const ChainChoice taken = choose_chain_spec(few, *device);
  CHECK(taken.stepped);
  CHECK(taken.stepped_from_decision);
  CHECK(taken.chunk == 0);
  CHECK(std::string(ChainPlan::get(few).strategy()) == "stepped");
  // Measured slower (or not computing the score): the sequential kernels, whatever the rule says.
  const ChainProblem wide = hmm_problem(512, 32, 512);
  REQUIRE(default_chain_stepped(wide, device->sm_count));
  const std::string wide_key = chain_tuning_key(wide, tuning_device(*device));
  put_chain_decision(*disk, wide_key,
                     choose_chain_clusters(wide, {{1, 1.0, 1.0, 1.0}}, 1.0, {}, SteppedTiming{1.0, 5.0, 5.0}));
  const ChainChoice refused = choose_chain_spec(wide, *device);
  CHECK_FALSE(refused.stepped);
  CHECK(refused.stepped_from_decision);
  CHECK(refused.chunk == 0);
  put_chain_decision(*disk, wide_key, choose_chain_clusters(wide, {{1, 1.0, 1.0, 1.0}}, 1.0));
  CHECK_FALSE(choose_chain_spec(wide, *device).stepped);
  // A decision stored before the stepped strategy was tuned says nothing of it: the rule's.
  ChainDecision before = choose_chain_clusters(wide, {{1, 1.0, 1.0, 1.0}}, 1.0);
  before.stepped.reset();
  put_chain_decision(*disk, wide_key, before);
  const ChainChoice ruled = choose_chain_spec(wide, *device);
  CHECK(ruled.stepped);
  CHECK_FALSE(ruled.stepped_from_decision);
  // Beyond the sequential kernels' states the stepped strategy always: a decision read for what it timed alone.
  const ChainProblem huge = hmm_problem(64, 32, 2048);
  const std::string huge_key = chain_tuning_key(huge, tuning_device(*device));
  put_chain_decision(*disk, huge_key, choose_chain_clusters(huge, {}, 1.0, {}, SteppedTiming{3.0, 3.5, 8.0}));
  const ChainChoice only = choose_chain_spec(huge, *device);
  CHECK(only.stepped);
  REQUIRE(only.decision);
  CHECK(only.decision->stepped_timing);
  ChainDecision written = *only.decision; // by hand: not stepped; no sequential kernel could take it
  written.stepped = false;
  put_chain_decision(*disk, huge_key, written);
  CHECK(choose_chain_spec(huge, *device).stepped);
}

TEST_CASE("a stepped chain plan takes the form a stored decision names, where the problem takes it; else the rule's") {
  const auto device = current_device();
  DiskCache* disk = DiskCache::process_cache();
  REQUIRE(disk);
  const std::vector<ChainTiming> slow = {{1, 9.0, 9.0, 9.0}};
  // T = 16: buckets no other test stores a decision for. The rule's form at 512 states is fused; the decision
  // measured the products faster.
  const ChainProblem fused_by_rule = hmm_problem(512, 16, 512);
  REQUIRE(default_fused_steps(fused_by_rule, device->sm_count));
  put_chain_decision(*disk, chain_tuning_key(fused_by_rule, tuning_device(*device)),
                     choose_chain_clusters(fused_by_rule, slow, 1.0, {}, SteppedTiming{1, 1, 1}, {},
                                           SteppedTiming{1, 2, 1}));
  const ChainChoice products = choose_chain_spec(fused_by_rule, *device);
  CHECK(products.stepped);
  CHECK(products.steps == StepKernel::products);
  CHECK(ChainPlan::get(fused_by_rule).kernel_name().find("fused") == std::string::npos);
  // At 1024 states the rule's form is the products; the decision measured the fused form faster.
  const ChainProblem products_by_rule = hmm_problem(512, 16, 1024);
  REQUIRE_FALSE(default_fused_steps(products_by_rule, device->sm_count));
  const std::string key = chain_tuning_key(products_by_rule, tuning_device(*device));
  put_chain_decision(*disk, key,
                     choose_chain_clusters(products_by_rule, slow, 1.0, {}, SteppedTiming{1, 2, 1}, {},
                                           SteppedTiming{1, 1, 1}));
  const ChainChoice fused = choose_chain_spec(products_by_rule, *device);
  CHECK(fused.steps == StepKernel::fused);
  CHECK(ChainPlan::get(products_by_rule).kernel_name().find("fused") != std::string::npos);
  // A table per sequence falls in the same bucket, but the fused form computes one shared table: the rule's form.
  const ChainProblem batched = hmm_problem(512, 16, 1024, true);
  REQUIRE(chain_tuning_key(batched, tuning_device(*device)) == key);
  const ChainChoice ruled = choose_chain_spec(batched, *device);
  CHECK(ruled.stepped);
  CHECK(ruled.steps == StepKernel::rule);
  CHECK(ChainPlan::get(batched).kernel_name().find("fused") == std::string::npos);
  // A decision that timed no fused form names none: the rule's.
  put_chain_decision(*disk, key, choose_chain_clusters(products_by_rule, slow, 1.0, {}, SteppedTiming{1, 1, 1}));
  CHECK(choose_chain_spec(products_by_rule, *device).steps == StepKernel::rule);
  // Beyond the sequential kernels' states (no cluster timed), the decision's form as well.
  const ChainProblem wide = hmm_problem(64, 16, 2048);
  put_chain_decision(*disk, chain_tuning_key(wide, tuning_device(*device)),
                     choose_chain_clusters(wide, {}, 1.0, {}, SteppedTiming{1, 2, 1}, {}, SteppedTiming{1, 1, 1}));
  const ChainChoice wide_fused = choose_chain_spec(wide, *device);
  CHECK(wide_fused.stepped);
  CHECK(wide_fused.steps == StepKernel::fused);
  CHECK(ChainPlan::get(wide).kernel_name().find("fused") != std::string::npos);
}

TEST_CASE("scratch memory: the caller's workspace when given (checked), else jitbmm's pool, kept until released") {
  TempDir dir;
  const std::string log = dir.path + "/driver.log";
  ::setenv("JITBMM_FAKE_CUDA_LOG", log.c_str(), 1);
  Problem p = small_problem(Semiring::log, DType::f32);
  const SemiringBMM plan = SemiringBMM::get(p, default_spec(p, Strategy::exp_matmul));
  const std::size_t bytes = plan.workspace_bytes();
  REQUIRE(bytes > 0);
  CHECK(bytes % 256 == 0);
  DeviceBuffer a(1 << 16), b(1 << 16), out(1 << 16), workspace(bytes + 256);

  // The caller's workspace: no allocation of jitbmm's own; a null, misaligned or short one names "workspace".
  CHECK_NOTHROW(plan(a.get(), b.get(), out.get(), nullptr, nullptr, Workspace{workspace.get(), bytes}));
  CHECK(pool_allocations(log) == 0);
  auto* base = static_cast<char*>(workspace.get());
  CHECK_THROWS_WITH_AS(plan(a.get(), b.get(), out.get(), nullptr, nullptr, Workspace{base, bytes - 1}),
                       doctest::Contains("workspace"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(plan(a.get(), b.get(), out.get(), nullptr, nullptr, Workspace{base + 128, bytes}),
                       doctest::Contains("workspace: pointer not aligned"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(plan(a.get(), b.get(), out.get(), nullptr, nullptr, Workspace{nullptr, bytes}),
                       doctest::Contains("workspace"), std::invalid_argument);
  CHECK(pool_allocations(log) == 0);

  // No workspace: one allocation from the pool per call, which keeps the memory for the next call.
  release_pool_memory();
  CHECK_NOTHROW(plan(a.get(), b.get(), out.get()));
  CHECK_NOTHROW(plan(a.get(), b.get(), out.get()));
  CHECK(pool_allocations(log) == 2);
  CHECK(stats().pool_reserved_bytes >= bytes);
  release_pool_memory();
  CHECK(stats().pool_reserved_bytes == 0);

  // The backward: its scratch (the recomputed argmax, scatter's accumulators) from the caller too. K long enough
  // for scatter (histogram, the default at shorter K, needs none).
  Problem q = small_problem(Semiring::max_plus, DType::f32);
  CHECK(SemiringBMM::get(q).backward_workspace_bytes(true, true, true) == 0);
  q.shape.K = 4000;
  const SemiringBMM selecting = SemiringBMM::get(q);
  const std::size_t with_argmax = selecting.backward_workspace_bytes(true, true, true);
  const std::size_t recomputing = selecting.backward_workspace_bytes(true, true, false);
  CHECK(with_argmax > 0); // scatter accumulates
  CHECK(recomputing >= with_argmax + 2 * 33 * 40 * 4);
  CHECK(selecting.backward_workspace_bytes(false, false, false) == 0);
  DeviceBuffer grad_out(1 << 16), grad_a(1 << 16), grad_b(1 << 16), scratch(recomputing);
  const int before = pool_allocations(log);
  CHECK_NOTHROW(selecting.backward(a.get(), b.get(), out.get(), nullptr, grad_out.get(), grad_a.get(), grad_b.get(),
                                   nullptr, Workspace{scratch.get(), recomputing}));
  CHECK(pool_allocations(log) == before);
  CHECK_THROWS_WITH_AS(selecting.backward(a.get(), b.get(), out.get(), nullptr, grad_out.get(), grad_a.get(),
                                          grad_b.get(), nullptr, Workspace{scratch.get(), with_argmax}),
                       doctest::Contains("workspace"), std::invalid_argument);
  CHECK_NOTHROW(selecting.backward(a.get(), b.get(), out.get(), nullptr, grad_out.get(), grad_a.get(), grad_b.get()));
  CHECK(pool_allocations(log) == before + 1); // the recomputed argmax and the passes' accumulators: one allocation
  ::unsetenv("JITBMM_FAKE_CUDA_LOG");
}

TEST_CASE("run_same_b and run_if: exp_matmul prepares a alone; other strategies run whole; the workspace must be given") {
  const test::DriverLog log;
  Problem p = small_problem(Semiring::log, DType::f32);
  const SemiringBMM plan = SemiringBMM::get(p, default_spec(p, Strategy::exp_matmul));
  const std::size_t bytes = plan.workspace_bytes();
  DeviceBuffer a(1 << 16), b(1 << 16), out(1 << 16), workspace(bytes);
  const Workspace ws{workspace.get(), bytes};
  plan(a.get(), b.get(), out.get(), nullptr, nullptr, ws);
  plan.run_same_b(a.get(), b.get(), out.get(), nullptr, nullptr, ws);
  const auto prepares = log.launches("_prepare");
  REQUIRE(prepares.size() == 2);
  CHECK(prepares[1].grid_x < prepares[0].grid_x); // the rows of a alone
  CHECK(prepares[1].grid_x >= 1);
  const auto all = log.launches();
  REQUIRE(all.size() == 6); // prepare, product and repair, twice: the rest as before
  CHECK(all[1] == all[4]);
  CHECK(all[2] == all[5]);
  CHECK_THROWS_WITH_AS(plan.run_same_b(a.get(), b.get(), out.get(), nullptr, nullptr, Workspace{}),
                       doctest::Contains("workspace"), std::invalid_argument);
  // run_if launches what the call it stands for launches (the GPU skips them where the flag is 0).
  DeviceBuffer flag(4);
  const int* const needed = static_cast<const int*>(flag.get());
  plan.run_if(needed, a.get(), b.get(), out.get(), nullptr, nullptr, ws, true);
  plan.run_if(needed, a.get(), b.get(), out.get(), nullptr, nullptr, ws);
  const auto conditional = log.launches();
  REQUIRE(conditional.size() == 12);
  CHECK(std::equal(conditional.begin() + 6, conditional.begin() + 9, all.begin() + 3)); // as run_same_b
  CHECK(std::equal(conditional.begin() + 9, conditional.end(), all.begin()));            // as a plain call
  CHECK_THROWS_WITH_AS(plan.run_if(nullptr, a.get(), b.get(), out.get(), nullptr, nullptr, ws),
                       doctest::Contains("needed"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(plan.run_if(needed, a.get(), b.get(), out.get(), nullptr, nullptr, Workspace{}, true),
                       doctest::Contains("workspace"), std::invalid_argument);
  // A strategy without a prepare pass: the same launches as a plain call.
  const SemiringBMM tiled = SemiringBMM::get(p, default_spec(p, Strategy::tiled));
  tiled(a.get(), b.get(), out.get(), nullptr, nullptr, Workspace{});
  tiled.run_same_b(a.get(), b.get(), out.get(), nullptr, nullptr, Workspace{}); // it takes no scratch
  const auto after = log.launches();
  REQUIRE(after.size() == 14);
  CHECK(after[12] == after[13]);
  // A plan that watches its repairs (get() of a problem whose stored decision is exp_matmul; a shape of this case
  // alone) may change its variant between two calls: it prepares b each time.
  Problem q = p;
  q.shape = {3, 35, 19, 41};
  KernelSpec em = default_spec(q);
  em.strategy = Strategy::exp_matmul, em.math = Math::fma;
  DiskCache* disk = DiskCache::process_cache();
  REQUIRE(disk);
  const TuningDevice td = tuning_device(*current_device());
  TuneReport report;
  report.best = em;
  report.candidates.push_back({em, 1.0, "ok"});
  put_decision(*disk, tuning_key(q, td, false, Pass::forward, InputRange::normal),
               decision_from(q, td, report, Pass::forward, InputRange::normal));
  const SemiringBMM watched = SemiringBMM::get(q);
  REQUIRE(watched.spec().strategy == Strategy::exp_matmul);
  const std::size_t watched_bytes = watched.workspace_bytes();
  DeviceBuffer watched_work(watched_bytes);
  const Workspace wws{watched_work.get(), watched_bytes};
  watched(a.get(), b.get(), out.get(), nullptr, nullptr, wws);
  watched.run_same_b(a.get(), b.get(), out.get(), nullptr, nullptr, wws);
  const auto whole = log.launches("_prepare");
  REQUIRE(whole.size() == 6);
  CHECK(whole[5] == whole[4]);
}

TEST_CASE("the C ABI plans and launches through the fake driver") {
  jitbmm_problem p{};
  p.semiring = "max_plus";
  p.dtype = "f32";
  p.B = 2, p.M = 33, p.K = 17, p.N = 40;
  p.a_strides[0] = 33 * 17, p.a_strides[1] = 17, p.a_strides[2] = 1;
  p.b_strides[0] = 17 * 40, p.b_strides[1] = 40, p.b_strides[2] = 1;
  p.out_strides[0] = 33 * 40, p.out_strides[1] = 40, p.out_strides[2] = 1;
  p.with_argmax = 1;
  jitbmm_plan* plan = nullptr;
  REQUIRE(jitbmm_plan_create(&p, &plan) == JITBMM_OK);
  DeviceBuffer a(1 << 16), b(1 << 16), out(1 << 16), argmax(1 << 16);
  CHECK(jitbmm_plan_run(plan, a.get(), b.get(), out.get(), static_cast<int32_t*>(argmax.get()), nullptr) == JITBMM_OK);
  CHECK(jitbmm_plan_run(plan, a.get(), b.get(), out.get(), nullptr, nullptr) == JITBMM_INVALID_ARGUMENT);
  CHECK(std::string(jitbmm_last_error()).find("argmax") != std::string::npos);
  std::size_t bytes = 1;
  CHECK(jitbmm_plan_workspace_bytes(plan, &bytes) == JITBMM_OK);
  CHECK(bytes == 0); // the tiled kernel takes no scratch
  CHECK(jitbmm_plan_workspace_bytes(plan, nullptr) == JITBMM_INVALID_ARGUMENT);
  CHECK(jitbmm_plan_backward_workspace_bytes(plan, 1, 1, 0, &bytes) == JITBMM_OK);
  DeviceBuffer scratch(bytes), grad_out(1 << 16), grad_a(1 << 16);
  CHECK(jitbmm_plan_backward_with_workspace(plan, a.get(), b.get(), out.get(), nullptr, grad_out.get(), grad_a.get(),
                                            nullptr, scratch.get(), bytes, nullptr) == JITBMM_OK);
  CHECK(jitbmm_plan_backward_with_workspace(plan, a.get(), b.get(), out.get(), nullptr, grad_out.get(), grad_a.get(),
                                            nullptr, scratch.get(), 256, nullptr) == JITBMM_INVALID_ARGUMENT);
  CHECK(std::string(jitbmm_last_error()).find("workspace: 256 bytes given") != std::string::npos);
  CHECK(jitbmm_plan_run_with_workspace(plan, a.get(), b.get(), out.get(), static_cast<int32_t*>(argmax.get()), nullptr,
                                       0, nullptr) == JITBMM_OK);
  CHECK(jitbmm_release_pool_memory() == JITBMM_OK);
  const char* name = nullptr;
  CHECK(jitbmm_plan_kernel_name(plan, &name) == JITBMM_OK);
  CHECK(std::string(name).rfind("max_plus_f32_", 0) == 0);
  jitbmm_plan_destroy(plan);
  const char* dir = nullptr;
  CHECK(jitbmm_cache_dir(&dir) == JITBMM_OK);
  CHECK(std::string(dir) == DiskCache::default_dir());
}

// A handle destroyed already, or one of another kind, is refused naming it, and destroying it again does nothing
// (it was a double free); a message names the argument the caller set, and an OK call leaves none behind.
TEST_CASE("the C ABI refuses handles it did not give out or destroyed already; messages name the argument") {
  jitbmm_problem p;
  REQUIRE(jitbmm_problem_row_major(&p, "log", "f32", 2, 3, 4, 5) == JITBMM_OK);
  jitbmm_plan* plan = nullptr;
  REQUIRE(jitbmm_plan_create(&p, &plan) == JITBMM_OK);
  size_t bytes = 0;
  CHECK(jitbmm_plan_workspace_bytes(plan, &bytes) == JITBMM_OK);
  CHECK(std::string(jitbmm_last_error()).empty());
  // A product plan is no chain plan.
  CHECK(jitbmm_chain_plan_workspace_bytes(reinterpret_cast<const jitbmm_chain_plan*>(plan), 0, &bytes) ==
        JITBMM_INVALID_ARGUMENT);
  CHECK(std::string(jitbmm_last_error()).find("plan: not a live handle") != std::string::npos);
  jitbmm_plan_destroy(plan);
  CHECK(jitbmm_plan_workspace_bytes(plan, &bytes) == JITBMM_INVALID_ARGUMENT);
  CHECK(std::string(jitbmm_last_error()).find("plan: not a live handle") != std::string::npos);
  jitbmm_plan_destroy(plan); // a second time: nothing
  int stack_object = 0;
  CHECK(jitbmm_plan_workspace_bytes(reinterpret_cast<const jitbmm_plan*>(&stack_object), &bytes) ==
        JITBMM_INVALID_ARGUMENT);
  jitbmm_plan_destroy(reinterpret_cast<jitbmm_plan*>(&stack_object)); // not freed: it was never a handle

  p.out_dtype = "f33";
  CHECK(jitbmm_plan_create(&p, &plan) == JITBMM_INVALID_ARGUMENT);
  CHECK(std::string(jitbmm_last_error()).rfind("problem.out_dtype: ", 0) == 0);
  CHECK(jitbmm_set_tune_policy("sometimes") == JITBMM_INVALID_ARGUMENT);
  CHECK(std::string(jitbmm_last_error()).rfind("policy: ", 0) == 0);
  CHECK(jitbmm_set_tune_policy("never") == JITBMM_OK);
}

TEST_CASE("a plan with an explicit variant takes a forward one: a backward pass's variant is refused, naming it") {
  Problem p;
  p.shape = {2, 8, 16, 8};
  CHECK_THROWS_WITH_AS(SemiringBMM::get(p, default_grad_spec(grad_problem(p), Pass::grad_a)),
                       doctest::Contains("spec.pass"), std::invalid_argument);
  CHECK(SemiringBMM::get(p, default_spec(p)).spec() == default_spec(p));
}

// With no output (M = 0) a log gradient is still written (zeros), and its pass reads its own operand: a null one is
// refused naming it, before any launch; given, the pass runs.
TEST_CASE("a log backward with no output reads the operand of the gradient it writes: null is refused, naming it") {
  Problem p;
  p.shape = {1, 0, 4, 4};
  const SemiringBMM plan = SemiringBMM::get(p);
  DeviceBuffer b(64), grad_b(64);
  {
    const test::DriverLog log;
    CHECK_THROWS_WITH_AS(plan.backward(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, grad_b.get()),
                         doctest::Contains("b:"), std::invalid_argument);
    CHECK(log.launched().empty());
  }
  const test::DriverLog log;
  plan.backward(nullptr, b.get(), nullptr, nullptr, nullptr, nullptr, grad_b.get());
  CHECK_FALSE(log.launched().empty());
}

TEST_CASE("a backward of an empty batch zeroes a broadcast operand's gradient, a sum over no batch, and no byte "
          "between its elements") {
  // Each layout of the broadcast operands: row-major with padded rows, column-major with padded columns, and
  // strides of neither kind (every other element, rows eight elements apart).
  const struct {
    Strides a, b;
  } layouts[] = {{{0, 6, 1}, {0, 7, 1}}, {{0, 1, 5}, {0, 1, 6}}, {{0, 8, 2}, {0, 12, 2}}};
  for (const Semiring semiring : {Semiring::log, Semiring::max_plus}) {
    for (const auto& layout : layouts) {
      CAPTURE(semiring_info(semiring).name);
      CAPTURE(layout.a.row);
      Problem p;
      p.semiring = semiring;
      p.shape = {0, 3, 4, 5}; // B, M, K, N
      p.a_strides = layout.a;
      p.b_strides = layout.b;
      const SemiringBMM plan = SemiringBMM::get(p);
      const std::size_t span = 64;
      DeviceBuffer ga(span * 4), gb(span * 4);
      ga.fill_bytes(0xff), gb.fill_bytes(0xff);
      plan.backward(nullptr, nullptr, nullptr, nullptr, ga.get(), gb.get());
      std::vector<uint32_t> ha(span), hb(span);
      ga.download(ha.data(), span * 4), gb.download(hb.data(), span * 4);
      // Every element of each matrix is 0; every other word keeps the poison.
      auto expect = [&](const std::vector<uint32_t>& got, const Strides& st, int64_t rows, int64_t cols) {
        std::vector<char> element(span, 0);
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t c = 0; c < cols; ++c) element[std::size_t(r * st.row + c * st.col)] = 1;
        for (std::size_t i = 0; i < span; ++i) {
          CAPTURE(i);
          CHECK(got[i] == (element[i] ? 0u : 0xffffffffu));
        }
      };
      expect(ha, layout.a, 3, 4);
      expect(hb, layout.b, 4, 5);
      // Through the reference too, which the GPU tests compare with.
      std::vector<double> ra(span, 7.0), rb(span, 7.0);
      reference::backward(p, nullptr, nullptr, nullptr, ra.data(), rb.data());
      for (int64_t r = 0; r < 3; ++r)
        for (int64_t c = 0; c < 4; ++c) CHECK(ra[std::size_t(r * layout.a.row + c * layout.a.col)] == 0.0);
      for (int64_t r = 0; r < 4; ++r)
        for (int64_t c = 0; c < 5; ++c) CHECK(rb[std::size_t(r * layout.b.row + c * layout.b.col)] == 0.0);
    }
  }
  // Such a matrix's strides are held to what any batch's are: offsets past 64 bits, or two elements at one address
  // (which a gradient may not have), are refused before anything is written.
  Problem p;
  p.shape = {0, 3, 4, 5};
  p.a_strides = Strides{0, int64_t(1) << 62, 1};
  CHECK_THROWS_WITH_AS(SemiringBMM::get(p), doctest::Contains("a_strides"), std::invalid_argument);
  p.a_strides = Strides{0, 1, 1};
  const SemiringBMM aliased = SemiringBMM::get(p); // a forward may read such an operand
  DeviceBuffer ga(64);
  CHECK_THROWS_WITH_AS(aliased.backward(nullptr, nullptr, nullptr, nullptr, ga.get(), nullptr),
                       doctest::Contains("a_strides"), std::invalid_argument);
}

TEST_CASE("jitbmm_problem_row_major gives a valid row-major problem; bad names and sizes are named") {
  jitbmm_problem p;
  std::memset(&p, 0x5a, sizeof p);
  REQUIRE(jitbmm_problem_row_major(&p, "max_plus", "f16", 2, 3, 4, 5) == JITBMM_OK);
  CHECK(std::string(p.semiring) == "max_plus");
  CHECK(std::string(p.dtype) == "f16");
  CHECK((p.out_dtype == nullptr && p.precision == nullptr && p.with_argmax == 0));
  CHECK((p.B == 2 && p.M == 3 && p.K == 4 && p.N == 5));
  const int64_t a[3] = {12, 4, 1}, b[3] = {20, 5, 1}, out[3] = {15, 5, 1};
  CHECK(std::equal(a, a + 3, p.a_strides));
  CHECK(std::equal(b, b + 3, p.b_strides));
  CHECK(std::equal(out, out + 3, p.out_strides));
  jitbmm_plan* plan = nullptr;
  CHECK(jitbmm_plan_create(&p, &plan) == JITBMM_OK);
  jitbmm_plan_destroy(plan);
  p.with_argmax = 1; // fields may be changed afterwards
  CHECK(jitbmm_plan_create(&p, &plan) == JITBMM_OK);
  jitbmm_plan_destroy(plan);
  // Empty sizes are a valid problem too (its empty matrices' batch strides are 0).
  REQUIRE(jitbmm_problem_row_major(&p, "log", "f32", 2, 0, 4, 5) == JITBMM_OK);
  CHECK((p.a_strides[0] == 0 && p.b_strides[0] == 20 && p.out_strides[0] == 0));
  // A refused call names what is wrong (jitbmm_last_error) and leaves the struct as it was.
  const jitbmm_problem before = p;
  const int64_t big = int64_t(1) << 40;
  const std::pair<std::function<jitbmm_status()>, const char*> refused[] = {
      {[&] { return jitbmm_problem_row_major(&p, "sum", "f32", 1, 1, 1, 1); }, "semiring: unsupported 'sum'"},
      {[&] { return jitbmm_problem_row_major(&p, "log", "f31", 1, 1, 1, 1); }, "dtype: unsupported 'f31'"},
      {[&] { return jitbmm_problem_row_major(&p, "log", "f32", 1, -1, 1, 1); }, "shape.M must be >= 0"},
      {[&] { return jitbmm_problem_row_major(&p, "log", "f32", 1, big, big, 1); }, "shape.M: a holds B*M*K"},
      {[&] { return jitbmm_problem_row_major(&p, nullptr, "f32", 1, 1, 1, 1); }, "semiring: null pointer"},
      {[&] { return jitbmm_problem_row_major(&p, "log", nullptr, 1, 1, 1, 1); }, "dtype: null pointer"},
      {[&] { return jitbmm_problem_row_major(nullptr, "log", "f32", 1, 1, 1, 1); }, "problem: null pointer"}};
  for (const auto& [call, message] : refused) {
    CHECK(call() == JITBMM_INVALID_ARGUMENT);
    CHECK_MESSAGE(std::string(jitbmm_last_error()).find(message) != std::string::npos,
                  std::string(jitbmm_last_error()));
  }
  CHECK(std::memcmp(&before, &p, sizeof p) == 0);
  // A zero-initialised struct, the header's warning: its zero strides put every output at one address.
  jitbmm_problem zeroed{};
  zeroed.semiring = "log", zeroed.dtype = "f32", zeroed.B = 1, zeroed.M = 2, zeroed.K = 2, zeroed.N = 2;
  CHECK(jitbmm_plan_create(&zeroed, &plan) == JITBMM_INVALID_ARGUMENT);
  CHECK(std::string(jitbmm_last_error()).find("out_strides") != std::string::npos);
}

TEST_CASE("without NVRTC, a plan through the C ABI is JITBMM_NO_NVRTC naming every place tried") {
  // A child process: NVRTC, once loaded, stays loaded; with the cache off the plan must compile.
  const test::HelperRun r =
      test::run_helper({"--c-plan"}, {{"JITBMM_NVRTC_LIBRARY", "/nonexistent/libnvrtc.so.13"}, {"JITBMM_CACHE", "off"}});
  CHECK(r.status == 0);
  CHECK_MESSAGE(r.output.rfind("status " + std::to_string(JITBMM_NO_NVRTC) + ": no NVRTC found", 0) == 0, r.output);
  CHECK_MESSAGE(r.output.find("could not load /nonexistent/libnvrtc.so.13") != std::string::npos, r.output);
  const test::HelperRun with = test::run_helper({"--c-plan"}, {{"JITBMM_CACHE", "off"}}); // the same child with NVRTC
  CHECK_MESSAGE(with.output == "status 0: \n", with.output);
}

TEST_CASE("a failing launch is a CudaError naming the launch; tuning finds no correct candidate and says so") {
  const Problem p = small_problem(Semiring::min_plus, DType::f32);
  const SemiringBMM plan = SemiringBMM::get(p);
  DeviceBuffer a(1 << 16), b(1 << 16), out(1 << 16);
  ::setenv("JITBMM_FAKE_CUDA_FAIL_LAUNCH", "1", 1);
  try {
    plan(a.get(), b.get(), out.get());
    FAIL("the launch should have failed");
  } catch (const CudaError& e) {
    CHECK(std::string(e.what()).find("CUDA_ERROR_LAUNCH_FAILED") != std::string::npos);
    CHECK(std::string(e.what()).find(plan.kernel_name()) != std::string::npos);
  }
  // Every candidate's launch fails: the tuner skips each one, then throws rather than choosing one.
  CHECK_THROWS_WITH(autotune(p, *current_device(), false, Pass::forward, {plan.spec()}),
                    doctest::Contains("no correct candidate"));
  ::unsetenv("JITBMM_FAKE_CUDA_FAIL_LAUNCH");
  // Launches "succeed" but compute nothing: the poisoned output fails the check against the CPU reference.
  CHECK_THROWS_WITH(autotune(p, *current_device(), false, Pass::forward, {plan.spec()}),
                    doctest::Contains("no correct candidate"));
}

TEST_CASE("the disk cache across processes: the second process loads the first one's cubin, compiling nothing") {
  TempDir dir;
  const std::string cache = dir.path + "/cache", log = dir.path + "/driver.log";
  const ChildResult first = plan_in_child(cache, log);
  REQUIRE(first.status == 0);
  CHECK(first.compiles >= 1);
  const ChildResult second = plan_in_child(cache, log);
  REQUIRE(second.status == 0);
  CHECK(second.compiles == 0);
  CHECK(second.kernel == first.kernel);
  const std::vector<LoadedImage> loads = loaded_images(log);
  REQUIRE(loads.size() == 2);
  CHECK(loads[0] == loads[1]); // the very bytes NVRTC produced, back from disk
}

// Processes started together (a job's ranks) that share a cache directory compile a kernel once: the first to miss
// takes the directory's lock on compiling it, and the others wait and load what it stored. Without the lock both
// helpers, started at once, miss and compile.
TEST_CASE("the disk cache across processes: two processes that want the same kernels at once compile each once") {
  TempDir alone_dir, dir;
  const ChildResult alone = plan_in_child(alone_dir.path + "/cache", alone_dir.path + "/driver.log");
  REQUIRE(alone.status == 0);
  REQUIRE(alone.compiles >= 1);
  const std::string cache = dir.path + "/cache";
  auto first = std::async(std::launch::async, [&] { return plan_in_child(cache, dir.path + "/first.log"); });
  auto second = std::async(std::launch::async, [&] { return plan_in_child(cache, dir.path + "/second.log"); });
  const ChildResult a = first.get(), b = second.get();
  REQUIRE(a.status == 0);
  REQUIRE(b.status == 0);
  CHECK(a.compiles + b.compiles == alone.compiles);
  CHECK(a.kernel == alone.kernel);
  CHECK(b.kernel == alone.kernel);
  for (const auto& entry : std::filesystem::directory_iterator(cache)) // the locks' files go with their compiles
    CHECK(entry.path().filename().string().rfind("lock-compile-", 0) != 0);
}

// One tuning per machine: a process that finds the problem's tuning lock held waits, then plans with the decision its
// holder stored. Here the test holds the lock and stores the decision; the helper, planning under policy bucket,
// would otherwise tune, which fails on the fake driver (no kernel computes anything).
TEST_CASE("a process that finds the tuning lock held waits for the holder's decision and plans with it") {
  TempDir dir;
  const std::string cache_dir = dir.path + "/cache", log = dir.path + "/driver.log";
  Problem p = small_problem(Semiring::log, DType::f32);
  p.shape = {4, 128, 64, 128}; // large enough to be tuned under bucket (is_small_problem)
  REQUIRE_FALSE(is_small_problem(p));
  const TuningDevice td = tuning_device(*current_device());
  const std::string key = tuning_key(p, td, true);
  DiskCache cache(cache_dir);
  REQUIRE(cache.usable());
  KeyLock held = cache.lock(key, std::chrono::seconds(1));
  REQUIRE(held.held());
  const KernelSpec chosen = default_spec(p, Strategy::linear);
  REQUIRE(chosen != default_spec(p));
  std::thread holder([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    Decision d;
    d.spec = chosen;
    d.problem = describe(p);
    d.family = tuning_family(p, td);
    d.bucket = true;
    d.shape = shape_bucket(p.shape);
    CHECK(cache.put(key, "tune", encode_decision(d)));
    held.release();
  });
  const ChildResult waiter = plan_in_child(cache_dir, log, "log", "f32", true, p.shape);
  holder.join();
  INFO(waiter.output);
  CHECK(waiter.status == 0);
  CHECK(waiter.kernel == emit_kernel(chosen).name);
  CHECK(waiter.output.find("waiting for pid " + std::to_string(::getpid()) + ", which is tuning") != std::string::npos);
  CHECK(waiter.output.find("no correct candidate") == std::string::npos);
}

// The attack: someone who can write the cache directory plants a valid entry (right key, right checksum) holding a
// cubin of their own. A cache directory others can write must not be trusted.
TEST_CASE("a planted cubin in a world-writable cache directory is not loaded") {
  TempDir dir;
  const std::string cache = dir.path + "/cache", log = dir.path + "/driver.log";
  const ChildResult first = plan_in_child(cache, log);
  REQUIRE(first.status == 0);
  const std::vector<LoadedImage> genuine = loaded_images(log);
  REQUIRE(genuine.size() == 1);

  // Replace every cubin entry with a well-formed entry (valid header, key and checksum) holding a changed cubin.
  std::vector<std::string> planted;
  bool genuine_on_disk = false;
  for (const auto& item : fs::directory_iterator(cache)) {
    const std::string name = item.path().filename().string();
    const auto dot = name.find('.');
    if (dot == std::string::npos || name.substr(dot) != ".cubin") continue;
    const std::string key = name.substr(0, dot);
    std::optional<std::string> cubin = decode_cache_entry(file_text(item.path().string()), key);
    REQUIRE(cubin);
    REQUIRE(cubin->size() > 200);
    genuine_on_disk = genuine_on_disk || is_image(genuine[0], *cubin); // the log's hash is over these bytes
    (*cubin)[150] = static_cast<char>((*cubin)[150] ^ 0x5a);           // still an ELF image, no longer NVRTC's
    std::ofstream(item.path(), std::ios::binary | std::ios::trunc) << encode_cache_entry(key, *cubin);
    planted.push_back(*cubin);
  }
  REQUIRE(!planted.empty());
  CHECK(genuine_on_disk);
  REQUIRE(::chmod(cache.c_str(), 0777) == 0); // as if created by someone else, or by a careless umask

  fs::remove(log);
  const ChildResult second = plan_in_child(cache, log);
  CHECK(second.status == 0); // the plan is still made (compiled anew, or the cache turned off)
  CHECK(second.kernel == first.kernel);
  const std::vector<LoadedImage> loads = loaded_images(log);
  REQUIRE(loads.size() == 1);
  for (const std::string& cubin : planted) CHECK_FALSE(is_image(loads[0], cubin)); // the attacker's bytes never run
  CHECK(loads[0] == genuine[0]); // NVRTC's own cubin again (NVRTC is deterministic) ...
  CHECK(second.compiles >= 1);   // ... compiled anew, not read from the untrusted directory
}

// Capture safety: tuning launches and synchronises, so a problem first planned for a stream that is being captured
// into a CUDA graph gets the default variant and tunes nothing; the first plan outside the capture tunes as usual.
// On the fake driver tuning launches candidates (the driver's log shows them) and then fails ("no correct
// candidate": nothing computes), which leaves the plan with the default variant and a warning.
TEST_CASE("inside a stream capture nothing is tuned; the next plan outside the capture tunes") {
  set_tune_policy(TunePolicy::bucket);
  Problem p;
  p.semiring = Semiring::max_times;
  p.dtype = DType::f64;
  p.shape = {4, 128, 67, 123}; // this test's own problem (no other test has planned or stored it), not a small one
  REQUIRE_FALSE(is_small_problem(p));
  const Stream stream = nullptr;
  ::setenv("JITBMM_FAKE_CUDA_CAPTURING", "1", 1);
  const SemiringBMM held = SemiringBMM::get(p, stream);
  CHECK(held.spec() == default_spec(p));
  {
    DeviceBuffer a(1 << 12), b(1 << 12), out(1 << 12), g(1 << 12), ga(1 << 12), gb(1 << 12);
    CHECK(held.backward_workspace_bytes(true, true, false, stream) > 0); // the argmax recomputed into scratch
    held.backward(a.get(), b.get(), out.get(), g.get(), ga.get(), gb.get(), stream);
    CHECK(held.grad_spec(Pass::grad_a) == default_grad_spec(grad_problem(p), Pass::grad_a));
  }
  jitbmm_problem c{};
  c.semiring = "max_times", c.dtype = "f64", c.B = 4, c.M = 128, c.K = 67, c.N = 123;
  const int64_t as[3] = {128 * 67, 67, 1}, bs[3] = {67 * 123, 123, 1}, os[3] = {128 * 123, 123, 1};
  std::copy(as, as + 3, c.a_strides), std::copy(bs, bs + 3, c.b_strides), std::copy(os, os + 3, c.out_strides);
  TempDir dir;
  const std::string log = dir.path + "/driver.log";
  ::setenv("JITBMM_FAKE_CUDA_LOG", log.c_str(), 1);
  jitbmm_plan* cp = nullptr;
  CHECK(jitbmm_plan_create_on_stream(&c, nullptr, &cp) == JITBMM_OK);
  jitbmm_plan_destroy(cp);
  CHECK(file_text(log).find("launch ") == std::string::npos); // no trial ran
  ::unsetenv("JITBMM_FAKE_CUDA_CAPTURING");
  // Outside the capture the same problem tunes (the held default was not remembered as its choice): its trial
  // launches candidates, finds none correct here, and the plan runs the default, stored nowhere.
  const SemiringBMM tuned = SemiringBMM::get(p, stream);
  CHECK(file_text(log).find("launch ") != std::string::npos);
  CHECK(tuned.spec() == default_spec(p));
  CHECK(jitbmm_plan_create_on_stream(&c, nullptr, &cp) == JITBMM_OK);
  jitbmm_plan_destroy(cp);
  CHECK_FALSE(stored_choice(DiskCache::process_cache(), p, tuning_device(*current_device()), TunePolicy::bucket,
                            Pass::forward, {}));
  ::unsetenv("JITBMM_FAKE_CUDA_LOG");
  set_tune_policy(TunePolicy::never);
}

// Tuning never turns a valid call into an error. With 512 MiB of device memory, a problem whose trial would need
// more than half of what is free is not tuned (nothing is drawn: no launch, no allocation of its size), and its plan
// and first backward run the default variants. A small problem times its light variants, which all fail here (the
// fake driver computes nothing): its plan runs the default too.
TEST_CASE("under memory pressure, or when tuning fails, plans and first backwards run the default variants") {
  set_tune_policy(TunePolicy::bucket);
  TempDir dir;
  const std::string log = dir.path + "/driver.log";
  ::setenv("JITBMM_FAKE_CUDA_LOG", log.c_str(), 1);
  ::setenv("JITBMM_FAKE_CUDA_MEMORY_BYTES", std::to_string(512 << 20).c_str(), 1);
  Problem p;
  p.semiring = Semiring::log;
  p.dtype = DType::f32;
  p.shape = {16, 4096, 1, 4096}; // a 1 GiB output
  REQUIRE(tunable(p));
  CHECK(trial_memory_refusal(p, Pass::forward, *current_device()).find("MiB of device memory") != std::string::npos);
  const SemiringBMM plan = SemiringBMM::get(p);
  CHECK(plan.spec() == default_spec(p));
  plan.backward_workspace_bytes(true, true, true); // chooses both passes' kernels
  CHECK(plan.grad_spec(Pass::grad_a) == default_grad_spec(grad_problem(p), Pass::grad_a));
  CHECK(plan.grad_spec(Pass::grad_b) == default_grad_spec(grad_problem(p), Pass::grad_b));
  CHECK(file_text(log).find("launch ") == std::string::npos);
  ::unsetenv("JITBMM_FAKE_CUDA_MEMORY_BYTES");

  Problem small = p;
  small.shape = {3, 6, 6, 6};
  REQUIRE(is_small_problem(small));
  const SemiringBMM quick = SemiringBMM::get(small);
  CHECK(file_text(log).find("launch ") != std::string::npos); // its trial ran
  CHECK(quick.spec() == default_spec(small));
  CHECK(quick.grad_spec(Pass::grad_a) == default_grad_spec(grad_problem(small), Pass::grad_a));
  CHECK_FALSE(stored_choice(DiskCache::process_cache(), small, tuning_device(*current_device()), TunePolicy::bucket,
                            Pass::forward, {}));
  ::unsetenv("JITBMM_FAKE_CUDA_LOG");
  set_tune_policy(TunePolicy::never);
}

// Data matter: a plan the tuner gave an exp_matmul variant watches its repair count (copied asynchronously after a
// call, read by a later call once landed) and moves to the wide-data variant when an observed call repaired a
// quarter of its outputs or more; below that, or while the stream is being captured, it stays.
// The helpers share one cache directory, so that only the first compiles the two variants: each stores the same two
// decisions before it plans, and a move to the wide-data variant is the plan's alone, stored nowhere.
TEST_CASE("a plan whose repairs dominate moves to the wide-data variant at its next call; otherwise it stays") {
  TempDir dir;
  const std::string cache = dir.path + "/cache";
  int exit_status = -1;
  const auto run = [&](const std::string& percent, bool capturing) {
    const test::HelperRun r = test::run_helper(
        {"--watch", percent}, {{"JITBMM_CACHE_DIR", cache}, {"JITBMM_FAKE_CUDA_CAPTURING", capturing ? "1" : "0"}});
    exit_status = r.status;
    return r.output;
  };
  const std::string moved = "call 1 exp_matmul\ncall 2 tiled\ncall 3 tiled\nreport: plan: run_with_repair_report needs an "
                            "exp_matmul plan, not tiled (the variant for wide-range data it moved to)\n";
  CHECK(run("60", false) == moved);
  CHECK(run("25", false) == moved);
  CHECK(run("10", false) == "call 1 exp_matmul\ncall 2 exp_matmul\ncall 3 exp_matmul\n");
  CHECK(run("60", true) == "call 1 exp_matmul\ncall 2 exp_matmul\ncall 3 exp_matmul\n");
  // Calls under UnwatchedCalls (an XLA handler's) neither count nor move.
  const test::HelperRun held = test::run_helper({"--watch", "60", "unwatched"}, {{"JITBMM_CACHE_DIR", cache}});
  CHECK(held.output == "call 1 exp_matmul\ncall 2 exp_matmul\ncall 3 exp_matmul\n");
  ::setenv("JITBMM_REPAIR_WATCH", "off", 1);
  CHECK(run("60", false) == "call 1 exp_matmul\ncall 2 exp_matmul\ncall 3 exp_matmul\n");
  CHECK(exit_status == 0);
  ::setenv("JITBMM_REPAIR_WATCH", "maybe", 1);
  CHECK(run("60", false).empty()); // get() throws std::invalid_argument naming the variable: the helper exits 1
  CHECK(exit_status == 1);
  ::unsetenv("JITBMM_REPAIR_WATCH");
}

// One process's choices made another's (jitbmm.torch.share_choices does this across ranks): the exporter plans with a
// stored, non-default decision and exports it; a process with its own empty cache plans the default, imports, and
// then plans with the exporter's variant.
TEST_CASE("choices exported by one process are the variants another plans with after importing them") {
  TempDir dir;
  const auto child = [&](const std::vector<std::string>& args, const std::string& cache) {
    const test::HelperRun r = test::run_helper(args, {{"JITBMM_CACHE_DIR", cache}});
    CHECK(r.status == 0);
    return r.output;
  };
  const std::string exported = child({"--share-export"}, dir.path + "/rank0");
  CHECK(exported.rfind("device sm_90 Fake H100\nchoice forward log f32 f32 2 33 17 40 ", 0) == 0);
  CHECK(exported.find("strategy=warp") != std::string::npos);
  std::ofstream(dir.path + "/choices.txt") << exported;
  const std::string imported = child({"--share-import", dir.path + "/choices.txt"}, dir.path + "/rank1");
  CHECK(imported.find("imported 1\n") == 0);
  CHECK(imported.find("before semiring=log dtype=f32 out=f32 argmax=0 strategy=tiled") != std::string::npos);
  CHECK(imported.find("after semiring=log dtype=f32 out=f32 argmax=0 strategy=warp index64=0 block=8x32\n") !=
        std::string::npos);
  // Choices of a device the text does not name (or of another kind of GPU) are brought in: checked against the CPU
  // reference on first use, which the fake driver, computing nothing, fails: the default serves, with a warning.
  std::ofstream(dir.path + "/unnamed.txt") << exported.substr(exported.find('\n') + 1);
  const test::HelperRun unnamed = test::run_helper({"--share-import", dir.path + "/unnamed.txt"},
                                                   {{"JITBMM_CACHE_DIR", dir.path + "/rank3"}}, true);
  CHECK(unnamed.status == 0);
  CHECK(unnamed.output.find("imported 1\n") != std::string::npos);
  CHECK(unnamed.output.find("failed its check against the CPU reference") != std::string::npos);
  CHECK(unnamed.output.find("after semiring=log dtype=f32 out=f32 argmax=0 strategy=tiled") != std::string::npos);
  // A variant this GPU cannot run (wgmma, on a device of sm_80: ranks on two kinds of GPU) is not stored: the rank
  // keeps its own, with a warning.
  const std::string line = exported.substr(0, exported.find(" | ")) +
                           " | semiring=log dtype=f32 out=f32 argmax=0 strategy=exp_matmul index64=0 tile=128x128x32 "
                           "thread=2x32 min_blocks=1 math=wgmma_tf32x3\n";
  std::ofstream(dir.path + "/other-gpu.txt") << line;
  const test::HelperRun other = test::run_helper({"--share-import", dir.path + "/other-gpu.txt"},
                                                 {{"JITBMM_CACHE_DIR", dir.path + "/rank2"}, {"JITBMM_FAKE_CUDA_SM", "80"}}, true);
  CHECK(other.status == 0);
  CHECK(other.output.find("imported 0\n") != std::string::npos);
  CHECK(other.output.find("need features sm_80 lacks") != std::string::npos);
  CHECK(other.output.find("after semiring=log dtype=f32 out=f32 argmax=0 strategy=tiled") != std::string::npos);
  // A rank whose own cache directory cannot keep decisions (others may write it, so it is not trusted; a trusted
  // read-only cache beside it) refuses the import instead of saying it took choices it cannot keep.
  const std::string open_dir = dir.path + "/open", trusted = dir.path + "/trusted";
  std::filesystem::create_directories(open_dir);
  std::filesystem::create_directories(trusted);
  std::filesystem::permissions(open_dir, std::filesystem::perms::all);
  std::filesystem::permissions(trusted, std::filesystem::perms::owner_all);
  const test::HelperRun kept_none = test::run_helper(
      {"--share-import", dir.path + "/choices.txt"},
      {{"JITBMM_CACHE_DIR", open_dir}, {"JITBMM_CACHE_TRUSTED_DIR", trusted}}, true);
  CHECK(kept_none.status == 1);
  CHECK(kept_none.output.find("cannot keep decisions") != std::string::npos);
  CHECK(kept_none.output.find("imported") == std::string::npos);
}
