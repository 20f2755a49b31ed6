// The CPU reference is the oracle of every GPU test, so its semantics are pinned here on exact values.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "jitbmm/reference.hpp"
#include "support.hpp"

using namespace jitbmm;

namespace {

const double kInf = std::numeric_limits<double>::infinity();

// One output of a 1×K by K×1 product in f64.
reference::Element dot(Semiring s, std::vector<double> a, std::vector<double> b) {
  Problem p;
  p.semiring = s;
  p.dtype = DType::f64;
  p.shape = {1, 1, static_cast<int64_t>(a.size()), 1};
  return reference::element(p, a.data(), b.data(), 0, 0, 0);
}

const Semiring kAll[] = {Semiring::log, Semiring::max_plus, Semiring::min_plus, Semiring::max_times,
                         Semiring::plus_times};

} // namespace

TEST_CASE("log semiring: values and the edge-case contract") {
  CHECK(dot(Semiring::log, {0, std::log(3.0)}, {0, 0}).value == doctest::Approx(std::log(4.0)));
  CHECK(dot(Semiring::log, {1000, 1000}, {0, 0}).value == doctest::Approx(1000 + std::log(2.0)));
  CHECK(dot(Semiring::log, {-kInf, -kInf}, {1, 2}).value == -kInf); // all −inf → −inf, not NaN
  CHECK(dot(Semiring::log, {-kInf, 0.5}, {3, -kInf}).value == -kInf);
  CHECK(dot(Semiring::log, {kInf, 0}, {1, 2}).value == kInf);         // +inf wins
  CHECK(std::isnan(dot(Semiring::log, {kInf, 0}, {-kInf, 2}).value)); // (+inf) + (−inf) → NaN
  CHECK(std::isnan(dot(Semiring::log, {NAN, 0}, {0, 0}).value));      // NaN propagates
  CHECK(std::isnan(dot(Semiring::log, {-kInf, NAN}, {0, 0}).value));
  CHECK(dot(Semiring::log, {1e300, -1e300}, {1e300, 1e300}).value == doctest::Approx(2e300));
  CHECK(dot(Semiring::log, {}, {}).value == -kInf); // K = 0 → zero
}

TEST_CASE("selecting semirings: ties keep the smallest k, the first NaN wins, K = 0 gives zero and -1") {
  auto e = dot(Semiring::max_plus, {1, 3, 3, 0}, {0, 0, 0, 3});
  CHECK(e.value == 3);
  CHECK(e.argmax == 1);
  CHECK(e.tie);
  e = dot(Semiring::max_plus, {1, NAN, 5, NAN}, {0, 0, 0, 0});
  CHECK(std::isnan(e.value));
  CHECK(e.argmax == 1);
  e = dot(Semiring::max_plus, {-kInf, -kInf}, {0, 0});
  CHECK(e.value == -kInf);
  CHECK(e.argmax == 0);
  { // an infinite term is no tie with a finite winner (f32's ties are read within its rounding of the terms)
    Problem f;
    f.semiring = Semiring::max_plus, f.dtype = DType::f32, f.shape = {1, 1, 2, 1};
    const float fa[] = {5, -INFINITY}, fb[] = {0, 0};
    const reference::Element g = reference::element(f, fa, fb, 0, 0, 0);
    CHECK(g.argmax == 0);
    CHECK_FALSE(g.tie);
  }
  e = dot(Semiring::min_plus, {4, 2, 7}, {0, 1, -5});
  CHECK(e.value == 2);
  CHECK(e.argmax == 2);
  CHECK_FALSE(e.tie);
  e = dot(Semiring::max_times, {0.5, 2, 3}, {4, 1, 0.5});
  CHECK(e.value == 2);
  CHECK(e.argmax == 0);
  CHECK(e.tie);
  for (Semiring s : {Semiring::max_plus, Semiring::min_plus, Semiring::max_times}) CHECK(dot(s, {}, {}).argmax == -1);
  CHECK(dot(Semiring::max_plus, {}, {}).value == -kInf);
  CHECK(dot(Semiring::min_plus, {}, {}).value == kInf);
  CHECK(dot(Semiring::max_times, {}, {}).value == 0);
  CHECK(dot(Semiring::plus_times, {}, {}).value == 0);
  CHECK(dot(Semiring::plus_times, {1, 2, 3}, {4, 5, 6}).value == 32);
  CHECK(std::isnan(dot(Semiring::max_times, {0}, {kInf}).value)); // 0 · inf is NaN, and NaN propagates
}

TEST_CASE("the argmax a kernel must report: the reference's, and the smallest k where terms tie in its accumulator") {
  Problem p;
  p.semiring = Semiring::max_plus;
  p.with_argmax = true;
  p.shape = {1, 1, 4, 1};
  const float b[] = {0, 0, 0, 5};
  const float a[] = {0, 1, 1, -INFINITY}; // terms 0, 1, 1, −inf: the smallest k of the two
  const float none[] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY}; // all −inf: all tie, k = 0
  const float nan_a[] = {0, NAN, 1, NAN};                              // the first NaN
  const std::pair<const float*, int32_t> cases[] = {{a, 1}, {none, 0}, {nan_a, 1}};
  for (const auto& [x, k] : cases) {
    const auto e = reference::element(p, x, b, 0, 0, 0);
    CHECK(e.argmax == k);
    CHECK(reference::kernel_argmax(p, x, b, 0, 0, 0, e) == k);
  }
  // Exact terms 1 + 2^-30 and 1 differ, but not in the f32 accumulator: the kernel sees a tie, so k = 0 wins.
  const float near_a[] = {1, 1, -INFINITY, -INFINITY};
  p.dtype = DType::f64;
  const double da[] = {1, 1 + std::ldexp(1.0, -30), 0, 0}, db[] = {0, 0, -kInf, -kInf};
  CHECK(reference::element(p, da, db, 0, 0, 0).argmax == 1); // f64 resolves it
  p.dtype = DType::f32;
  const float fb[] = {std::ldexp(1.0f, -30), 0, 0, 0}; // terms 1 + 2^-30 (exact in double) and 1
  const auto e = reference::element(p, near_a, fb, 0, 0, 0);
  CHECK(e.argmax == 0);
  CHECK(e.tie);
  CHECK(reference::kernel_argmax(p, near_a, fb, 0, 0, 0, e) == 0);
  const float fb2[] = {0, std::ldexp(1.0f, -30), 0, 0}; // now k = 1 is larger exactly, equal in f32
  const auto e2 = reference::element(p, near_a, fb2, 0, 0, 0);
  CHECK(e2.argmax == 1);
  CHECK(e2.tie);
  CHECK(reference::kernel_argmax(p, near_a, fb2, 0, 0, 0, e2) == 0); // the f32 kernel sees equal terms
  p.shape.K = 0;
  CHECK(reference::element(p, a, b, 0, 0, 0).argmax == -1);
  CHECK(reference::kernel_argmax(p, a, b, 0, 0, 0, reference::element(p, a, b, 0, 0, 0)) == -1);
}

TEST_CASE("semiring laws on exact values: identities, absorbing zero, commutative and associative ⊕") {
  struct Law {
    Semiring s;
    double zero, one;
  };
  const Law laws[] = {{Semiring::log, -kInf, 0},
                      {Semiring::max_plus, -kInf, 0},
                      {Semiring::min_plus, kInf, 0},
                      {Semiring::max_times, 0, 1},
                      {Semiring::plus_times, 0, 1}};
  for (const Law& l : laws) {
    CAPTURE(semiring_info(l.s).name);
    for (double x : {0.25, 2.0, 7.5}) {
      CHECK(dot(l.s, {l.one}, {x}).value == x);                // one ⊗ x = x
      CHECK(dot(l.s, {x}, {l.one}).value == x);                // x ⊗ one = x
      CHECK(dot(l.s, {x, l.zero}, {l.one, l.one}).value == x); // x ⊕ zero = x
      CHECK(dot(l.s, {l.zero}, {x}).value == l.zero);          // zero ⊗ x = zero
    }
    const double u = 1.5, v = 3.25, w = 0.5;
    const double uv = dot(l.s, {u, v}, {l.one, l.one}).value, vu = dot(l.s, {v, u}, {l.one, l.one}).value;
    CHECK(uv == doctest::Approx(vu)); // commutative ⊕
    const double left = dot(l.s, {uv, w}, {l.one, l.one}).value;
    const double vw = dot(l.s, {v, w}, {l.one, l.one}).value;
    const double right = dot(l.s, {u, vw}, {l.one, l.one}).value;
    CHECK(left == doctest::Approx(right)); // associative ⊕
    CHECK(dot(l.s, {u, v, w}, {l.one, l.one, l.one}).value == doctest::Approx(left));
    // The values themselves: the selecting semirings pick one exact input, the others are closed forms.
    double want = 0;
    switch (l.s) {
    case Semiring::log:
      want = std::log(std::exp(u) + std::exp(v) + std::exp(w));
      break;
    case Semiring::max_plus:
    case Semiring::max_times:
      want = v;
      break;
    case Semiring::min_plus:
      want = w;
      break;
    case Semiring::plus_times:
      want = u + v + w;
      break;
    }
    if (l.s == Semiring::log)
      CHECK(left == doctest::Approx(want).epsilon(1e-15));
    else
      CHECK(left == want); // exact: a selection, or a sum of dyadic numbers
    if (l.s != Semiring::log && l.s != Semiring::plus_times) CHECK(uv == vu);
  }
}

TEST_CASE("strides: transposed and broadcast operands give the same outputs as contiguous copies") {
  std::mt19937_64 rng(11);
  const Shape s{3, 4, 5, 6};
  for (Semiring sr : kAll) {
    CAPTURE(semiring_info(sr).name);
    Problem dense;
    dense.semiring = sr;
    dense.dtype = DType::f64;
    dense.shape = s;
    auto a = test::random_tensor(DType::f64, s.B * s.M * s.K, rng, {});
    auto b = test::random_tensor(DType::f64, s.K * s.N, rng, {}); // one matrix, broadcast below
    std::vector<double> b_full(s.B * s.K * s.N), a_t(s.B * s.M * s.K);
    for (int64_t bt = 0; bt < s.B; ++bt)
      for (int64_t k = 0; k < s.K; ++k) {
        for (int64_t j = 0; j < s.N; ++j) b_full[(bt * s.K + k) * s.N + j] = b.at(k * s.N + j);
        for (int64_t i = 0; i < s.M; ++i) a_t[bt * s.M * s.K + k * s.M + i] = a.at((bt * s.M + i) * s.K + k);
      }
    Problem strided = dense;
    strided.a_strides = Strides{s.M * s.K, 1, s.M}; // column-major view of a
    strided.b_strides = Strides{0, s.N, 1};         // broadcast b
    const auto want = reference::compute(dense, a.data(), b_full.data());
    const auto got = reference::compute(strided, a_t.data(), b.data());
    REQUIRE(want.size() == got.size());
    for (std::size_t i = 0; i < want.size(); ++i) CHECK(got[i].value == want[i].value);
  }
}

TEST_CASE("huge finite inputs never become NaN in the reference: exact values and argmax") {
  // Terms 2e300, 0 and −1e300 + 3 (= −1e300 in double): no term overflows long double, none is NaN.
  const std::vector<double> a = {1e300, -1e300, 3}, b = {1e300, 1e300, -1e300};
  const auto lse = dot(Semiring::log, a, b), max = dot(Semiring::max_plus, a, b), min = dot(Semiring::min_plus, a, b);
  CHECK(lse.value == 2e300); // 2e300 + log(1 + e^-2e300 + ...) = 2e300 exactly
  CHECK(lse.argmax == -1);
  CHECK(max.value == 2e300);
  CHECK(max.argmax == 0);
  CHECK_FALSE(max.tie);
  CHECK(min.value == -1e300);
  CHECK(min.argmax == 2);
  CHECK_FALSE(min.tie);
  // max_times of huge non-negative inputs: 1e300 · 1e300 overflows double but not the long double reference.
  const auto prod = dot(Semiring::max_times, {1e300, 2}, {1e300, 3});
  CHECK(prod.value == kInf); // 1e600 rounded to double
  CHECK(prod.argmax == 0);
  // f32 inputs: terms beyond f32's range are computed in double, exactly, and round to ±inf only as f32 outputs.
  Problem p;
  p.semiring = Semiring::max_plus;
  p.dtype = DType::f32;
  p.shape = {1, 1, 2, 1};
  const float fa[] = {3e38f, -3e38f}, fb[] = {3e38f, 1.0f};
  const auto e = reference::element(p, fa, fb, 0, 0, 0);
  CHECK(e.value == static_cast<double>(3e38f) * 2);
  CHECK(e.argmax == 0);
  CHECK(round_to(DType::f32, e.value) == kInf);
  p.semiring = Semiring::min_plus;
  const auto m = reference::element(p, fa, fb, 0, 0, 0);
  CHECK(m.value == static_cast<double>(-3e38f)); // −3e38 + 1 rounds to −3e38 in double
  CHECK(m.argmax == 1);
  CHECK(round_to(DType::f32, m.value) == static_cast<double>(-3e38f));
}

TEST_CASE("host dtype conversion rounds to nearest even like the device") {
  CHECK(round_to(DType::f16, 1.0) == 1.0);
  CHECK(round_to(DType::f16, 65504.0) == 65504.0);
  CHECK(round_to(DType::f16, 65520.0) == kInf);
  CHECK(round_to(DType::f16, 1.0 + std::ldexp(1.0, -11)) == 1.0); // tie → even
  CHECK(round_to(DType::f16, 1.0 + 3 * std::ldexp(1.0, -11)) == 1.0 + std::ldexp(1.0, -9));
  CHECK(round_to(DType::f16, std::ldexp(1.0, -24)) == std::ldexp(1.0, -24)); // smallest subnormal
  CHECK(round_to(DType::f16, -kInf) == -kInf);
  CHECK(std::isnan(round_to(DType::f16, NAN)));
  CHECK(round_to(DType::bf16, 1.0 + std::ldexp(1.0, -8)) == 1.0); // tie → even
  CHECK(round_to(DType::bf16, 3.0) == 3.0);
  CHECK(std::isnan(round_to(DType::bf16, NAN)));
  CHECK(round_to(DType::f32, 1e39) == kInf);
}

TEST_CASE("close(): special values must match exactly, finite values within tolerance") {
  reference::Element e;
  e.value = 1.0;
  CHECK(reference::close(DType::f32, 1.000001, e, 1e-5));
  CHECK_FALSE(reference::close(DType::f32, 1.001, e, 1e-5));
  CHECK_FALSE(reference::close(DType::f32, NAN, e, 1e-5));
  e.value = -kInf;
  CHECK(reference::close(DType::f32, -kInf, e, 1e-5));
  CHECK_FALSE(reference::close(DType::f32, NAN, e, 1e-5));
  e.value = NAN;
  CHECK(reference::close(DType::f32, NAN, e, 1e-5));
  CHECK_FALSE(reference::close(DType::f32, 0.0, e, 1e-5));
  e.value = 2e38 * 2; // rounds to inf in f32
  CHECK(reference::close(DType::f32, kInf, e, 1e-5));
}
