// The k-max semiring's product on the GPU (KMaxProduct) against the CPU reference (reference::kmax_product): values
// and indices exactly (integer entries tie everywhere, so the order of equal values is checked), −inf entries and
// torch-struct's −1e5 zeros, NaN, odd shapes, f32 and f64, k from 1 to 16; outputs poisoned first.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "chain_arrays.hpp"
#include "jitbmm/kmax_product.hpp"
#include "jitbmm/reference.hpp"
#include "runtime/device_memory.hpp"

using namespace jitbmm;
using namespace jitbmm::test;

TEST_CASE("kmax product: the reference's values and indices at odd shapes, ties, masks and NaN") {
  std::mt19937_64 rng(20261203);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  const struct {
    int64_t B, M, K, N;
  } shapes[] = {{1, 1, 1, 1}, {3, 5, 7, 9}, {2, 17, 3, 33}, {1, 20, 0, 4}};
  int cases = 0, bad = 0;
  for (const auto& s : shapes)
    for (DType dtype : {DType::f32, DType::f64})
      for (int k : {1, 4, 16})
        for (int variant = 0; variant < 3; ++variant) { // normal (in 1/8ths), integers, with −inf, −1e5 and NaN
          CAPTURE(dtype_info(dtype).name);
          CAPTURE(k);
          CAPTURE(variant);
          auto entries = [&](int64_t n) {
            std::vector<double> v(std::size_t(k * n));
            for (double& x : v) {
              const double r = u(rng);
              x = variant == 1 ? std::floor(3 * r) : std::round((8 * r - 4) * 8) / 8; // sums exact in f32
              if (variant == 2 && r < 0.15) x = r < 0.05 ? -INFINITY : r < 0.1 ? -1e5 : (r < 0.11 ? NAN : x);
            }
            return v;
          };
          const std::vector<double> a = entries(s.B * s.M * s.K), b = entries(s.B * s.K * s.N);
          const int bytes = dtype_info(dtype).size_bytes;
          std::vector<unsigned char> ha(a.size() * bytes + 1), hb(b.size() * bytes + 1);
          for (std::size_t i = 0; i < a.size(); ++i) store_element(dtype, ha.data(), int64_t(i), a[i]);
          for (std::size_t i = 0; i < b.size(); ++i) store_element(dtype, hb.data(), int64_t(i), b[i]);
          const std::size_t outputs = std::size_t(k * s.B * s.M * s.N);
          std::vector<double> want(outputs);
          std::vector<int32_t> want_index(outputs);
          reference::kmax_product({dtype, k, s.B, s.M, s.K, s.N}, ha.data(), hb.data(), want.data(),
                                  want_index.data());
          DeviceBuffer d_a(ha.size()), d_b(hb.size()), d_out(outputs * bytes + 1), d_index(outputs * 4 + 1);
          d_a.upload(ha.data(), ha.size());
          d_b.upload(hb.data(), hb.size());
          d_out.fill_bytes(0x7f);
          d_index.fill_bytes(0x7f);
          const KMaxProduct product = KMaxProduct::get(dtype, k, s.B, s.M, s.K, s.N);
          product(d_a.get(), d_b.get(), d_out.get(), static_cast<int32_t*>(d_index.get()));
          std::vector<int32_t> index(outputs);
          if (outputs) d_index.download(index.data(), outputs * 4);
          compare(std::string(dtype_info(dtype).name) + " out", download_as_double(d_out, dtype, int64_t(outputs)),
                  want, 0.0, bad);
          for (std::size_t i = 0; i < outputs; ++i)
            if (index[i] != want_index[i] && bad++ < 5)
              FAIL_CHECK("index[" << i << "] = " << index[i] << ", reference " << want_index[i]);
          ++cases;
        }
  MESSAGE(cases << " cases against the reference");
  CHECK(bad == 0);
}
