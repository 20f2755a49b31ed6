// Every kernel variant against the CPU reference: odd shapes, edge values, strides and broadcast.
#include <doctest/doctest.h>

#include <cstdio>

#include "differential.hpp"
#include "feature_level.hpp"
#include "variants.hpp"

using namespace jitbmm;

namespace {

using test::problem_for;

void expect_ok(const test::CaseResult& r, const Problem& p, const KernelSpec& spec, uint64_t seed) {
  test::report_failure(r, p, spec, seed);
  CHECK(r.ok());
}

} // namespace

TEST_CASE("every linear variant matches the reference on odd shapes and edge values") {
  // The last: whole tiles of every test tile beside partial ones, rows of a and b aligned for the tiled kernels'
  // 16-byte chunks.
  const Shape shapes[] = {{1, 1, 1, 1},   {3, 17, 129, 5},   {2, 129, 3, 127}, {1, 33, 0, 7},
                          {5, 1, 257, 1}, {1, 127, 64, 129}, {2, 160, 48, 136}};
  uint64_t seed = 1000;
  int cases = 0;
  for (const KernelSpec& spec : test::runnable_here(test::all_variants()))
    for (const Shape& shape : shapes)
      for (int flavour = 0; flavour < 3; ++flavour) {
        const Problem p = problem_for(spec, shape);
        std::mt19937_64 rng(++seed);
        expect_ok(test::run_case(p, spec, rng, test::specials_for(spec.semiring, flavour)), p, spec, seed);
        ++cases;
      }
  MESSAGE(cases << " cases");
}

TEST_CASE("transposed, strided, padded and broadcast operands") {
  const Shape s{4, 19, 23, 29};
  uint64_t seed = 5000;
  for (Semiring sr : {Semiring::log, Semiring::max_plus, Semiring::min_plus, Semiring::max_times, Semiring::plus_times})
    for (DType d : {DType::f32, DType::f16}) {
      Problem p;
      p.semiring = sr;
      p.dtype = d;
      p.shape = s;
      p.with_argmax = semiring_info(sr).has_argmax;
      const Strides layouts_a[] = {column_major(s.M, s.K), {0, s.K, 1}, {s.M * s.K * 2, s.K * 2, 2}};
      const Strides layouts_b[] = {column_major(s.K, s.N), {0, 1, s.K}, {s.K * (s.N + 3), s.N + 3, 1}};
      const Strides layouts_out[] = {column_major(s.M, s.N), {1, s.N * s.B, s.B}, {s.M * (s.N + 5), s.N + 5, 1}};
      for (int v = 0; v < 3; ++v) {
        p.a_strides = layouts_a[v];
        p.b_strides = layouts_b[(v + 1) % 3];
        p.out_strides = layouts_out[(v + 2) % 3];
        const KernelSpec spec = default_spec(p);
        std::mt19937_64 rng(++seed);
        expect_ok(test::run_case(p, spec, rng, test::specials_for(sr, v)), p, spec, seed);
      }
    }
}

TEST_CASE("more than 65535 batches and more rows than one grid dimension holds") {
  Problem p;
  p.shape = {70000, 2, 3, 2};
  std::mt19937_64 rng(77);
  expect_ok(test::run_case(p, default_spec(p), rng, {}), p, default_spec(p), 77);
  p.shape = {1, 600000, 2, 1};
  p.semiring = Semiring::max_plus;
  p.with_argmax = true;
  expect_ok(test::run_case(p, default_spec(p), rng, {}), p, default_spec(p), 77);
}

TEST_CASE("block shapes other than the default") {
  Problem p;
  p.shape = {2, 37, 41, 43};
  uint64_t seed = 9000;
  for (auto [bx, by] : {std::pair{32, 1}, {64, 4}, {128, 2}, {32, 32}}) {
    KernelSpec spec = default_spec(p, Strategy::linear);
    spec.block_x = bx;
    spec.block_y = by;
    std::mt19937_64 rng(++seed);
    expect_ok(test::run_case(p, spec, rng, test::specials_for(Semiring::log, 2)), p, spec, seed);
  }
}
