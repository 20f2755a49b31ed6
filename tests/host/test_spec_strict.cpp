// check_spec_fits is strict: every field within range before any arithmetic on it, enums that hold one of their
// values, products that cannot overflow. Each refusal names the field.
#include <doctest/doctest.h>

#include <climits>
#include <string>

#include "expect.hpp"
#include "jitbmm/kernel_spec.hpp"

using namespace jitbmm;
using test::expect_invalid;

namespace {

Problem sample() {
  Problem p;
  p.shape = {2, 256, 64, 256};
  return p;
}

} // namespace

TEST_CASE("negative, zero and oversized tile fields are refused, naming the field") {
  const Problem p = sample();
  const KernelSpec tiled = default_spec(p, Strategy::tiled);
  REQUIRE_NOTHROW(check_spec_fits(tiled, p));
  const std::pair<const char*, int KernelSpec::*> fields[] = {
      {"spec.tile_m", &KernelSpec::tile_m},     {"spec.tile_n", &KernelSpec::tile_n},
      {"spec.tile_k", &KernelSpec::tile_k},     {"spec.thread_m", &KernelSpec::thread_m},
      {"spec.thread_n", &KernelSpec::thread_n}, {"spec.min_blocks", &KernelSpec::min_blocks}};
  for (const auto& [name, field] : fields)
    for (int v : {-1, 0, INT_MIN, INT_MAX, 1 << 20}) {
      KernelSpec s = tiled;
      s.*field = v;
      CAPTURE(name);
      CAPTURE(v);
      expect_invalid([&] { check_spec_fits(s, p); }, name);
    }
  // Products of in-range-looking fields that overflowed int before: -2^16 x -2^16 threads.
  KernelSpec neg = tiled;
  neg.tile_m = neg.tile_n = -65536, neg.thread_m = neg.thread_n = -1;
  expect_invalid([&] { check_spec_fits(neg, p); }, "spec.tile_m");
  KernelSpec split = default_spec(p, Strategy::split_k);
  split.k_chunk = -16;
  expect_invalid([&] { check_spec_fits(split, p); }, "spec.k_chunk");
  KernelSpec linear = default_spec(p, Strategy::linear);
  for (int v : {-32, 0, 1 << 16, INT_MAX}) {
    KernelSpec s = linear;
    s.block_x = v;
    expect_invalid([&] { check_spec_fits(s, p); }, "spec.block_x");
    s = linear;
    s.block_y = v;
    expect_invalid([&] { check_spec_fits(s, p); }, "spec.block_y");
  }
  KernelSpec wrap = linear;
  wrap.block_x = wrap.block_y = 65536; // 2^32 threads: 0 in int arithmetic
  expect_invalid([&] { check_spec_fits(wrap, p); }, "spec.block");
  CHECK(wrap.threads() == INT32_MAX); // computed in 64 bits, clamped
}

TEST_CASE("enum fields cast from garbage ints are refused, naming the field") {
  const Problem p = sample();
  const KernelSpec base = default_spec(p);
  auto garbage = [&](auto mutate, const char* field) {
    KernelSpec s = base;
    mutate(s);
    expect_invalid([&] { check_spec_fits(s, p); }, field);
  };
  for (int v : {-1, 8, 99, INT_MAX}) {
    CAPTURE(v);
    garbage([v](KernelSpec& s) { s.strategy = static_cast<Strategy>(v); }, "spec.strategy");
    garbage([v](KernelSpec& s) { s.math = static_cast<Math>(v); }, "spec.math");
    garbage([v](KernelSpec& s) { s.pass = static_cast<Pass>(v); }, "spec.pass");
    garbage([v](KernelSpec& s) { s.dtype = static_cast<DType>(v); }, "spec.dtype");
    garbage([v](KernelSpec& s) { s.out_dtype = static_cast<DType>(v); }, "spec.out_dtype");
    garbage([v](KernelSpec& s) { s.semiring = static_cast<Semiring>(v); }, "spec.semiring");
  }
}

TEST_CASE("grid limits are decided by check_spec_fits, naming the size") {
  Problem tall = sample();
  tall.shape = {1, int64_t(65536) * 128, 1, 64};
  expect_invalid([&] { check_spec_fits(default_spec(sample(), Strategy::tiled), tall); }, "shape.M");
  Problem wide = sample();
  wide.shape = {1, 1, 1, int64_t(1) << 40};
  KernelSpec linear = default_spec(sample(), Strategy::linear);
  linear.index64 = true;
  expect_invalid([&] { check_spec_fits(linear, wide); }, "shape.N");
  KernelSpec warp = default_spec(wide, Strategy::warp);
  CHECK_NOTHROW(check_spec_fits(warp, wide)); // loops over its outputs: any count fits
}
