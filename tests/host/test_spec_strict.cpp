// check_spec_fits is strict: every field within range before any arithmetic on it, enums that hold one of their
// values, products that cannot overflow. Each refusal names the field.
#include <doctest/doctest.h>

#include <climits>
#include <functional>
#include <random>
#include <string>
#include <vector>

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
  for (int v : {-1, 9, 99, INT_MAX}) {
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

// A problem the tiled strategies rank (its rows in 128-row tiles within the grid) gets a default whose tiles fit, the
// forward's and the backward's: smaller default tiles are made taller there, not refused.
TEST_CASE("tall problems get default tiles whose row tiles the grid holds, forward and backward") {
  for (const Semiring semiring : {Semiring::log, Semiring::max_plus, Semiring::plus_times})
    for (const DType dtype : {DType::f32, DType::f64}) {
      CAPTURE(semiring_info(semiring).name);
      CAPTURE(dtype_info(dtype).name);
      Problem p;
      p.semiring = semiring, p.dtype = dtype;
      p.shape = {1, 3000000, 64, 32}; // N < 64: the 32-row default tile, 93,750 row tiles
      const KernelSpec forward = default_spec(p);
      CHECK_NOTHROW(check_spec_fits(forward, p));
      if (semiring_info(semiring).backward != BackwardKind::argmax_scatter) {
        for (const Pass pass : {Pass::grad_a, Pass::grad_b}) { // p is its own gradients' problem (no argmax)
          const KernelSpec g = default_grad_spec(p, pass);
          CHECK_NOTHROW(check_spec_fits(g, p));
        }
      }
    }
  Problem argmax; // the argmax's second pass (tiled_refine) defaults to 64-row tiles for f32
  argmax.semiring = Semiring::max_plus, argmax.with_argmax = true;
  argmax.shape = {1, 5000000, 1024, 64};
  CHECK_NOTHROW(check_spec_fits(default_spec(argmax), argmax));
}

// exp_matmul's grad_b tiles N × K (its canonical rows are N): a tile of 16 rows over a million columns of N is more
// row tiles than a grid's y holds, refused naming shape.N (its K is small).
TEST_CASE("the exp_matmul backward checks its grad_b row tiles along N") {
  Problem p;
  p.shape = {1, 64, 64, 1100000};
  KernelSpec s = default_grad_spec(p, Pass::grad_b, Strategy::exp_matmul);
  s.tile_m = 16, s.tile_n = 64, s.tile_k = 16, s.thread_m = 2, s.thread_n = 4;
  expect_invalid([&] { check_spec_fits(s, p); }, "shape.N");
  p.shape.N = 100000; // 6,250 row tiles
  CHECK_NOTHROW(check_spec_fits(s, p));
}

// The log kernel's shared memory counts its lines' statistics: a tile within 48 KiB without them, beyond with them,
// is refused by check_spec_fits (NVRTC would refuse it later).
TEST_CASE("the tiled log kernel's shared memory counts each row's and column's statistics") {
  Problem p;
  p.shape = {1, 256, 256, 256};
  KernelSpec s = default_spec(p, Strategy::tiled);
  s.tile_m = s.tile_n = 128, s.tile_k = 22, s.thread_m = s.thread_n = 8;
  expect_invalid([&] { check_spec_fits(s, p); }, "shared memory");
  p.semiring = Semiring::max_plus; // no statistics: the same tile fits
  s.semiring = Semiring::max_plus;
  CHECK_NOTHROW(check_spec_fits(s, p));
}

TEST_CASE("== and hash_value mean what to_string prints: fields the strategy does not use do not count") {
  // Fields drawn from two values each, so many pairs differ only in fields some strategy ignores.
  std::mt19937_64 rng(16);
  const auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint64_t>(n)); };
  const auto draw = [&] {
    KernelSpec s;
    s.semiring = static_cast<Semiring>(pick(5));
    s.dtype = static_cast<DType>(pick(4));
    s.out_dtype = static_cast<DType>(pick(2));
    s.with_argmax = pick(2);
    s.strategy = static_cast<Strategy>(pick(8));
    s.pass = static_cast<Pass>(pick(3));
    s.index64 = pick(2);
    for (int* f :
         {&s.block_x, &s.block_y, &s.tile_m, &s.tile_n, &s.tile_k, &s.thread_m, &s.thread_n, &s.min_blocks, &s.k_chunk})
      *f = 1 + pick(2);
    s.math = static_cast<Math>(pick(3));
    return s;
  };
  std::vector<KernelSpec> specs;
  for (int i = 0; i < 400; ++i) {
    specs.push_back(draw());
    // A copy with every field the strategy ignores redrawn: equal to the original.
    KernelSpec twin = draw();
    KernelSpec same = specs.back();
    if (same.is_tiled())
      same.block_x = twin.block_x, same.block_y = twin.block_y;
    else
      same.tile_m = twin.tile_m, same.tile_n = twin.tile_n, same.tile_k = twin.tile_k, same.thread_m = twin.thread_m,
      same.thread_n = twin.thread_n, same.min_blocks = twin.min_blocks;
    if (same.strategy != Strategy::split_k) same.k_chunk = twin.k_chunk;
    if (same.strategy != Strategy::exp_matmul) same.math = twin.math;
    specs.push_back(same);
  }
  int equal_pairs = 0, differing_text = 0;
  for (std::size_t i = 0; i < specs.size(); ++i)
    for (std::size_t j = 0; j < specs.size(); ++j) {
      const bool same_text = to_string(specs[i]) == to_string(specs[j]);
      CAPTURE(to_string(specs[i]));
      CAPTURE(to_string(specs[j]));
      REQUIRE((specs[i] == specs[j]) == same_text);
      REQUIRE((specs[i] != specs[j]) == !same_text);
      if (same_text) {
        ++equal_pairs;
        REQUIRE(hash_value(specs[i]) == hash_value(specs[j]));
        REQUIRE(std::hash<KernelSpec>()(specs[i]) == hash_value(specs[j]));
        differing_text += specs[i].block_x != specs[j].block_x || specs[i].tile_m != specs[j].tile_m ||
                          specs[i].k_chunk != specs[j].k_chunk || specs[i].math != specs[j].math;
      }
    }
  CHECK(equal_pairs > static_cast<int>(specs.size())); // more than each spec with itself
  CHECK(differing_text > 0);                           // some equal pairs differ in an ignored field
}

TEST_CASE("the packed half kernel refuses an odd thread_n, naming the field; the f32 path takes it") {
  Problem p = sample();
  p.semiring = Semiring::max_plus;
  p.dtype = DType::bf16; // output bf16 too: packed pairs of columns (templates/tiled/packed.cuh)
  KernelSpec s = default_spec(p, Strategy::tiled);
  s.tile_m = 96, s.tile_n = 48, s.thread_m = 4, s.thread_n = 3, s.min_blocks = 1;
  expect_invalid([&] { check_spec_fits(s, p); }, "spec.thread");
  p.out_dtype = DType::f32; // f32 outputs keep the f32 path, one column a register
  s.out_dtype = DType::f32;
  CHECK_NOTHROW(check_spec_fits(s, p));
}
