// Plans on the GPU: reuse without recompiling, the public entry points, bad arguments, empty problems (streams:
// test_streams.cpp).
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <string>
#include <thread>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <utility>
#include <vector>

#include "runtime/tuner/shipped_decisions.hpp"
#include "differential.hpp"
#include "expect.hpp"
#include "feature_level.hpp"
#include "generator/emit_source.hpp"
#include "jitbmm/errors.hpp"
#include "runtime/autotune.hpp"
#include "cache/disk_cache.hpp"
#include "jitbmm/reference.hpp"
#include "needs.hpp"
#include "runtime/device_memory.hpp"
#include "runtime/jit.hpp"
#include "runtime/repair_watch.hpp"

using namespace jitbmm;

using test::expect_invalid;

TEST_CASE("a second get() of the same problem reuses the compiled kernel: no second NVRTC call") {
  Problem p;
  p.semiring = Semiring::max_plus;
  p.shape = {3, 5, 7, 9};
  const SemiringBMM first = SemiringBMM::get(p);
  const long compiles = stats().nvrtc_compiles;
  const SemiringBMM second = SemiringBMM::get(p);
  CHECK(stats().nvrtc_compiles == compiles);
  CHECK(first.kernel_name() == second.kernel_name());
  p.shape = {4, 6, 8, 10}; // same spec, other sizes: still no compile
  SemiringBMM::get(p);
  CHECK(stats().nvrtc_compiles == compiles);
  KernelSpec fresh = default_spec(p); // a spec no other test uses compiles exactly once
  fresh.block_x = 96;
  fresh.block_y = 3;
  SemiringBMM::get(p, fresh);
  SemiringBMM::get(p, fresh);
  CHECK(stats().nvrtc_compiles == compiles + 1);
}

TEST_CASE("JitLogBMM computes the log semiring on row-major f32") {
  const Shape s{8, 64, 64, 64};
  Problem p;
  p.shape = s;
  const JitLogBMM plan = JitLogBMM::get(s);
  CHECK(plan.plan().problem().semiring == Semiring::log);
  CHECK(plan.plan().source().find(plan.plan().kernel_name()) != std::string::npos);
  CHECK(plan.plan().registers() > 0);
  std::mt19937_64 rng(3);
  const auto r = test::run_case(p, plan.plan().spec(), rng, {});
  CHECK(r.ok());
  CHECK(r.checked == s.B * s.M * s.N);
}

TEST_CASE("bad arguments are std::invalid_argument naming the argument") {
  Problem p;
  p.shape = {2, 3, 4, 5};
  const SemiringBMM plan = SemiringBMM::get(p);
  DeviceBuffer a(2 * 3 * 4 * 4), b(2 * 4 * 5 * 4), out(2 * 3 * 5 * 4);
  expect_invalid([&] { plan(nullptr, b.get(), out.get()); }, "a: null");
  expect_invalid([&] { plan(a.get(), nullptr, out.get()); }, "b: null");
  expect_invalid([&] { plan(a.get(), b.get(), nullptr); }, "out: null");
  expect_invalid([&] { plan(a.get(), b.get(), out.get(), reinterpret_cast<int32_t*>(out.get()), nullptr); }, "argmax");
  Problem arg = p;
  arg.semiring = Semiring::max_plus;
  arg.with_argmax = true;
  const SemiringBMM with_arg = SemiringBMM::get(arg);
  expect_invalid([&] { with_arg(a.get(), b.get(), out.get()); }, "argmax");
  expect_invalid([&] { with_arg(a.get(), b.get(), out.get(), nullptr, nullptr); }, "argmax: null");
  Problem neg = p;
  neg.shape.M = -3;
  expect_invalid([&] { SemiringBMM::get(neg); }, "shape.M");
  KernelSpec narrow = default_spec(p);
  Problem big = p;
  big.shape = {1, 3, 5, 2};
  big.a_strides = Strides{0, int64_t(1) << 31, 1};
  expect_invalid([&] { SemiringBMM::get(big, narrow); }, "spec.index64");
}

TEST_CASE("empty problems launch nothing; K = 0 writes the semiring zero") {
  Problem p;
  p.shape = {0, 3, 4, 5};
  CHECK_NOTHROW(SemiringBMM::get(p)(nullptr, nullptr, nullptr));
  p.shape = {2, 0, 4, 5};
  CHECK_NOTHROW(SemiringBMM::get(p)(nullptr, nullptr, nullptr));
  const double zeros[] = {-INFINITY, -INFINITY, INFINITY, 0.0, 0.0};
  const Semiring semirings[] = {Semiring::log, Semiring::max_plus, Semiring::min_plus, Semiring::max_times,
                                Semiring::plus_times};
  for (int s = 0; s < 5; ++s) {
    p.semiring = semirings[s];
    p.shape = {2, 3, 0, 4};
    DeviceBuffer out(24 * 4);
    out.fill_bytes(0x7f);
    SemiringBMM::get(p)(nullptr, nullptr, out.get());
    check(driver().cuCtxSynchronize(), "sync");
    float host[24];
    out.download(host, sizeof host);
    for (float v : host) CHECK(v == zeros[s]);
  }
}

TEST_CASE("64-bit indexing: an operand whose offsets pass 2^31 elements") {
  Problem p;
  p.dtype = DType::bf16;
  p.shape = {1, 3, 5, 4};
  const int64_t row = (int64_t(1) << 30) + 7; // a's rows sit 2^30 elements apart: offsets reach 2^31 + 18
  p.a_strides = Strides{0, row, 1};
  const KernelSpec spec = default_spec(p);
  CHECK(spec.index64);
  std::mt19937_64 rng(64);
  auto a = test::random_tensor(DType::bf16, 3 * 5, rng, {}), b = test::random_tensor(DType::bf16, 5 * 4, rng, {});
  DeviceBuffer da((2 * row + 5) * 2), db(b.bytes.size()), dout(12 * 2);
  for (int64_t i = 0; i < 3; ++i) da.upload(a.bytes.data() + i * 5 * 2, 5 * 2, i * row * 2);
  db.upload(b.data(), b.bytes.size());
  dout.fill_bytes(0x7f);
  SemiringBMM::get(p, spec)(da.get(), db.get(), dout.get());
  check(driver().cuCtxSynchronize(), "sync");
  test::HostTensor out;
  out.dtype = DType::bf16;
  out.bytes.resize(24);
  dout.download(out.data(), 24);
  Problem compact = p;
  compact.a_strides.reset();
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 4; ++j)
      CHECK(reference::close(DType::bf16, out.at(i * 4 + j), reference::element(compact, a.data(), b.data(), 0, i, j),
                             1e-2));
}

TEST_CASE("a failed driver call is a CudaError naming the CUresult") {
  try {
    check(CUDA_ERROR_INVALID_VALUE, "cuSomething");
    FAIL("expected CudaError");
  } catch (const CudaError& e) {
    CHECK(std::string(e.what()).find("cuSomething failed: CUDA_ERROR_INVALID_VALUE") != std::string::npos);
    CHECK(e.result_name() == "CUDA_ERROR_INVALID_VALUE");
  }
}

TEST_CASE("a second process finds its kernels in the disk cache and compiles nothing") {
  const std::string dir = std::string(std::getenv("JITBMM_CACHE_DIR")) + "/second-process";
  const char* cli = std::getenv("JITBMM_TEST_CLI"); // where the test program runs away from its build
  const std::string run =
      "JITBMM_CACHE_DIR=" + dir + " " + (cli ? cli : JITBMM_CLI_PATH) + " demo --shape 2x64x64x64 > " + dir;
  std::filesystem::create_directories(dir);
  std::filesystem::permissions(dir, std::filesystem::perms::owner_all); // a cache dir others can write is refused
  REQUIRE(std::system((run + "/first.txt 2>&1").c_str()) == 0);
  REQUIRE(std::system((run + "/second.txt 2>&1").c_str()) == 0);
  auto text = [&](const char* name) {
    std::ifstream in(dir + "/" + name);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const std::string first = text("first.txt"), second = text("second.txt");
  CAPTURE(first);
  CAPTURE(second);
  CHECK(first.find("NVRTC compiles in this process: 0") == std::string::npos);
  CHECK(second.find("NVRTC compiles in this process: 0 (disk cache: " + dir + ")") != std::string::npos);
  CHECK(second.find("demo: verified") != std::string::npos);
}

namespace {

// A directory for JITBMM_OVERRIDE_DIR (under the suite's cache) holding `planted`'s kernel made to compute wrong
// results (a selecting semiring's outputs plus one: Select::finalize): where a planted kernel must be caught by a
// check.
std::string plant_broken_kernel(const KernelSpec& planted, const std::string& name) {
  GeneratedKernel kernel = emit_kernel(planted);
  const std::string correct = "return st.k < 0 ? Op::zero() : st.v; }";
  const std::size_t at = kernel.source.find(correct);
  REQUIRE(at != std::string::npos);
  kernel.source.replace(at, correct.size(), "return st.k < 0 ? Op::zero() : st.v + T(1); }");
  const std::string dir = std::string(std::getenv("JITBMM_CACHE_DIR")) + "/" + name;
  std::filesystem::create_directories(dir);
  // An override directory or file that others can write is ignored, whatever the umask made them.
  std::filesystem::permissions(dir, std::filesystem::perms::owner_all);
  const std::string file = dir + "/" + kernel.name + ".cu";
  std::ofstream(file) << kernel.source;
  std::filesystem::permissions(file, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  return dir;
}

} // namespace

TEST_CASE("the autotuner rejects a candidate whose output is wrong, and still picks a correct one") {
  Problem p;
  p.semiring = Semiring::max_times;
  p.dtype = DType::bf16;
  p.shape = {2, 48, 40, 56};
  // Plant a broken kernel for one candidate (linear, 64x4 threads) through the override directory.
  KernelSpec planted = default_spec(p, Strategy::linear);
  planted.block_x = 64, planted.block_y = 4;
  const std::string dir = plant_broken_kernel(planted, "override");
  ::setenv("JITBMM_OVERRIDE_DIR", dir.c_str(), 1);
  const TuneReport report = autotune(p, *current_device(), false);
  ::unsetenv("JITBMM_OVERRIDE_DIR");
  bool seen = false;
  for (const CandidateResult& c : report.candidates)
    if (c.spec == planted) {
      seen = true;
      CHECK(c.status.rfind("wrong result", 0) == 0);
    }
  CHECK(seen);
  CHECK(report.best != planted);
  std::mt19937_64 rng(9);
  CHECK(test::run_case(p, report.best, rng, {}).ok());
}

TEST_CASE("decisions brought from elsewhere: shipped ones serve their GPU, and a kernel that fails its check is passed over") {
  const auto device = current_device();
  const TuningDevice td = tuning_device(*device);
  ::setenv("JITBMM_SHIPPED_DECISIONS", "on", 1);
  Problem p;
  p.shape = {64, 512, 512, 512}; // log f32, a point of scripts/tune-shipped's grid
  if (shipped_decisions().products.count(tuning_key(p, td, false))) {
    // A GPU jitbmm ships decisions for: the first choice takes them, checked against the CPU reference.
    const Choice c = choose(p, *device, TunePolicy::bucket);
    CHECK(c.source == "shipped exact");
    std::mt19937_64 rng(21);
    CHECK(test::run_case(p, c.spec, rng, {}).ok());
    Problem between = p;
    between.shape = {64, 384, 384, 384};
    CHECK(choose(between, *device, TunePolicy::never).source == "shipped bucket");
  } else {
    MESSAGE("no decisions are shipped for " << device->name << ": the shipped part is not checked here");
  }
  ::setenv("JITBMM_SHIPPED_DECISIONS", "off", 1);
  // An imported decision whose kernel computes wrong results (planted through the override directory) fails its
  // check on first use: the choice passes it over, with one warning, and the plan gives the right results.
  Problem q;
  q.semiring = Semiring::max_times; // a selecting semiring: plant_broken_kernel changes its finalize
  q.dtype = DType::f32;
  q.shape = {5, 37, 29, 43}; // a shape no other test stores
  KernelSpec planted = default_spec(q, Strategy::linear);
  planted.block_x = 64, planted.block_y = 4;
  REQUIRE(planted != default_spec(q));
  const std::string dir = plant_broken_kernel(planted, "override-imported");
  Decision d;
  d.spec = planted;
  d.problem = describe(q);
  d.family = tuning_family(q, td);
  d.shape = q.shape;
  DiskCache* disk = DiskCache::process_cache();
  REQUIRE(disk);
  const std::string key = tuning_key(q, td, false);
  REQUIRE(import_decisions(*disk, {{key, "tune", encode_decision(d)}}, "test").stored == 1);
  ::setenv("JITBMM_OVERRIDE_DIR", dir.c_str(), 1);
  const Choice c = choose(q, *device, TunePolicy::never);
  ::unsetenv("JITBMM_OVERRIDE_DIR");
  CHECK(c.source == "default");
  CHECK(c.spec != planted);
  std::mt19937_64 rng(22);
  CHECK(test::run_case(q, c.spec, rng, {}).ok());
}

TEST_CASE("bucket policy: the first problem of a family tunes, later shapes reuse its bucket or the nearest one") {
  Problem p;
  p.semiring = Semiring::min_plus;
  p.dtype = DType::f32;
  p.with_argmax = true; // a family no other test tunes
  p.shape = {64, 40, 48, 40};
  REQUIRE_FALSE(is_small_problem(p));
  const auto device = current_device();
  const Choice first = choose(p, *device, TunePolicy::bucket);
  CHECK(first.source == "tuned now");
  Problem same_bucket = p;
  same_bucket.shape = {64, 36, 40, 50};
  const long compiles = stats().nvrtc_compiles;
  const Choice second = choose(same_bucket, *device, TunePolicy::bucket);
  CHECK(second.source == "bucket");
  CHECK(second.spec == first.spec);
  REQUIRE(second.decision);
  CHECK(second.decision->ranking.size() >= 1);
  SemiringBMM::get(same_bucket, second.spec);
  CHECK(stats().nvrtc_compiles - compiles <= 1); // no tuning: at most the one kernel
  Problem near = p;
  near.shape = {64, 100, 48, 40}; // bucket 64x128x64x64: distance 1 from 64x64x64x64
  const Choice third = choose(near, *device, TunePolicy::bucket);
  CHECK(third.source == "nearest bucket");
  CHECK(third.spec == first.spec);
  CHECK(choose(near, *device, TunePolicy::never).source == "nearest bucket");
  Problem elsewhere = p;
  elsewhere.shape = {16, 300, 200, 100}; // far (distance 9): the family model times its best predicted variants
  CHECK(choose(elsewhere, *device, TunePolicy::never).source == "default");
  const Choice modelled = choose(elsewhere, *device, TunePolicy::bucket);
  CHECK(modelled.source.rfind("family model: ", 0) == 0);
  std::mt19937_64 rng(11);
  CHECK(test::run_case(elsewhere, modelled.spec, rng, {}).ok());
  CHECK(choose(elsewhere, *device, TunePolicy::exact).source == "tuned now"); // asked for: tunes this shape
  CHECK(test::run_case(near, third.spec, rng, {}).ok());
  // A small problem of a family no other test tunes times its light variants and stores the winner for its bucket
  // (not for its shape: JITBMM_TUNE=exact still searches the whole space there).
  Problem tiny = p;
  tiny.semiring = Semiring::max_times;
  tiny.dtype = DType::f64;
  tiny.shape = {3, 41, 47, 39};
  REQUIRE(is_small_problem(tiny));
  const Choice light = choose(tiny, *device, TunePolicy::bucket);
  CHECK(light.source.rfind("small problem: ", 0) == 0);
  CHECK(choose(tiny, *device, TunePolicy::never).source == "bucket");
  CHECK(test::run_case(tiny, light.spec, rng, {}).ok());
}

TEST_CASE("scratch: a caller's workspace gives the pool's results; the pool keeps its memory until released") {
  Problem split;
  split.shape = {2, 20, 5000, 24}; // few outputs, long K: split-K's partial results
  Problem em;
  em.shape = {3, 70, 90, 50};
  for (const auto& [p, spec] : {std::pair{split, default_spec(split, Strategy::split_k)},
                                std::pair{em, test::exp_matmul_spec_here(em)}}) {
    CAPTURE(to_string(spec));
    const SemiringBMM plan = SemiringBMM::get(p, spec);
    const Shape& s = p.shape;
    REQUIRE(plan.workspace_bytes() > 0);
    std::mt19937_64 rng(77);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> ha(s.B * s.M * s.K), hb(s.B * s.K * s.N);
    for (float& v : ha) v = normal(rng);
    for (float& v : hb) v = normal(rng);
    DeviceBuffer a(ha.size() * 4), b(hb.size() * 4), out(s.B * s.M * s.N * 4);
    a.upload(ha.data(), ha.size() * 4);
    b.upload(hb.data(), hb.size() * 4);
    std::vector<float> from_pool(s.B * s.M * s.N), from_caller(s.B * s.M * s.N);
    out.fill_bytes(0xff);
    plan(a.get(), b.get(), out.get());
    check(driver().cuCtxSynchronize(), "cuCtxSynchronize");
    out.download(from_pool.data(), from_pool.size() * 4);
    DeviceBuffer workspace(plan.workspace_bytes());
    workspace.fill_bytes(0xff); // NaN everywhere: a kernel that reads scratch it did not write shows
    out.fill_bytes(0xff);
    plan(a.get(), b.get(), out.get(), nullptr, nullptr, Workspace{workspace.get(), workspace.size()});
    check(driver().cuCtxSynchronize(), "cuCtxSynchronize");
    out.download(from_caller.data(), from_caller.size() * 4);
    CHECK(std::memcmp(from_pool.data(), from_caller.data(), from_pool.size() * 4) == 0);
    CHECK(std::isfinite(from_caller[0]));

    // The pool: what one call took stays mapped across synchronisations, and is given back on request.
    release_pool_memory();
    plan(a.get(), b.get(), out.get());
    check(driver().cuCtxSynchronize(), "cuCtxSynchronize");
    const std::size_t kept = stats().pool_reserved_bytes;
    CHECK(kept >= plan.workspace_bytes());
    for (int i = 0; i < 20; ++i) {
      plan(a.get(), b.get(), out.get());
      check(driver().cuCtxSynchronize(), "cuCtxSynchronize");
    }
    CHECK(stats().pool_reserved_bytes == kept);
    release_pool_memory();
    CHECK(stats().pool_reserved_bytes < kept);
  }
}

// run_if: every launch of a plan whose flag is 0 returns before writing anything, whatever the strategy (the
// generated entries check it), so out and argmax keep their poison; with the flag 1 the call gives what a plain call
// gives, bit for bit, and so does a call with b's factors of the previous call (exp_matmul prepares a alone) after a
// skipped one, which does not count as a previous call: the skipped call is given another b, whose factors a prepare
// that ran would have left in the workspace.
TEST_CASE("run_if: a flag of 0 leaves out and argmax untouched; 1 gives the plain call's result") {
  Problem split;
  split.shape = {2, 20, 5000, 24};
  Problem em;
  em.shape = {3, 70, 90, 50};
  Problem viterbi;
  viterbi.semiring = Semiring::max_plus;
  viterbi.with_argmax = true;
  viterbi.shape = {2, 33, 17, 40};
  for (const auto& [p, spec] :
       {std::pair{split, default_spec(split, Strategy::split_k)}, std::pair{em, test::exp_matmul_spec_here(em)},
        std::pair{viterbi, default_spec(viterbi, Strategy::tiled)}}) {
    CAPTURE(to_string(spec));
    const SemiringBMM plan = SemiringBMM::get(p, spec);
    const Shape& s = p.shape;
    std::mt19937_64 rng(91);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> ha(s.B * s.M * s.K), hb(s.B * s.K * s.N), hb2(hb.size());
    for (float& v : ha) v = normal(rng);
    for (float& v : hb) v = normal(rng);
    for (float& v : hb2) v = normal(rng);
    const std::size_t outputs = std::size_t(s.B * s.M * s.N);
    DeviceBuffer a(ha.size() * 4), b(hb.size() * 4), other_b(hb2.size() * 4), out(outputs * 4), argmax(outputs * 4),
        flag(4), workspace(std::max<std::size_t>(plan.workspace_bytes(), 1));
    a.upload(ha.data(), ha.size() * 4);
    b.upload(hb.data(), hb.size() * 4);
    other_b.upload(hb2.data(), hb2.size() * 4);
    const Workspace ws{workspace.get(), plan.workspace_bytes()};
    int32_t* const arg = p.with_argmax ? static_cast<int32_t*>(argmax.get()) : nullptr;
    auto results = [&] {
      check(driver().cuCtxSynchronize(), "cuCtxSynchronize");
      std::vector<uint32_t> r(2 * outputs);
      out.download(r.data(), outputs * 4);
      argmax.download(r.data() + outputs, outputs * 4);
      return r;
    };
    auto poison = [&] {
      out.fill_bytes(0xff);
      argmax.fill_bytes(0xff);
    };
    auto set_flag = [&](int v) { flag.upload(&v, 4); };
    poison();
    plan(a.get(), b.get(), out.get(), arg, nullptr, ws);
    const std::vector<uint32_t> plain = results();
    CHECK(plain[0] != 0xffffffffu);
    for (const bool same_b : {false, true}) {
      CAPTURE(same_b);
      poison();
      set_flag(0);
      plan.run_if(static_cast<const int*>(flag.get()), a.get(), other_b.get(), out.get(), arg, nullptr, ws, false);
      const std::vector<uint32_t> skipped = results();
      CHECK(std::all_of(skipped.begin(), skipped.end(), [](uint32_t w) { return w == 0xffffffffu; }));
      set_flag(1);
      plan.run_if(static_cast<const int*>(flag.get()), a.get(), b.get(), out.get(), arg, nullptr, ws, same_b);
      CHECK(results() == plain);
    }
  }
  const SemiringBMM plan = SemiringBMM::get(em, test::exp_matmul_spec_here(em));
  CHECK_THROWS_WITH_AS(plan.run_if(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, Workspace{}),
                       doctest::Contains("needed"), std::invalid_argument);
}

// Data matter (runtime/repair_watch.hpp): a plan given an exp_matmul variant, called on randn*200 inputs (most outputs
// repaired), reads the repair count of its first call once it has landed and moves to the wide-data variant (here
// stored: tiled) exactly when that call repaired kWideRepairShare of its outputs or more (measured here with
// run_with_repair_report). Every call's outputs match the reference; a plan called on randn stays.
TEST_CASE("a plan whose repairs dominate moves to the wide-data variant; its results stay exact" *
          doctest::test_suite(test::kNeedsDiskCache)) {
  DiskCache* disk = DiskCache::process_cache();
  REQUIRE(disk); // the decisions are stored there
  Problem p;
  p.shape = {3, 160, 96, 200};
  p.b_strides = column_major(96, 200); // a layout no other test tunes
  KernelSpec em = default_spec(p), wide = default_spec(p);
  em.strategy = Strategy::exp_matmul, em.math = Math::fma, em.tile_m = 128, em.tile_n = 64, em.tile_k = 16;
  em.thread_m = 8, em.thread_n = 4, em.min_blocks = 2;
  wide.strategy = Strategy::tiled;
  const auto device = current_device();
  const TuningDevice td = tuning_device(*device);
  for (const auto& [spec, range] : {std::pair{em, InputRange::normal}, std::pair{wide, InputRange::wide}}) {
    TuneReport report;
    report.best = spec;
    report.candidates.push_back({spec, 1.0, "ok"});
    put_decision(*disk, tuning_key(p, td, false, Pass::forward, range),
                 decision_from(p, td, report, Pass::forward, range));
  }
  const Shape& s = p.shape;
  for (const double spread : {1.0, 200.0}) {
    CAPTURE(spread);
    const SemiringBMM plan = SemiringBMM::get(p);
    REQUIRE(plan.spec().strategy == Strategy::exp_matmul);
    std::mt19937_64 rng(21);
    std::normal_distribution<double> normal(0.0, spread);
    std::vector<float> ha(s.B * s.M * s.K), hb(s.B * s.K * s.N), ho(s.B * s.M * s.N);
    for (float& x : ha) x = static_cast<float>(normal(rng));
    for (float& x : hb) x = static_cast<float>(normal(rng));
    DeviceBuffer a(ha.size() * 4), b(hb.size() * 4), out(ho.size() * 4);
    a.upload(ha.data(), ha.size() * 4);
    b.upload(hb.data(), hb.size() * 4);
    const SemiringBMM::RepairReport seen = SemiringBMM::get(p, em).run_with_repair_report(a.get(), b.get(), out.get());
    const bool wide_data = seen.repaired_outputs >= kWideRepairShare * seen.outputs;
    MESSAGE(seen.repaired_outputs << " of " << seen.outputs << " outputs repaired at spread " << spread);
    CHECK(wide_data == (spread > 1));
    for (int call = 1; call <= 3; ++call) {
      CAPTURE(call);
      out.fill_bytes(0xff);
      plan(a.get(), b.get(), out.get());
      check(driver().cuCtxSynchronize(), "cuCtxSynchronize");
      out.download(ho.data(), ho.size() * 4);
      int bad = 0;
      for (int n = 0; n < 200; ++n) {
        const int64_t o = std::uniform_int_distribution<int64_t>(0, ho.size() - 1)(rng);
        const auto want = reference::element(p, ha.data(), hb.data(), o / (s.M * s.N), o / s.N % s.M, o % s.N);
        bad += !reference::close(DType::f32, ho[o], want, reference::tolerance(p));
      }
      CHECK(bad == 0);
      // The first call's count lands before the second call (synchronised above): on wide data that call moves.
      CHECK(plan.spec().strategy == (wide_data && call >= 2 ? Strategy::tiled : Strategy::exp_matmul));
    }
  }
}

namespace {

// One forward and backward of `plan` on a, b and G (host copies beside), each output and gradient sampled against
// the float64 reference; the number of samples that disagree.
int training_step_errors(const SemiringBMM& plan, const std::vector<float>& ha, const std::vector<float>& hb,
                         const std::vector<float>& hg, std::mt19937_64& rng) {
  const Problem& p = plan.problem();
  const Shape& s = p.shape;
  DeviceBuffer a(ha.size() * 4), b(hb.size() * 4), g(hg.size() * 4), out(hg.size() * 4), ga(ha.size() * 4),
      gb(hb.size() * 4);
  a.upload(ha.data(), ha.size() * 4);
  b.upload(hb.data(), hb.size() * 4);
  g.upload(hg.data(), hg.size() * 4);
  out.fill_bytes(0xff), ga.fill_bytes(0xff), gb.fill_bytes(0xff); // poison: an unwritten element shows
  plan(a.get(), b.get(), out.get());
  plan.backward(a.get(), b.get(), out.get(), g.get(), ga.get(), gb.get());
  check(driver().cuCtxSynchronize(), "cuCtxSynchronize");
  std::vector<float> ho(hg.size()), hga(ha.size()), hgb(hb.size());
  out.download(ho.data(), ho.size() * 4), ga.download(hga.data(), hga.size() * 4);
  gb.download(hgb.data(), hgb.size() * 4);
  const std::vector<double> out_d(ho.begin(), ho.end()), g_d(hg.begin(), hg.end());
  int bad = 0;
  for (int n = 0; n < 200; ++n) {
    const int64_t o = std::uniform_int_distribution<int64_t>(0, s.B * s.M * s.N - 1)(rng);
    const auto want = reference::element(p, ha.data(), hb.data(), o / (s.M * s.N), o / s.N % s.M, o % s.N);
    bad += !reference::close(DType::f32, ho[o], want, reference::tolerance(p));
    const int64_t x = std::uniform_int_distribution<int64_t>(0, s.B * s.M * s.K - 1)(rng);
    const auto want_a = reference::gradient_element(p, ha.data(), hb.data(), out_d.data(), nullptr, g_d.data(),
                                                    Pass::grad_a, x / (s.M * s.K), x / s.K % s.M, x % s.K);
    bad += !reference::close_gradient(DType::f32, hga[x], want_a, reference::tolerance(p));
    const int64_t y = std::uniform_int_distribution<int64_t>(0, s.B * s.K * s.N - 1)(rng);
    const auto want_b = reference::gradient_element(p, ha.data(), hb.data(), out_d.data(), nullptr, g_d.data(),
                                                    Pass::grad_b, y / (s.K * s.N), y / s.N % s.K, y % s.N);
    bad += !reference::close_gradient(DType::f32, hgb[y], want_b, reference::tolerance(p));
  }
  return bad;
}

} // namespace

// A product whose stored decisions take exp_matmul (the forward in FMA; its passes on tensor cores where the device
// has them), planned as jitbmm.torch's first training step plans it: its calls run quick builds of the default
// variants until the chosen ones are built in the background, then those; every step against the float64 reference,
// at an odd shape with −inf among the operands.
TEST_CASE("a stand-in plan: a first training step in quick default builds, then in its chosen exp_matmul kernels" *
          doctest::test_suite(test::kNeedsDiskCache)) {
  DiskCache* disk = DiskCache::process_cache();
  REQUIRE(disk);
  Problem p;
  p.shape = {3, 200, 136, 184}; // a shape no other test stores
  const auto device = current_device();
  const TuningDevice td = tuning_device(*device);
  KernelSpec forward = default_spec(p, Strategy::exp_matmul);
  forward.math = Math::fma, forward.tile_m = 128, forward.tile_n = 64, forward.tile_k = 16;
  forward.thread_m = 8, forward.thread_n = 4, forward.min_blocks = 2;
  const bool mma = device->features.has(kMmaTf32Bf16);
  std::vector<std::pair<Pass, KernelSpec>> decisions = {{Pass::forward, forward}};
  if (mma)
    for (const Pass pass : {Pass::grad_a, Pass::grad_b})
      decisions.emplace_back(pass, default_grad_spec(p, pass, Strategy::exp_matmul));
  for (const auto& [pass, spec] : decisions) {
    TuneReport report;
    report.best = spec;
    report.candidates.push_back({spec, 1.0, "ok"});
    put_decision(*disk, tuning_key(p, td, false, pass), decision_from(p, td, report, pass));
  }
  const bool built = kernel_known(*device, forward); // then nothing compiles long: no stand-in
  ::setenv("JITBMM_STAND_IN", "on", 1);
  SemiringBMM::prepare(p, true, true);
  const SemiringBMM plan = SemiringBMM::get(p);
  ::setenv("JITBMM_STAND_IN", "off", 1);
  const Shape& s = p.shape;
  std::mt19937_64 rng(20261205);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> ha(s.B * s.M * s.K), hb(s.B * s.K * s.N), hg(s.B * s.M * s.N);
  for (auto* v : {&ha, &hb, &hg})
    for (float& x : *v) x = normal(rng);
  // Special values: a row of a all −inf (its outputs −inf, their gradients 0), and scattered −inf in b.
  std::fill(ha.begin() + s.M * s.K + 5 * s.K, ha.begin() + s.M * s.K + 6 * s.K, -INFINITY);
  for (std::size_t i = 7; i < hb.size(); i += 97) hb[i] = -INFINITY;
  MESSAGE("the first plan " << (plan.settled() ? "runs its chosen kernels" : "runs its stand-in") << ": "
                            << to_string(plan.spec()));
  if (!built) CHECK_FALSE(plan.settled());
  CHECK(training_step_errors(plan, ha, hb, hg, rng) == 0);
  // The two passes build side by side in the background, each taken once it is built.
  const auto grads_chosen = [&] {
    return !mma || (plan.grad_spec(Pass::grad_a).strategy == Strategy::exp_matmul &&
                    plan.grad_spec(Pass::grad_b).strategy == Strategy::exp_matmul);
  };
  for (int i = 0; i < 12000 && !(plan.settled() && grads_chosen()); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  REQUIRE(plan.settled());
  CHECK(plan.spec() == forward);
  CHECK(grads_chosen());
  CHECK(training_step_errors(plan, ha, hb, hg, rng) == 0);
}
