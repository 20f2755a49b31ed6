// The autotuner's host side: candidates, shape buckets, decision keys, stored-spec parsing, the policy variable.
#include <doctest/doctest.h>

#include <algorithm>
#include <set>

#include "cache/disk_cache.hpp"
#include "expect.hpp"
#include "runtime/autotune.hpp"
#include "runtime/repair_watch.hpp"
#include "runtime/tuner/search_space.hpp"
#include "support/log.hpp"
#include "variants.hpp"

using namespace jitbmm;
using test::expect_invalid;

namespace {

Problem problem(Semiring s, DType d, Shape shape) {
  Problem p;
  p.semiring = s;
  p.dtype = d;
  p.shape = shape;
  return p;
}

} // namespace

TEST_CASE("every spec prints and parses back to itself; malformed text is rejected") {
  for (const KernelSpec& spec : test::all_variants()) {
    CAPTURE(to_string(spec));
    CHECK(parse_spec(to_string(spec)) == spec);
  }
  for (const KernelSpec& spec : test::grad_variants()) {
    CAPTURE(to_string(spec));
    CHECK(parse_spec(to_string(spec)) == spec);
    CHECK(to_string(spec).find(std::string(" pass=") + pass_name(spec.pass)) != std::string::npos);
  }
  const std::string good = to_string(KernelSpec{});
  expect_invalid([&] { parse_spec(good + " pass=forward"); }, "canonical"); // forward is written by omission
  expect_invalid([&] { parse_spec(good + " tile=1x2x3"); }, "canonical");   // a field the strategy does not use
  expect_invalid([] { parse_spec("semiring=log dtype=f32"); }, "spec.out");
  expect_invalid([&] { parse_spec(good + " bogus=1"); }, "unknown field");
  expect_invalid([] { parse_spec("semiring=log semiring=log"); }, "twice");
  expect_invalid([] { parse_spec("semiring=log dtype=f32 out=f32 argmax=2 strategy=linear index64=0 block=32x8"); },
                 "spec.argmax");
  expect_invalid([] { parse_spec("semiring=log dtype=f32 out=f32 argmax=0 strategy=linear index64=0 block=32xx8"); },
                 "spec.block");
  expect_invalid(
      [] { parse_spec("semiring=log dtype=f32 out=f32 argmax=0 strategy=linear index64=0 block=99999999999x8"); },
      "spec.block");
}

TEST_CASE("candidates fit the problem and the device, are distinct, and cover the strategies that apply") {
  const DeviceLimits h100{1024, 48 * 1024};
  const auto big = tuning_candidates(problem(Semiring::log, DType::f32, {64, 512, 512, 512}), h100);
  std::set<Strategy> strategies;
  for (const KernelSpec& s : big) {
    CHECK_NOTHROW(check_spec_fits(s, problem(Semiring::log, DType::f32, {64, 512, 512, 512})));
    strategies.insert(s.strategy);
    CHECK(std::count(big.begin(), big.end(), s) == 1);
  }
  CHECK(strategies.count(Strategy::tiled) == 1);
  CHECK(strategies.count(Strategy::linear) == 1);
  CHECK(big.size() <= 32); // cold tuning must stay within seconds
  // exp_matmul: FMA and 3xTF32 always for log; one TF32 product only where the problem allows precision = fast.
  const auto has_math = [](const std::vector<KernelSpec>& specs, Math m) {
    return std::any_of(specs.begin(), specs.end(),
                       [m](const KernelSpec& s) { return s.strategy == Strategy::exp_matmul && s.math == m; });
  };
  CHECK(has_math(big, Math::fma));
  CHECK(has_math(big, Math::tf32x3));
  CHECK_FALSE(has_math(big, Math::tf32));
  Problem fast = problem(Semiring::log, DType::f32, {64, 512, 512, 512});
  fast.precision = Precision::fast;
  const auto fast_candidates = tuning_candidates(fast, h100);
  CHECK(has_math(fast_candidates, Math::tf32));
  for (const KernelSpec& s : fast_candidates) CHECK_NOTHROW(check_spec_fits(s, fast));
  CHECK_FALSE(
      has_math(tuning_candidates(problem(Semiring::max_plus, DType::f32, {64, 512, 512, 512}), h100), Math::fma));
  // The wgmma forms: only on a GPU that has wgmma and room for their stages; 1xTF32 only at fast there too.
  CHECK_FALSE(has_math(big, Math::wgmma_tf32x3));
  DeviceLimits hopper = h100;
  hopper.max_dynamic_shared_bytes = 227 * 1024, hopper.features = arch_features(90);
  const auto hopper_exact = tuning_candidates(problem(Semiring::log, DType::f32, {64, 512, 512, 512}), hopper);
  CHECK(has_math(hopper_exact, Math::wgmma_tf32x3));
  CHECK_FALSE(has_math(hopper_exact, Math::wgmma_tf32));
  CHECK(hopper_exact.size() <= 32);
  const auto hopper_fast = tuning_candidates(fast, hopper);
  CHECK(has_math(hopper_fast, Math::wgmma_tf32));
  CHECK(has_math(hopper_fast, Math::wgmma_tf32x3)); // every exact variant is valid at fast
  for (const KernelSpec& s : hopper_fast) CHECK_NOTHROW(check_spec_fits(s, fast));
  // The wgmma forms walk a list of their tiles from a looping grid: a tall problem's rows bound none of them, where
  // the other forms' tile rows are the grid's y (at most 65535).
  Problem tall = fast;
  tall.shape = {1, 8400000, 64, 64};
  int tall_wgmma = 0;
  for (const KernelSpec& s : hopper_fast) {
    if (s.strategy != Strategy::exp_matmul) continue;
    CAPTURE(to_string(s));
    CHECK(fitting(s, tall).has_value() == uses_wgmma(s.math)); // every other form's tile is at most 128 rows
    tall_wgmma += uses_wgmma(s.math);
  }
  CHECK(tall_wgmma > 0);
  const auto f64_candidates = tuning_candidates(problem(Semiring::log, DType::f64, {8, 256, 256, 256}), h100);
  CHECK(has_math(f64_candidates, Math::fma));
  CHECK_FALSE(has_math(f64_candidates, Math::tf32x3));
  const auto long_k = tuning_candidates(problem(Semiring::max_plus, DType::f32, {4, 64, 65536, 64}), h100);
  CHECK(std::any_of(long_k.begin(), long_k.end(), [](const KernelSpec& s) { return s.strategy == Strategy::split_k; }));
  CHECK(std::any_of(long_k.begin(), long_k.end(),
                    [](const KernelSpec& s) { return s.strategy == Strategy::block_tree; }));
  const auto tiny = tuning_candidates(problem(Semiring::log, DType::f64, {1, 1, 3, 1}), h100);
  CHECK(std::none_of(tiny.begin(), tiny.end(), [](const KernelSpec& s) { return s.is_tiled(); }));
  const DeviceLimits small{256, 16 * 1024}; // a device that allows less prunes more
  const auto small_candidates = tuning_candidates(problem(Semiring::log, DType::f32, {64, 512, 512, 512}), small);
  for (const KernelSpec& s : small_candidates) {
    CHECK(s.threads() <= 256);
    CHECK(shared_memory_bytes(s) <= 16 * 1024); // the one formula check_spec_fits uses too
  }
  // 32x32x16 needs 9 KiB (a formula twice as large once pruned it here).
  CHECK(std::any_of(small_candidates.begin(), small_candidates.end(),
                    [](const KernelSpec& s) { return s.strategy == Strategy::tiled; }));
}

TEST_CASE("shape buckets round each size up to a power of two") {
  CHECK(shape_bucket({64, 512, 512, 512}) == Shape{64, 512, 512, 512});
  CHECK(shape_bucket({3, 500, 129, 1}) == Shape{4, 512, 256, 1});
  CHECK(shape_bucket({0, 7, 0, 9}) == Shape{0, 8, 0, 16});
}

TEST_CASE("decision keys change with the device, the problem and the bucket, and only then") {
  const TuningDevice h100{"NVIDIA H100 80GB HBM3", "sm_90", "13.0", 132, 13000};
  const Problem p = problem(Semiring::log, DType::f32, {64, 500, 512, 512});
  const std::string k = tuning_key(p, h100, false);
  CHECK(tuning_key(p, h100, false) == k);
  CHECK(tuning_key(p, h100, true) != k);
  TuningDevice other = h100;
  other.sm_count = 114;
  CHECK(tuning_key(p, other, false) != k);
  other = h100;
  other.name = "NVIDIA H200";
  CHECK(tuning_key(p, other, false) != k);
  Problem q = p;
  q.shape.M = 501;
  CHECK(tuning_key(q, h100, false) != k);
  CHECK(tuning_key(q, h100, true) == tuning_key(p, h100, true)); // same bucket
  q = p;
  q.a_strides = column_major(p.shape.M, p.shape.K);
  CHECK(tuning_key(q, h100, true) != tuning_key(p, h100, true)); // layout kind is part of the key
  q = p;
  q.semiring = Semiring::max_plus;
  CHECK(tuning_key(q, h100, false) != k);
}

TEST_CASE("the tuning policy comes from JITBMM_TUNE") {
  ::unsetenv("JITBMM_TUNE");
  CHECK(tune_policy_from_env() == TunePolicy::bucket);
  CHECK(parse_tune_policy("never") == TunePolicy::never);
  CHECK(parse_tune_policy("bucket") == TunePolicy::bucket);
  CHECK(parse_tune_policy("exact") == TunePolicy::exact);
  expect_invalid([] { parse_tune_policy("always"); },
                 "JITBMM_TUNE: unsupported 'always' (expected never, bucket or exact)");
  for (TunePolicy policy : {TunePolicy::never, TunePolicy::bucket, TunePolicy::exact})
    CHECK(parse_tune_policy(tune_policy_name(policy)) == policy);
}

TEST_CASE("every JITBMM_* variable that takes a word reads it in any case; a spec's fields keep their spelling") {
  const auto with_env = [](const char* name, const char* value, auto read) {
    ::setenv(name, value, 1);
    const auto got = read();
    ::unsetenv(name);
    return got;
  };
  CHECK(with_env("JITBMM_TUNE", "BUCKET", tune_policy_from_env) == TunePolicy::bucket);
  CHECK(with_env("JITBMM_TUNE", "Never", tune_policy_from_env) == TunePolicy::never);
  CHECK(parse_log_level("DEBUG") == LogLevel::debug);
  CHECK_FALSE(with_env("JITBMM_CACHE", "OFF", DiskCache::enabled_from_env));
  CHECK(with_env("JITBMM_CACHE", "Yes", DiskCache::enabled_from_env));
  CHECK_FALSE(with_env("JITBMM_REPAIR_WATCH", "OFF", repair_watch_enabled));
  CHECK_FALSE(with_env("JITBMM_REPAIR_WATCH", "0", repair_watch_enabled)); // the same switch words as JITBMM_CACHE
  CHECK(with_env("JITBMM_REPAIR_WATCH", "On", repair_watch_enabled));
  // What is no word in any case is still an error naming the variable and the value.
  expect_invalid([] { parse_tune_policy("ALWAYS"); },
                 "JITBMM_TUNE: unsupported 'ALWAYS' (expected never, bucket or exact)");
  expect_invalid([&] { with_env("JITBMM_REPAIR_WATCH", "maybe", repair_watch_enabled); },
                 "JITBMM_REPAIR_WATCH: expected on or off (or 1/0, true/false, yes/no), got 'maybe'");
  ::unsetenv("JITBMM_REPAIR_WATCH");
  expect_invalid([] { parse_dtype("F32"); }, "dtype: unsupported 'F32' (expected f32, f64, f16 or bf16)");
}

namespace {

Decision sample_decision() {
  const Problem p = problem(Semiring::log, DType::f32, {64, 500, 512, 512});
  Decision d;
  d.spec = default_spec(p);
  d.problem = describe(p);
  d.family = tuning_family(p, {"NVIDIA H100 80GB HBM3", "sm_90", "13.0", 132, 13000});
  d.bucket = true;
  d.shape = shape_bucket(p.shape);
  d.seconds = 4.125;
  d.ranking = {{d.spec, 2.5519, "ok"}, {default_spec(p, Strategy::warp), 9.6138, "ok"}};
  return d;
}

} // namespace

TEST_CASE("a decision's origin and reason keep their line whatever they hold: an imported one stays imported") {
  Decision d = sample_decision();
  d.origin = "imported from /tmp/odd\nname.txt";
  d.reason = "tuned\r\tnow";
  const auto back = decode_decision(encode_decision(d));
  REQUIRE(back);
  CHECK(back->origin == "imported from /tmp/odd?name.txt");
  CHECK(back->reason == "tuned??now");
  CHECK(back->ranking.size() == 2);
}

TEST_CASE("a stored decision reads back as written; every truncation or damaged line is rejected") {
  const Decision d = sample_decision();
  const std::string text = encode_decision(d);
  const auto back = decode_decision(text);
  REQUIRE(back);
  CHECK(back->spec == d.spec);
  CHECK(back->problem == d.problem);
  CHECK(back->family == d.family);
  CHECK(back->bucket);
  CHECK(back->shape == d.shape);
  CHECK(back->seconds == doctest::Approx(4.125));
  REQUIRE(back->ranking.size() == 2);
  CHECK(back->ranking[1].spec == d.ranking[1].spec);
  CHECK(back->ranking[1].median_ms == doctest::Approx(9.6138));
  // Cut inside any of the six required lines: rejected (cuts between candidate lines are valid decisions).
  const std::size_t required = text.find("candidate ");
  for (std::size_t cut = 0; cut + 1 < required; ++cut) {
    CAPTURE(cut);
    CHECK_FALSE(decode_decision(text.substr(0, cut)));
  }
  auto replaced = [&](const std::string& from, const std::string& to) {
    std::string t = text;
    t.replace(t.find(from), from.size(), to);
    return t;
  };
  CHECK_FALSE(decode_decision(replaced("scope bucket", "scope nearby")));
  CHECK_FALSE(decode_decision(replaced("family ", "family x")));
  CHECK_FALSE(decode_decision(replaced("shape 64x", "shape 64y")));
  CHECK_FALSE(decode_decision(replaced("seconds 4.125", "seconds 4.125s")));
  CHECK_FALSE(decode_decision(replaced("candidate 2.55190", "candidate 2.5x")));
  CHECK_FALSE(decode_decision(replaced("strategy=tiled", "strategy=magic")));
  CHECK_FALSE(decode_decision(text + "rm -rf /\n"));
  CHECK_FALSE(decode_decision(std::string(70000, 'x')));
}

TEST_CASE("an unseen shape borrows the decision of the nearest tuned bucket") {
  CHECK_FALSE(nearest_decision({}, {1, 2, 3, 4}));
  Decision small = sample_decision(), big = sample_decision(), tall = sample_decision();
  small.shape = {8, 64, 64, 64};
  big.shape = {64, 512, 512, 512};
  tall.shape = {1, 4096, 64, 4096};
  const std::vector<Decision> tuned = {small, big, tall};
  CHECK(nearest_decision(tuned, {8, 60, 64, 70})->shape == small.shape);
  CHECK(nearest_decision(tuned, {32, 512, 300, 512})->shape == big.shape);
  CHECK(nearest_decision(tuned, {2, 3000, 64, 2000})->shape == tall.shape);
  CHECK(nearest_decision(tuned, {0, 0, 0, 0})->shape == small.shape); // empty sizes count as 1
}

TEST_CASE("the family key ignores the shape and nothing else") {
  const TuningDevice h100{"NVIDIA H100 80GB HBM3", "sm_90", "13.0", 132, 13000};
  const Problem p = problem(Semiring::log, DType::f32, {64, 500, 512, 512});
  Problem q = p;
  q.shape = {1, 7, 9, 11};
  CHECK(tuning_family(p, h100) == tuning_family(q, h100));
  q.dtype = DType::f64;
  CHECK(tuning_family(p, h100) != tuning_family(q, h100));
  // The driver's major version counts, its minor releases do not (the kernels are NVRTC's, not the driver's).
  TuningDevice other = h100;
  other.driver_version = 13010;
  CHECK(tuning_family(p, other) == tuning_family(p, h100));
  other.driver_version = 14000;
  CHECK(tuning_family(p, other) != tuning_family(p, h100));
}

TEST_CASE("backward specs: the default per semiring and pass, and what check_spec_fits refuses") {
  Problem p = problem(Semiring::log, DType::f32, {64, 512, 256, 128});
  const KernelSpec ga = default_grad_spec(p, Pass::grad_a), gb = default_grad_spec(p, Pass::grad_b);
  CHECK(ga.strategy == Strategy::tiled);
  CHECK(ga.pass == Pass::grad_a);
  CHECK(gb.pass == Pass::grad_b);
  CHECK(ga.thread_m * ga.thread_n <= 32);
  CHECK_NOTHROW(check_spec_fits(ga, p));
  const KernelSpec sel = default_grad_spec(problem(Semiring::max_plus, DType::f16, {2, 3, 4, 5}), Pass::grad_b);
  CHECK(sel.strategy == Strategy::histogram);
  // Past 4 chunks of grad_b's bins (768 k in f32, 384 in f64) the selecting semirings scatter.
  CHECK(default_grad_spec(problem(Semiring::max_plus, DType::f32, {2, 3, 3072, 5}), Pass::grad_a).strategy ==
        Strategy::histogram);
  CHECK(default_grad_spec(problem(Semiring::max_times, DType::f32, {2, 3, 3073, 5}), Pass::grad_a).strategy ==
        Strategy::scatter);
  CHECK(default_grad_spec(problem(Semiring::min_plus, DType::f64, {2, 3, 1537, 5}), Pass::grad_b).strategy ==
        Strategy::scatter);
  // The tiled gradient's rows are its operand's (grad_b's: K), at most 65535 tiles of 128: beyond, the error names
  // that axis, not the transposed problem's.
  CHECK_NOTHROW(default_grad_spec(problem(Semiring::log, DType::f32, {1, 16, 8388480, 16}), Pass::grad_b));
  expect_invalid([&] { default_grad_spec(problem(Semiring::log, DType::f32, {1, 16, 8388481, 16}), Pass::grad_b); },
                 "shape.K: the tiled gradient of b takes at most 65535 tiles");
  expect_invalid([&] { default_grad_spec(problem(Semiring::log, DType::f32, {1, 8388481, 16, 16}), Pass::grad_a); },
                 "shape.M: the tiled gradient of a takes at most 65535 tiles");
  p.with_argmax = false;
  KernelSpec bad = ga;
  bad.strategy = Strategy::linear;
  expect_invalid([&] { check_spec_fits(bad, p); }, "spec.strategy");
  expect_invalid([&] { check_spec_fits(sel, problem(Semiring::log, DType::f16, {2, 3, 4, 5})); }, "spec.semiring");
  KernelSpec forward_scatter = default_spec(p);
  forward_scatter.strategy = Strategy::scatter;
  forward_scatter.block_x = 256, forward_scatter.block_y = 1;
  expect_invalid([&] { check_spec_fits(forward_scatter, p); }, "backward strategy");
  Problem with_arg = problem(Semiring::max_plus, DType::f32, {2, 3, 4, 5});
  with_arg.with_argmax = true;
  expect_invalid([&] { check_spec_fits(default_grad_spec(with_arg, Pass::grad_a), with_arg); }, "spec.");
  KernelSpec wide = ga;
  wide.tile_m = wide.tile_n = 128, wide.thread_m = 8, wide.thread_n = 8;
  expect_invalid([&] { check_spec_fits(wide, p); }, "shared memory");
  expect_invalid([] { default_grad_spec(problem(Semiring::log, DType::f32, {1, 2, 3, 4}), Pass::forward); }, "pass");
}

TEST_CASE("backward candidates and keys are their own") {
  const DeviceLimits h100{1024, 48 * 1024};
  const Problem p = problem(Semiring::log, DType::f32, {64, 512, 512, 512});
  for (Pass pass : {Pass::grad_a, Pass::grad_b}) {
    const auto c = tuning_candidates(p, h100, pass);
    CHECK(c.size() >= 3);
    int exp_matmul = 0;
    for (const KernelSpec& s : c) {
      CHECK(s.pass == pass);
      if (s.strategy == Strategy::exp_matmul) { // tensor-core fragments: their own register budget
        ++exp_matmul;
        CHECK(s.math == Math::tf32x3); // exact precision: never the one-product TF32 form
        continue;
      }
      CHECK(s.strategy == Strategy::tiled);
      CHECK(s.thread_m * s.thread_n <= 32);
    }
    CHECK(exp_matmul == 3); // the exp_matmul backward's tiles beside the direct ones
    // f16 and bf16 gradients, whose tolerance is 1e-2, take the one-product TF32 form at exact precision too.
    for (DType half : {DType::f16, DType::bf16}) {
      CAPTURE(dtype_info(half).name);
      const Problem q = problem(Semiring::log, half, {64, 512, 512, 512});
      const auto hc = tuning_candidates(q, h100, pass);
      const auto single = std::find_if(hc.begin(), hc.end(), [](const KernelSpec& s) { return s.math == Math::tf32; });
      REQUIRE(single != hc.end());
      CHECK_NOTHROW(check_spec_fits(*single, q));
    }
  }
  // The selecting semirings: histogram's four block sizes, then scatter's three.
  const auto sc = tuning_candidates(problem(Semiring::max_times, DType::f32, {4, 64, 64, 64}), h100, Pass::grad_b);
  REQUIRE(sc.size() == 7);
  CHECK(sc.front().strategy == Strategy::histogram);
  CHECK(std::count_if(sc.begin(), sc.end(), [](const KernelSpec& s) { return s.strategy == Strategy::scatter; }) == 3);
  const TuningDevice h{"NVIDIA H100 80GB HBM3", "sm_90", "13.0", 132, 13000};
  CHECK(tuning_key(p, h, false, Pass::grad_a) != tuning_key(p, h, false));
  CHECK(tuning_key(p, h, false, Pass::grad_a) != tuning_key(p, h, false, Pass::grad_b));
  CHECK(tuning_family(p, h, Pass::grad_b) != tuning_family(p, h));
}
