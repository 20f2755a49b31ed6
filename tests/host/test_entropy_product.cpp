// The reference of the expectation (entropy) semiring's product, the oracle of its kernels: a chain's products of
// pairs give the chain's entropy (reference::chain_entropy, itself checked against every path), the gradients agree
// with central differences, and the edges (no term, −inf terms, NaN) are as documented.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "host/chain_paths.hpp"
#include "jitbmm/reference.hpp"

using namespace jitbmm;
using namespace jitbmm::test;

namespace {

// out = a ⊗ b for pairs held as double (f64), a [2][1][M][K], b [2][1][K][N].
std::vector<double> product(int64_t M, int64_t K, int64_t N, const std::vector<double>& a,
                            const std::vector<double>& b) {
  std::vector<double> out(std::size_t(2 * M * N));
  reference::entropy_product({DType::f64, 1, M, K, N}, a.data(), b.data(), out.data());
  return out;
}

} // namespace

TEST_CASE("entropy product: a chain's products of pairs give its entropy") {
  std::mt19937_64 rng(12);
  int checked = 0;
  for (int64_t C : {1, 2, 4})
    for (int64_t T : {1, 2, 5})
      for (double mask : {0.0, 0.3}) {
        ChainProblem p;
        p.semiring = Semiring::log;
        p.dtype = DType::f64;
        p.B = 1, p.T = T, p.C = C;
        const std::vector<double> pot = random_potentials(rng, p, mask, false);
        double want = 0;
        reference::chain_entropy(p, pot.data(), nullptr, &want);
        // α [2][1][1][C]: every state with log weight 0 and entropy 0; a step's b [2][1][C][C], b0[from][to] the
        // potential and b1 = 0 (the semiring's conversion); the last sum over the states against a column of ones.
        std::vector<double> alpha(std::size_t(2 * C), 0.0);
        for (int64_t t = 0; t + 1 < T; ++t) {
          std::vector<double> step(std::size_t(2 * C * C), 0.0);
          for (int64_t to = 0; to < C; ++to)
            for (int64_t from = 0; from < C; ++from)
              step[std::size_t(from * C + to)] = pot[std::size_t((t * C + to) * C + from)];
          alpha = product(1, C, C, alpha, step);
        }
        const std::vector<double> total = product(1, C, 1, alpha, std::vector<double>(std::size_t(2 * C), 0.0));
        CAPTURE(C);
        CAPTURE(T);
        CAPTURE(mask);
        if (std::isinf(total[0])) { // no path: no distribution
          CHECK(total[0] == -kInf);
          continue;
        }
        CHECK(std::abs(total[1] - want) <= 1e-12 * std::max(1.0, std::abs(want)));
        ++checked;
      }
  CHECK(checked >= 12);
}

TEST_CASE("entropy product: gradients agree with central differences") {
  std::mt19937_64 rng(5);
  std::normal_distribution<double> normal(0.0, 1.0);
  const int64_t B = 2, M = 3, K = 4, N = 2;
  std::vector<double> a(std::size_t(2 * B * M * K)), b(std::size_t(2 * B * K * N)), g(std::size_t(2 * B * M * N));
  for (auto* v : {&a, &b, &g})
    for (double& x : *v) x = normal(rng);
  a[5] = -kInf; // a term of weight 0: no gradient through it
  const reference::EntropyProductShape shape{DType::f64, B, M, K, N};
  std::vector<double> ga(a.size()), gb(b.size());
  reference::entropy_product_backward(shape, a.data(), b.data(), g.data(), ga.data(), gb.data());
  auto loss = [&](const std::vector<double>& x, const std::vector<double>& y) {
    std::vector<double> out(g.size());
    reference::entropy_product(shape, x.data(), y.data(), out.data());
    double s = 0;
    for (std::size_t i = 0; i < out.size(); ++i) s += g[i] * out[i];
    return s;
  };
  const double h = 1e-6;
  for (int side = 0; side < 2; ++side) {
    std::vector<double>& x = side ? b : a;
    const std::vector<double>& grad = side ? gb : ga;
    for (std::size_t i = 0; i < x.size(); ++i) {
      CAPTURE(side);
      CAPTURE(i);
      if (std::isinf(x[i])) {
        CHECK(grad[i] == 0);
        continue;
      }
      const double keep = x[i];
      x[i] = keep + h;
      const double up = loss(a, b);
      x[i] = keep - h;
      const double down = loss(a, b);
      x[i] = keep;
      CHECK(std::abs(grad[i] - (up - down) / (2 * h)) <= 1e-6);
    }
  }
}

TEST_CASE("entropy product: no term, -inf and NaN terms; the dtype and null inputs are named") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  // K = 2: one term -inf (weight 0, its x1 NaN ignored) and one of weight 1, then all -inf, then a NaN.
  std::vector<double> a = {0.0, -kInf, 0.0, nan}, b = {1.0, 2.0, 3.0, 4.0};
  std::vector<double> out = product(1, 2, 1, a, b);
  CHECK(out[0] == 1.0);
  CHECK(out[1] == 3.0); // x1 of the one term, log p = 0
  a = {-kInf, -kInf, 0.0, 0.0};
  out = product(1, 2, 1, a, b);
  CHECK(out[0] == -kInf);
  CHECK(out[1] == 0.0);
  a = {nan, 0.0, 0.0, 0.0};
  out = product(1, 2, 1, a, b);
  CHECK(std::isnan(out[0]));
  CHECK(std::isnan(out[1]));
  // Two equal terms: log 2 and the mean of x1 plus log 2.
  a = {0.0, 0.0, 0.0, 0.0};
  b = {0.0, 0.0, 1.0, 3.0};
  out = product(1, 2, 1, a, b);
  CHECK(out[0] == doctest::Approx(std::log(2.0)));
  CHECK(out[1] == doctest::Approx(2.0 + std::log(2.0)));
  CHECK_THROWS_WITH_AS(reference::entropy_product({DType::f16, 1, 1, 1, 1}, a.data(), b.data(), out.data()),
                       doctest::Contains("dtype"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(reference::entropy_product({DType::f64, 1, 1, 1, 1}, nullptr, b.data(), out.data()),
                       doctest::Contains("a: null"), std::invalid_argument);
  // K = 0 leaves no term to bound the work: the outputs bound it (here 2^42 of them), before anything is allocated.
  CHECK_THROWS_WITH_AS(reference::entropy_product({DType::f64, 1 << 14, 1 << 14, 0, 1 << 14}, nullptr, nullptr,
                                                  out.data()),
                       doctest::Contains("shape:"), std::invalid_argument);
}
