// What the chain tests share: host vectors to device buffers and back, the comparison with the reference, and what
// a best path must be.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "jitbmm/reference.hpp"
#include "runtime/device_memory.hpp"

namespace jitbmm::test {

template <class V> DeviceBuffer upload(const std::vector<V>& host) {
  DeviceBuffer d(std::max<std::size_t>(1, host.size() * sizeof(V)));
  if (!host.empty()) d.upload(host.data(), host.size() * sizeof(V));
  return d;
}

inline std::vector<double> download_as_double(const DeviceBuffer& d, DType dtype, int64_t n) {
  std::vector<unsigned char> bytes(std::size_t(n) * dtype_info(dtype).size_bytes);
  if (n) d.download(bytes.data(), bytes.size());
  std::vector<double> out(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) out[std::size_t(i)] = load_element(dtype, bytes.data(), i);
  return out;
}

// |gpu − ref| within tol·max(1, |ref|), with equal infinities and NaN where the reference has NaN.
inline bool close(double gpu, double ref, double tol) {
  if (std::isnan(ref) || std::isnan(gpu)) return std::isnan(ref) && std::isnan(gpu);
  if (std::isinf(ref) || std::isinf(gpu)) return gpu == ref;
  return std::fabs(gpu - ref) <= tol * std::max(1.0, std::fabs(ref));
}

// The largest error of each output over a suite's cases, for its closing message.
struct Worst {
  double score = 0, alpha = 0, grad = 0;
};

// Each got[i] against ref[i] (close(), tol) as name[i]: the first misses of a case (counted in bad) reported; the
// largest error where the reference is finite, relative to max(1, |ref|), kept in worst (when given).
inline void compare(const std::string& name, const std::vector<double>& got, const std::vector<double>& ref,
                    double tol, int& bad, double* worst = nullptr) {
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (!close(got[i], ref[i], tol) && bad++ < 5)
      FAIL_CHECK(name << "[" << i << "] = " << got[i] << ", reference " << ref[i]);
    if (worst && std::isfinite(ref[i]))
      *worst = std::max(*worst, std::fabs(got[i] - ref[i]) / std::max(1.0, std::fabs(ref[i])));
  }
}

// A best path of a sequence of L of T positions over C states: a state in [0, C) at each of its first L positions,
// −1 at the rest.
inline bool valid_path(const int32_t* path, int64_t L, int64_t T, int64_t C) {
  for (int64_t t = 0; t < T; ++t)
    if (t < L ? path[t] < 0 || path[t] >= C : path[t] != -1) return false;
  return true;
}

} // namespace jitbmm::test
