// The expectation (entropy) semiring's product on the GPU (EntropyProduct) against the CPU reference
// (reference::entropy_product and its backward): odd shapes, −inf terms (and torch-struct's −1e5 zero), NaN and +inf,
// f32 and f64, values and both gradients; outputs poisoned first, so that anything unwritten shows.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "chain_arrays.hpp"
#include "jitbmm/entropy_product.hpp"
#include "jitbmm/reference.hpp"
#include "runtime/device_memory.hpp"

using namespace jitbmm;
using namespace jitbmm::test;

namespace {

// Log weights masked with −inf, and for f64 also with torch-struct's −1e5 zero (in f32, sums near −1e5 keep only
// about two decimals, as torch-struct's own product in f32 does).
std::vector<double> random_pairs(std::mt19937_64& rng, int64_t n, double mask, double special, bool zeros) {
  std::normal_distribution<double> normal(0.0, 2.0);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<double> v(std::size_t(2 * n));
  for (std::size_t i = 0; i < v.size(); ++i) {
    const double r = u(rng);
    v[i] = i < std::size_t(n) && r < mask ? (r < mask / 2 || !zeros ? -INFINITY : -1e5) : normal(rng);
    // NaN and +inf among the log weights: a value's own NaN at a term of weight too small for the type would be
    // dropped by the kernel and not by the reference in double.
    if (i < std::size_t(n) && u(rng) < special) v[i] = u(rng) < 0.5 ? NAN : INFINITY;
  }
  return v;
}

} // namespace

TEST_CASE("entropy product: the reference's values and gradients at odd shapes, masks and special values") {
  std::mt19937_64 rng(20261203);
  const struct {
    int64_t B, M, K, N;
  } shapes[] = {{1, 1, 1, 1}, {3, 5, 7, 9}, {2, 17, 33, 16}, {4, 1, 64, 64}, {1, 40, 3, 70}, {2, 16, 0, 5}};
  int bad = 0, cases = 0;
  double worst = 0;
  for (const auto& s : shapes)
    for (DType dtype : {DType::f32, DType::f64})
      for (int variant = 0; variant < 3; ++variant) { // plain, masked, with NaN and +inf
        CAPTURE(dtype_info(dtype).name);
        CAPTURE(s.M);
        CAPTURE(s.K);
        CAPTURE(s.N);
        CAPTURE(variant);
        const double mask = variant ? 0.3 : 0.0, special = variant == 2 ? 0.02 : 0.0;
        const bool zeros = dtype == DType::f64;
        const std::vector<double> a = rounded(dtype, random_pairs(rng, s.B * s.M * s.K, mask, special, zeros)),
                                  b = rounded(dtype, random_pairs(rng, s.B * s.K * s.N, mask, special, zeros)),
                                  g = rounded(dtype, random_pairs(rng, s.B * s.M * s.N, 0.0, 0.0, false));
        const reference::EntropyProductShape shape{dtype, s.B, s.M, s.K, s.N};
        std::vector<unsigned char> ha(a.size() * 8 + 1), hb(b.size() * 8 + 1);
        for (std::size_t i = 0; i < a.size(); ++i) store_element(dtype, ha.data(), int64_t(i), a[i]);
        for (std::size_t i = 0; i < b.size(); ++i) store_element(dtype, hb.data(), int64_t(i), b[i]);
        std::vector<double> want(g.size()), want_ga(a.size()), want_gb(b.size());
        reference::entropy_product(shape, ha.data(), hb.data(), want.data());
        reference::entropy_product_backward(shape, ha.data(), hb.data(), g.data(), want_ga.data(), want_gb.data());
        const EntropyProduct product = EntropyProduct::get(dtype, s.B, s.M, s.K, s.N);
        const int bytes = dtype_info(dtype).size_bytes;
        DeviceBuffer d_a = stored(dtype, a), d_b = stored(dtype, b), d_g = stored(dtype, g),
                     d_out(g.size() * bytes + 1), d_ga(a.size() * bytes + 1), d_gb(b.size() * bytes + 1);
        for (DeviceBuffer* d : {&d_out, &d_ga, &d_gb}) d->fill_bytes(0x7f);
        product(d_a.get(), d_b.get(), d_out.get());
        product.backward(d_a.get(), d_b.get(), d_out.get(), d_g.get(), d_ga.get(), d_gb.get());
        // f64: sums near torch-struct's −1e5 zeros keep about 11 digits of a value of order 1.
        const double tol = dtype == DType::f64 ? 1e-9 : 2e-5;
        // The gradients' scale: the weights' sum over an input's outputs times the largest |x1 − log p − out1|.
        const double grad_tol = tol * double(std::max(s.M, s.N)) * 10;
        const std::string name = std::string(dtype_info(dtype).name);
        compare(name + " out", download_as_double(d_out, dtype, int64_t(g.size())), want, tol, bad, &worst);
        compare(name + " grad_a", download_as_double(d_ga, dtype, int64_t(a.size())), want_ga, grad_tol, bad);
        compare(name + " grad_b", download_as_double(d_gb, dtype, int64_t(b.size())), want_gb, grad_tol, bad);
        ++cases;
      }
  MESSAGE(cases << " cases; largest relative error of the values " << worst);
  CHECK(bad == 0);
}

TEST_CASE("entropy product: empty sizes, one gradient alone, and bad arguments") {
  // K = 0: every output is (−inf, 0), every gradient of nothing; M = 0: nothing to write.
  const EntropyProduct none = EntropyProduct::get(DType::f32, 2, 3, 0, 4);
  DeviceBuffer out(2 * 2 * 3 * 4 * 4);
  out.fill_bytes(0x7f);
  none(nullptr, nullptr, out.get());
  const std::vector<double> got = download_as_double(out, DType::f32, 2 * 2 * 3 * 4);
  for (std::size_t i = 0; i < got.size(); ++i) CHECK(got[i] == (i < got.size() / 2 ? -INFINITY : 0.0));
  EntropyProduct::get(DType::f64, 2, 0, 3, 4)(nullptr, nullptr, nullptr);
  CHECK_THROWS_WITH_AS(EntropyProduct::get(DType::bf16, 1, 1, 1, 1), doctest::Contains("dtype"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(EntropyProduct::get(DType::f32, 1, -1, 1, 1), doctest::Contains("shape.M"),
                       std::invalid_argument);
  const EntropyProduct one = EntropyProduct::get(DType::f32, 1, 2, 2, 2);
  CHECK_THROWS_WITH_AS(one(nullptr, nullptr, out.get()), doctest::Contains("a"), std::invalid_argument);
}
