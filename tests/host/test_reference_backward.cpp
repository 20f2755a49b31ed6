// The reference gradients (the oracle for the fused backward kernels): finite differences in f64, argmax routing,
// and the edge cases: all −inf rows, G = 0, broadcast operands, ties, special values.
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <vector>

#include "jitbmm/reference.hpp"
#include "support.hpp"

using namespace jitbmm;

namespace {

// L = Σ G ⊙ out, from the reference forward.
double loss(const Problem& p, const std::vector<double>& a, const std::vector<double>& b,
            const std::vector<double>& g) {
  const auto out = reference::compute(p, a.data(), b.data());
  double l = 0;
  for (std::size_t i = 0; i < out.size(); ++i) l += g[i] * out[i].value;
  return l;
}

std::vector<double> randn(std::size_t n, std::mt19937_64& rng, double spread = 1.0) {
  std::normal_distribution<double> d(0.0, spread);
  std::vector<double> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

} // namespace

TEST_CASE("reference gradients agree with central finite differences in f64") {
  std::mt19937_64 rng(61);
  for (Semiring s :
       {Semiring::log, Semiring::plus_times, Semiring::max_plus, Semiring::min_plus, Semiring::max_times}) {
    CAPTURE(semiring_info(s).name);
    Problem p;
    p.semiring = s;
    p.dtype = DType::f64;
    p.shape = {2, 3, 5, 4};
    std::vector<double> a = randn(2 * 3 * 5, rng), b = randn(2 * 5 * 4, rng), g = randn(2 * 3 * 4, rng);
    if (s == Semiring::max_times)
      for (auto* v : {&a, &b})
        for (double& x : *v) x = std::fabs(x) + 0.1;
    std::vector<double> ga(a.size()), gb(b.size());
    reference::backward(p, a.data(), b.data(), g.data(), ga.data(), gb.data());
    const double h = 1e-6;
    for (auto [x, grad] : {std::pair{&a, &ga}, std::pair{&b, &gb}})
      for (std::size_t i = 0; i < x->size(); ++i) {
        const double keep = (*x)[i];
        (*x)[i] = keep + h;
        const double up = loss(p, a, b, g);
        (*x)[i] = keep - h;
        const double down = loss(p, a, b, g);
        (*x)[i] = keep;
        CHECK((*grad)[i] == doctest::Approx((up - down) / (2 * h)).epsilon(1e-5).scale(1.0));
      }
  }
}

TEST_CASE("reference gradients: all -inf rows give zero, G = 0 gives exactly 0, broadcast operands accumulate") {
  Problem p;
  p.dtype = DType::f64;
  p.shape = {1, 2, 3, 2};
  std::vector<double> a = {-INFINITY, -INFINITY, -INFINITY, 0.5, NAN, 1.0}; // row 0 all -inf; row 1 holds a NaN
  std::vector<double> b = {0.1, 0.2, 0.3, 0.4, 0.5, 0.6};
  std::vector<double> g = {1.0, 2.0, 0.0, 0.0}; // row 1's gradient is zero: its NaN must not leak
  std::vector<double> ga(6, 7.0), gb(6, 7.0);
  reference::backward(p, a.data(), b.data(), g.data(), ga.data(), gb.data());
  for (double x : ga) CHECK(x == 0.0);
  for (double x : gb) CHECK(x == 0.0);

  // One a broadcast over 3 batches: its gradient is the sum of the batches' gradients.
  Problem bc;
  bc.dtype = DType::f64;
  bc.semiring = Semiring::plus_times;
  bc.shape = {3, 2, 2, 2};
  bc.a_strides = Strides{0, 2, 1};
  std::vector<double> a1 = {1, 2, 3, 4}, b3(3 * 4), g3(3 * 4, 1.0), ga1(4);
  for (std::size_t i = 0; i < b3.size(); ++i) b3[i] = double(i);
  reference::backward(bc, a1.data(), b3.data(), g3.data(), ga1.data(), nullptr);
  // dA[i,k] = Σ_batches Σ_j b[batch,k,j]
  for (int i = 0; i < 2; ++i)
    for (int k = 0; k < 2; ++k) {
      double want = 0;
      for (int t = 0; t < 3; ++t) want += b3[t * 4 + k * 2] + b3[t * 4 + k * 2 + 1];
      CHECK(ga1[i * 2 + k] == want);
    }
}

TEST_CASE("reference gradients of max_plus go to the argmax, ties to the smallest k") {
  Problem p;
  p.semiring = Semiring::max_plus;
  p.dtype = DType::f64;
  p.shape = {1, 1, 3, 1};
  const std::vector<double> a = {1, 3, 3}, b = {0, 0, 0}, g = {2.5};
  std::vector<double> ga(3), gb(3);
  reference::backward(p, a.data(), b.data(), g.data(), ga.data(), gb.data());
  CHECK(ga == std::vector<double>{0, 2.5, 0});
  CHECK(gb == std::vector<double>{0, 2.5, 0});
}

TEST_CASE("gradient_element gives each element of backward(), given or computing out and argmax") {
  std::mt19937_64 rng(62);
  for (Semiring s :
       {Semiring::log, Semiring::plus_times, Semiring::max_plus, Semiring::min_plus, Semiring::max_times}) {
    CAPTURE(semiring_info(s).name);
    Problem p;
    p.semiring = s;
    p.dtype = DType::f64;
    p.shape = {2, 4, 5, 3};
    p.a_strides = column_major(4, 5);
    const std::vector<double> a = randn(40, rng), b = randn(30, rng), g = randn(24, rng);
    std::vector<double> ga(40), gb(30);
    reference::backward(p, a.data(), b.data(), g.data(), ga.data(), gb.data());
    const auto fwd = reference::compute(p, a.data(), b.data());
    std::vector<double> out(24);
    std::vector<int32_t> arg(24);
    for (int o = 0; o < 24; ++o) out[o] = fwd[o].value, arg[o] = fwd[o].argmax;
    std::vector<double> ga2(40), gb2(30);
    reference::backward(p, a.data(), b.data(), g.data(), ga2.data(), gb2.data(), out.data(), arg.data());
    for (int bt = 0; bt < 2; ++bt)
      for (int r = 0; r < 4; ++r)
        for (int c = 0; c < 5; ++c) {
          const auto e =
              reference::gradient_element(p, a.data(), b.data(), nullptr, nullptr, g.data(), Pass::grad_a, bt, r, c);
          const int64_t at = bt * 20 + r + c * 4; // column-major a
          CHECK(e.value == doctest::Approx(ga[at]).epsilon(1e-12));
          CHECK(ga2[at] == doctest::Approx(ga[at]).epsilon(1e-12));
          CHECK(e.scale >= std::fabs(e.value) * (1 - 1e-12));
        }
    for (int bt = 0; bt < 2; ++bt)
      for (int r = 0; r < 5; ++r)
        for (int c = 0; c < 3; ++c) {
          const auto e = reference::gradient_element(p, a.data(), b.data(), out.data(), arg.data(), g.data(),
                                                     Pass::grad_b, bt, r, c);
          CHECK(e.value == doctest::Approx(gb[bt * 15 + r * 3 + c]).epsilon(1e-12));
          CHECK(gb2[bt * 15 + r * 3 + c] == doctest::Approx(gb[bt * 15 + r * 3 + c]).epsilon(1e-12));
        }
  }
}

TEST_CASE("close_gradient: special values exactly, finite ones within tolerance · scale + floor") {
  reference::GradElement e;
  e.value = 2.0, e.scale = 4.0, e.floor = 1e-30;
  CHECK(reference::close_gradient(DType::f32, 2.00003, e, 1e-5));
  CHECK_FALSE(reference::close_gradient(DType::f32, 2.0001, e, 1e-5));
  CHECK_FALSE(reference::close_gradient(DType::f32, NAN, e, 1e-5));
  CHECK_FALSE(reference::close_gradient(DType::f32, INFINITY, e, 1e-5));
  e.value = NAN;
  CHECK(reference::close_gradient(DType::f32, NAN, e, 1e-5));
  CHECK_FALSE(reference::close_gradient(DType::f32, 0.0, e, 1e-5));
  e.value = 1e6; // beyond f16: the kernel's f16 result is inf
  CHECK(reference::close_gradient(DType::f16, INFINITY, e, 1e-2));
  e.value = 0, e.scale = 0, e.floor = 1e-36; // all weights underflowed in the kernel
  CHECK(reference::close_gradient(DType::f32, 0.0, e, 1e-5));
  CHECK_FALSE(reference::close_gradient(DType::f32, 1e-30, e, 1e-5));
}

TEST_CASE("a zero grad_out contributes nothing, even where the weight is NaN") {
  Problem p;
  p.semiring = Semiring::log;
  p.dtype = DType::f64;
  p.shape = {1, 1, 2, 1};
  const std::vector<double> a = {INFINITY, 0.0}, b = {INFINITY, 1.0}, g = {0.0};
  const auto e = reference::gradient_element(p, a.data(), b.data(), nullptr, nullptr, g.data(), Pass::grad_a, 0, 0, 0);
  CHECK(e.value == 0.0);
}
