// The reference of the k-max semiring's product, the oracle of its kernel: a chain's products of k-vectors give its k
// best scores (reference::chain_kbest, itself checked against every path); ties keep the order of (kk, r1, r2); NaN
// first; fewer candidates than k give −inf and −1.
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

std::vector<double> product(int k, int64_t M, int64_t K, int64_t N, const std::vector<double>& a,
                            const std::vector<double>& b, std::vector<int32_t>* index = nullptr) {
  std::vector<double> out(std::size_t(k * M * N));
  if (index) index->assign(out.size(), 0);
  reference::kmax_product({DType::f64, k, 1, M, K, N}, a.data(), b.data(), out.data(), index ? index->data() : nullptr);
  return out;
}

} // namespace

TEST_CASE("kmax product: a chain's products of k-vectors give its k best scores") {
  std::mt19937_64 rng(3);
  int checked = 0;
  for (int k : {1, 3, 8})
    for (int64_t C : {1, 2, 4})
      for (int64_t T : {1, 3, 5})
        for (bool integers : {false, true}) {
          ChainProblem p;
          p.semiring = Semiring::max_plus;
          p.dtype = DType::f64;
          p.B = 1, p.T = T, p.C = C;
          const std::vector<double> pot = random_potentials(rng, p, 0.2, integers);
          std::vector<double> want(static_cast<std::size_t>(k));
          reference::chain_kbest(p, pot.data(), nullptr, k, want.data(), nullptr);
          // α [k][1][1][C]: rank 0 of every state 0, the rest none; a step's b [k][1][C][C], rank 0 the potential
          // b[from][to]; the last sum against a column of rank-0 zeros.
          std::vector<double> alpha(std::size_t(k * C), -kInf);
          for (int64_t c = 0; c < C; ++c) alpha[std::size_t(c)] = 0;
          for (int64_t t = 0; t + 1 < T; ++t) {
            std::vector<double> step(std::size_t(k * C * C), -kInf);
            for (int64_t to = 0; to < C; ++to)
              for (int64_t from = 0; from < C; ++from)
                step[std::size_t(from * C + to)] = pot[std::size_t((t * C + to) * C + from)];
            alpha = product(k, 1, C, C, alpha, step);
          }
          std::vector<double> ones(std::size_t(k * C), -kInf);
          for (int64_t c = 0; c < C; ++c) ones[std::size_t(c)] = 0;
          const std::vector<double> total = product(k, 1, C, 1, alpha, ones);
          CAPTURE(k);
          CAPTURE(C);
          CAPTURE(T);
          // Each product rounds its vectors to double, where chain_kbest sums a path in long double.
          for (int r = 0; r < k; ++r) CHECK(close(total[std::size_t(r)], want[std::size_t(r)], 1e-13));
          ++checked;
        }
  CHECK(checked == 54);
}

TEST_CASE("kmax product: ties in the order of (kk, r1, r2), NaN first, -inf and -1 past the candidates") {
  // k = 2, K = 2: a = [[1, 1], [0, -inf]] (rank 0 then rank 1 of each kk), b = [[1, 1], [-inf, -inf]].
  const std::vector<double> a = {1, 1, 0, -kInf}, b = {1, 1, -kInf, -kInf};
  std::vector<int32_t> index;
  std::vector<double> out = product(2, 1, 2, 1, a, b, &index);
  CHECK(out == std::vector<double>{2, 2});
  CHECK(index == std::vector<int32_t>{0, 4}); // (kk 0, r1 0, r2 0), then (kk 1, r1 0, r2 0)
  // A NaN at kk 1, rank 0 of a: both its sums are NaN (with b's 1 and its −inf), and come before the 2.
  out = product(2, 1, 2, 1, {1, NAN, 0, 0}, b, &index);
  CHECK((std::isnan(out[0]) && std::isnan(out[1])));
  CHECK(index == std::vector<int32_t>{4, 5});
  out = product(3, 1, 1, 1, {0, -kInf, -kInf}, {0, -kInf, -kInf}, &index);
  CHECK(out == std::vector<double>{0, -kInf, -kInf});
  CHECK(index == std::vector<int32_t>{0, -1, -1});
  CHECK_THROWS_WITH_AS(reference::kmax_product({DType::f64, 17, 1, 1, 1, 1}, a.data(), b.data(), out.data(), nullptr),
                       doctest::Contains("k:"), std::invalid_argument);
  // K = 0 leaves no candidate to bound the work: the outputs bound it (2^44 here).
  CHECK_THROWS_WITH_AS(
      reference::kmax_product({DType::f64, 4, 1 << 14, 1 << 14, 0, 1 << 14}, nullptr, nullptr, out.data(), nullptr),
      doctest::Contains("shape:"), std::invalid_argument);
}
