// Stored tuning decisions can be discarded: one that does not parse, no longer fits, or names a kernel that fails
// to compile or load is skipped (with a warning) and the problem is decided again by the next source of the
// cascade. Host-level: a scratch disk cache and plan callbacks stand in for the device (stored_choice and
// plan_with_choice are the two halves of what SemiringBMM::get and the backward run).
#include <doctest/doctest.h>
#include <stdlib.h>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "cache/disk_cache.hpp"
#include "expect.hpp"
#include "jitbmm/errors.hpp"
#include "runtime/autotune.hpp"
#include "runtime/tuner/decision_text.hpp"

using namespace jitbmm;
namespace fs = std::filesystem;

namespace {

struct ScratchCache {
  std::string path;
  std::unique_ptr<DiskCache> cache;
  ScratchCache() {
    std::string templ = (fs::temp_directory_path() / "jitbmm-decisions-test-XXXXXX").string();
    path = ::mkdtemp(templ.data());
    cache = std::make_unique<DiskCache>(path);
  }
  ~ScratchCache() {
    cache.reset();
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

const TuningDevice kDevice{"Fake H100", "sm_90", "13.0", 132, 13000};

Problem sample() {
  Problem p;
  p.shape = {8, 512, 256, 512};
  return p;
}

Decision decision_for(const Problem& p, const KernelSpec& spec, bool bucket, Shape shape) {
  Decision d;
  d.spec = spec;
  d.problem = describe(p);
  d.family = tuning_family(p, kDevice);
  d.bucket = bucket;
  d.shape = shape;
  return d;
}

void plant(DiskCache& disk, const Problem& p, const Decision& d) {
  Problem keyed = p;
  keyed.shape = d.shape;
  REQUIRE(disk.put(tuning_key(keyed, kDevice, d.bucket), "tune", encode_decision(d)));
}

// The cascade as choose() runs it, with the default standing for tuning.
Choice decide(DiskCache& disk, const Problem& p, const std::vector<KernelSpec>& rejected) {
  if (auto c = stored_choice(&disk, p, kDevice, TunePolicy::never, Pass::forward, rejected)) return *c;
  return {default_spec(p), "default", {}};
}

} // namespace

TEST_CASE("a malformed decision decodes to nothing") {
  for (const std::string text :
       {std::string(""), std::string("\n"), std::string("spec \n"), std::string(1, '\0') + "\n",
        std::string("spec semiring=log dtype=f32 out=f32 argmax=0 strategy=linear index64=0 block=32x8\n"),
        std::string("spec semiring=log dtype=f32 out=f32 argmax=0 strategy=linear index64=0 block=32x8\nproblem x\n"
                    "family ") +
            std::string(64, 'a') + "\nscope exact\nshape 1x2x3x99999999999999999999\nseconds 1\n"})
    CHECK_FALSE(decode_decision(text));
}

// Every decoder (products' and chains') reads a line `name value` through field_value: the name, one space, a
// value that is not empty; the value may hold spaces of its own.
TEST_CASE("a decision's line reads `name value` with a non-empty value, and nothing else") {
  CHECK(field_value("reason small problem", "reason") == std::optional<std::string>("small problem"));
  CHECK(field_value("chunk 64", "chunk") == std::optional<std::string>("64"));
  CHECK_FALSE(field_value("chunk ", "chunk"));
  CHECK_FALSE(field_value("chunk", "chunk"));
  CHECK_FALSE(field_value("chunked 64 1 2 3", "chunk"));
  CHECK_FALSE(field_value(" chunk 64", "chunk"));
  FieldReader in("chain log\nforward_cluster \nseconds 1.500\n", 1024);
  CHECK(in.field("chain") == std::optional<std::string>("log"));
  CHECK_FALSE(in.field("forward_cluster"));
  CHECK_FALSE(in.field("saving_cluster")); // consumes the next line, another name's
  CHECK_FALSE(in.field("seconds"));        // so nothing is left
}

TEST_CASE("a decision's durations are finite and not negative, and its specs ones that can exist") {
  const Problem p = sample();
  Decision d = decision_for(p, default_spec(p, Strategy::tiled), false, p.shape);
  d.seconds = 2.5;
  d.ranking = {{default_spec(p, Strategy::tiled), 0.25, "ok"}, {default_spec(p, Strategy::linear), 1.5, "ok"}};
  const std::string good = encode_decision(d);
  const auto decoded = decode_decision(good);
  REQUIRE(decoded);
  CHECK(decoded->seconds == 2.5);
  REQUIRE(decoded->ranking.size() == 2);
  CHECK(decoded->ranking[1].median_ms == 1.5);
  // One line of the good text replaced: every variant must decode to nothing.
  const auto replaced = [&](const std::string& from, const std::string& to) {
    const std::size_t at = good.find(from);
    REQUIRE(at != std::string::npos);
    return good.substr(0, at) + to + good.substr(at + from.size());
  };
  for (const char* seconds : {"nan", "inf", "-inf", "-1.000", "1e3", " 2.5", "+2.5", "2.", ".5", "0x1p1", "2..5", ""}) {
    CAPTURE(seconds);
    CHECK_FALSE(decode_decision(replaced("seconds 2.500\n", std::string("seconds ") + seconds + "\n")));
  }
  for (const char* ms : {"nan", "inf", "-0.25000", "1e-1"}) {
    CAPTURE(ms);
    CHECK_FALSE(decode_decision(replaced("candidate 0.25000 ", std::string("candidate ") + ms + " ")));
  }
  KernelSpec impossible = default_spec(p, Strategy::tiled);
  impossible.tile_m = -128; // parses, canonical, but no kernel has it
  const std::string tiled = to_string(default_spec(p, Strategy::tiled));
  CHECK_FALSE(decode_decision(replaced("candidate 0.25000 " + tiled, "candidate 0.25000 " + to_string(impossible))));
  CHECK_FALSE(decode_decision(replaced("spec " + tiled, "spec " + to_string(impossible))));
  KernelSpec threads = default_spec(p, Strategy::tiled);
  threads.thread_n = 3; // 16 x 21 threads: no whole number of warps
  CHECK_FALSE(decode_decision(replaced("candidate 0.25000 " + tiled, "candidate 0.25000 " + to_string(threads))));
  KernelSpec other = default_spec(p, Strategy::tiled);
  other.dtype = other.out_dtype = DType::f64; // timed on another problem
  CHECK_FALSE(decode_decision(replaced("candidate 0.25000 " + tiled, "candidate 0.25000 " + to_string(other))));
  CHECK_FALSE(decode_decision(replaced("candidate 0.25000 " + tiled, "candidate 0.25000 " + tiled + " ")));
}

TEST_CASE("the cascade skips stored decisions that are rejected, stale or unreadable") {
  ScratchCache scratch;
  DiskCache& disk = *scratch.cache;
  const Problem p = sample();
  const KernelSpec exact_spec = default_spec(p, Strategy::tiled);
  KernelSpec bucket_spec = exact_spec;
  bucket_spec.min_blocks = 1;
  KernelSpec near_spec = default_spec(p, Strategy::linear);
  plant(disk, p, decision_for(p, exact_spec, false, p.shape));
  plant(disk, p, decision_for(p, bucket_spec, true, shape_bucket(p.shape)));
  plant(disk, p, decision_for(p, near_spec, true, {8, 1024, 256, 512})); // one bucket away
  CHECK(decide(disk, p, {}).source == "exact");
  CHECK(decide(disk, p, {exact_spec}).source == "bucket");
  const Choice near = decide(disk, p, {exact_spec, bucket_spec});
  CHECK(near.source == "nearest bucket");
  CHECK(near.spec == near_spec);
  CHECK(decide(disk, p, {exact_spec, bucket_spec, near_spec}).source == "default");
  // exact policy: no bucket, no nearest.
  CHECK_FALSE(stored_choice(&disk, p, kDevice, TunePolicy::exact, Pass::forward, {exact_spec}));

  // A planted exact decision whose spec cannot fit (a negative tile): skipped with a warning, the bucket used.
  KernelSpec broken = exact_spec;
  broken.tile_m = -128;
  plant(disk, p, decision_for(p, broken, false, p.shape));
  CHECK(decide(disk, p, {}).source == "bucket");
  // One that does not parse at all: skipped the same way, and moved aside, so no later process reads it (and warns
  // about it) again; the next decision stored takes its place.
  const std::string key = tuning_key(p, kDevice, false);
  REQUIRE(disk.put(key, "tune", "spec strategy=magic\n"));
  CHECK(decide(disk, p, {}).source == "bucket");
  CHECK_FALSE(fs::exists(scratch.path + "/" + key + ".tune"));
  CHECK(fs::exists(scratch.path + "/" + key + ".tune.bad"));
  CHECK(decide(*std::make_unique<DiskCache>(scratch.path), p, {}).source == "bucket");
  // Another bucket's damaged decision, met while looking for the nearest, goes the same way.
  Problem far = p;
  far.shape = {8, 2048, 256, 512};
  const std::string far_key = tuning_key(far, kDevice, true);
  REQUIRE(disk.put(far_key, "tune", "seconds nan\n"));
  CHECK(decide(disk, p, {exact_spec, bucket_spec}).source == "nearest bucket");
  CHECK(fs::exists(scratch.path + "/" + far_key + ".tune.bad"));
  plant(disk, p, decision_for(p, exact_spec, false, p.shape));
  CHECK(decide(disk, p, {}).source == "exact");
  // A decision under the forward's key whose spec is a backward pass's (an edited or foreign file): never chosen, at
  // any step of the cascade, since its kernel would read the forward's parameters as its own.
  const KernelSpec backward = default_grad_spec(p, Pass::grad_b);
  plant(disk, p, decision_for(p, backward, false, p.shape));
  CHECK(decide(disk, p, {}).source == "bucket");
  plant(disk, p, decision_for(p, backward, true, shape_bucket(p.shape)));
  const Choice after = decide(disk, p, {});
  CHECK(after.spec.pass == Pass::forward);
  CHECK(after.source == "nearest bucket");
  plant(disk, p, decision_for(p, backward, true, {8, 1024, 256, 512}));
  CHECK(decide(disk, p, {}).source == "default");
}

TEST_CASE("a stored decision whose kernel fails to compile or load is discarded and the problem decided again") {
  ScratchCache scratch;
  DiskCache& disk = *scratch.cache;
  const Problem p = sample();
  KernelSpec planted = default_spec(p, Strategy::tiled);
  planted.min_blocks = 1;
  REQUIRE(planted != default_spec(p));
  plant(disk, p, decision_for(p, planted, false, p.shape));
  std::vector<KernelSpec> tried;
  const KernelSpec used = plan_with_choice([&](const auto& rejected) { return decide(disk, p, rejected); },
                                           [&](const KernelSpec& spec) {
                                             tried.push_back(spec);
                                             if (spec == planted) throw CompileError("NVRTC: planted failure", "log");
                                           });
  CHECK(used == default_spec(p));
  REQUIRE(tried.size() == 2);
  CHECK(tried[0] == planted);

  // A driver failure to load it counts the same.
  tried.clear();
  CHECK(plan_with_choice([&](const auto& rejected) { return decide(disk, p, rejected); },
                         [&](const KernelSpec& spec) {
                           tried.push_back(spec);
                           if (spec == planted) throw CudaError("cuModuleLoadData", 200, "CUDA_ERROR_INVALID_IMAGE");
                         }) == default_spec(p));
  CHECK(tried.size() == 2);

  // Other errors, and any error of a spec not from a stored decision, propagate.
  test::expect_invalid(
      [&] {
        plan_with_choice([&](const auto& rejected) { return decide(disk, p, rejected); },
                         [&](const KernelSpec&) { throw std::invalid_argument("spec.tile: nope"); });
      },
      "spec.tile");
  CHECK_THROWS_AS(plan_with_choice(
                      [&](const auto&) {
                        return Choice{default_spec(p), "default", {}};
                      },
                      [&](const KernelSpec&) { throw CompileError("NVRTC: default fails", "log"); }),
                  CompileError);
  // Every stored decision failing ends at the default, whose own error then propagates (no endless retry).
  int calls = 0;
  CHECK_THROWS_AS(plan_with_choice([&](const auto& rejected) { return decide(disk, p, rejected); },
                                   [&](const KernelSpec&) {
                                     ++calls;
                                     throw CompileError("NVRTC: nothing compiles", "log");
                                   }),
                  CompileError);
  CHECK(calls == 2);
}
