// The autotuner's host side: candidates, shape buckets, decision keys, stored-spec parsing, the policy variable.
#include <doctest/doctest.h>

#include <algorithm>
#include <set>

#include "expect.hpp"
#include "runtime/autotune.hpp"
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
  const std::string good = to_string(KernelSpec{});
  expect_invalid([&] { parse_spec(good + " tile=1x2x3"); }, "canonical"); // a field the strategy does not use
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
  const auto long_k = tuning_candidates(problem(Semiring::max_plus, DType::f32, {4, 64, 65536, 64}), h100);
  CHECK(std::any_of(long_k.begin(), long_k.end(), [](const KernelSpec& s) { return s.strategy == Strategy::split_k; }));
  CHECK(std::any_of(long_k.begin(), long_k.end(),
                    [](const KernelSpec& s) { return s.strategy == Strategy::block_tree; }));
  const auto tiny = tuning_candidates(problem(Semiring::log, DType::f64, {1, 1, 3, 1}), h100);
  CHECK(std::none_of(tiny.begin(), tiny.end(), [](const KernelSpec& s) { return s.is_tiled(); }));
  const DeviceLimits small{256, 16 * 1024}; // a device that allows less prunes more
  for (const KernelSpec& s : tuning_candidates(problem(Semiring::log, DType::f32, {64, 512, 512, 512}), small))
    CHECK(s.threads() <= 256);
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
  CHECK(parse_tune_policy("never") == TunePolicy::never);
  CHECK(parse_tune_policy("bucket") == TunePolicy::bucket);
  CHECK(parse_tune_policy("exact") == TunePolicy::exact);
  expect_invalid([] { parse_tune_policy("always"); }, "JITBMM_TUNE");
}
