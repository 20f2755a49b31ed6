// What the chain tests share: host vectors to device buffers and back, the comparison with the reference, what a
// best path must be, the problems the cluster tests run and the chunks the chunked tests take.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "generator/chain_source.hpp"
#include "jitbmm/reference.hpp"
#include "runtime/chain_chunked.hpp"
#include "runtime/chain_plan.hpp"
#include "runtime/device.hpp"
#include "runtime/device_memory.hpp"
#include "needs.hpp"
#include "poison.hpp"

namespace jitbmm::test {

template <class V> DeviceBuffer upload(const std::vector<V>& host) {
  DeviceBuffer d(std::max<std::size_t>(1, host.size() * sizeof(V)));
  if (!host.empty()) d.upload(host.data(), host.size() * sizeof(V));
  return d;
}

// Where the tests put a log chain's `saved`: 16 bytes past an allocation's start, the least alignment the library
// takes (as XLA's buffers may give it), so that no piece of it relies on more.
constexpr std::size_t kSavedAt = 16;
inline void* saved_at(const DeviceBuffer& d) { return static_cast<char*>(d.get()) + kSavedAt; }

// Values held as double, stored in `dtype` on the device (one byte more, so that none is an empty allocation).
inline DeviceBuffer stored(DType dtype, const std::vector<double>& v) {
  std::vector<unsigned char> host(v.size() * dtype_info(dtype).size_bytes + 1);
  for (std::size_t i = 0; i < v.size(); ++i) store_element(dtype, host.data(), int64_t(i), v[i]);
  DeviceBuffer d(host.size());
  d.upload(host.data(), host.size());
  return d;
}

// The values the kernels read: rounded to `dtype`.
inline std::vector<double> rounded(DType dtype, std::vector<double> v) {
  unsigned char bytes[8];
  for (double& x : v) {
    store_element(dtype, bytes, 0, x);
    x = load_element(dtype, bytes, 0);
  }
  return v;
}

inline std::vector<double> download_as_double(const DeviceBuffer& d, DType dtype, int64_t n) {
  std::vector<unsigned char> bytes(std::size_t(n) * dtype_info(dtype).size_bytes);
  if (n) d.download(bytes.data(), bytes.size());
  std::vector<double> out(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) out[std::size_t(i)] = load_element(dtype, bytes.data(), i);
  return out;
}

// What rounding a value to a half type may change, relative to its size (0 for f32 and f64, whose values the
// chains compute in their own precision): the added tolerance of gradients written in that type.
inline double half_rounding(DType dtype) {
  return dtype == DType::f16 ? 0x1p-11 : dtype == DType::bf16 ? 0x1p-8 : 0;
}

// |gpu − ref| within tol·max(floor, |ref|), with equal infinities and NaN where the reference has NaN. floor: the
// size below which a value's error is not relative to it (1, or a sum's terms' size where they may cancel).
inline bool close(double gpu, double ref, double tol, double floor = 1.0) {
  if (std::isnan(ref) || std::isnan(gpu)) return std::isnan(ref) && std::isnan(gpu);
  if (std::isinf(ref) || std::isinf(gpu)) return gpu == ref;
  return std::fabs(gpu - ref) <= tol * std::max(floor, std::fabs(ref));
}

// The largest error of each output over a suite's cases, for its closing message.
struct Worst {
  double score = 0, alpha = 0, grad = 0;
};

// Each got[i] against ref[i] (close(), tol, floor) as name[i]: the first misses of a case (counted in bad) reported;
// the largest error where the reference is finite, relative to max(floor, |ref|), kept in worst (when given).
// floors: one for each element (a sum's, the size of its terms), or empty: `floor` for every one.
inline void compare(const std::string& name, const std::vector<double>& got, const std::vector<double>& ref, double tol,
                    int& bad, double* worst = nullptr, double floor = 1.0, const std::vector<double>& floors = {}) {
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double f = floors.empty() ? floor : floors[i];
    if (!close(got[i], ref[i], tol, f) && bad++ < 5)
      FAIL_CHECK(name << "[" << i << "] = " << got[i] << ", reference " << ref[i]);
    if (worst && std::isfinite(ref[i]))
      *worst = std::max(*worst, std::fabs(got[i] - ref[i]) / std::max(f, std::fabs(ref[i])));
  }
}

// The problems the cluster tests run, each with a cluster size: both semirings and dtypes of `form` at shapes of 5
// to 257 states (blocks of no state at the small ones, the shared-memory ring and emissions at the large), in one
// block per sequence and every cluster size whose registers fit. Their test cases join test::kNeedsClusters, so that a
// device without clusters reports them skipped.
struct ClusterRun {
  ChainProblem problem;
  int cluster;
};
inline std::vector<ClusterRun> cluster_runs(ChainForm form) {
  REQUIRE_MESSAGE(cluster_sms(*current_device()) > 0, "a case that runs clusters joins test::kNeedsClusters");
  const struct {
    int64_t B, T, C;
  } shapes[] = {{3, 6, 5}, {3, 5, 31}, {2, 7, 33}, {3, 40, 64}, {1, 4, 129}, {2, 3, 257}};
  std::vector<ClusterRun> runs;
  for (Semiring s : {Semiring::log, Semiring::max_plus})
    for (DType d : {DType::f32, DType::f64})
      for (const auto& sh : shapes)
        for (int cluster = 1; cluster <= kMaxChainCluster; cluster *= 2) {
          ChainProblem p;
          p.semiring = s;
          p.dtype = d;
          p.form = form;
          p.B = sh.B;
          p.T = sh.T;
          p.C = sh.C;
          if (clustered_chain_spec(p, cluster).registers_fit()) runs.push_back({p, cluster});
        }
  return runs;
}

// A best path of a sequence of L of T positions over C states: a state in [0, C) at each of its first L positions,
// −1 at the rest.
inline bool valid_path(const int32_t* path, int64_t L, int64_t T, int64_t C) {
  for (int64_t t = 0; t < T; ++t)
    if (t < L ? path[t] < 0 || path[t] >= C : path[t] != -1) return false;
  return true;
}

// Where a strategy's Viterbi must be the sequential kernels' bit for bit: a failed check for each sequence whose score
// or path differs from theirs (seq_score, seq_path: the sequential plan's on the same inputs), counted in `bad`.
inline void check_same_as_sequential(const std::string& strategy, const std::vector<double>& score,
                                     const std::vector<int32_t>& path, const std::vector<double>& seq_score,
                                     const std::vector<int32_t>& seq_path, int64_t B, int64_t T, int& bad) {
  for (int64_t b = 0; b < B; ++b) {
    const bool same_score = seq_score[b] == score[b] || (std::isnan(seq_score[b]) && std::isnan(score[b]));
    const bool same =
        same_score && std::equal(seq_path.begin() + b * T, seq_path.begin() + (b + 1) * T, path.begin() + b * T);
    if (!same && bad++ < 5)
      FAIL_CHECK("sequence " << b << ": the " << strategy << " strategy's score " << score[b]
                             << " or path differs from the sequential kernels' (" << seq_score[b] << ")");
  }
}

// Where the sums are exact (small integers, no ±inf or NaN) and a sequence's best score finite, its best path is the
// reference's itself: ties, among a state's sources and among the last states, go to the smallest state in both.
inline void check_smallest_ties(const std::vector<int32_t>& path, const std::vector<int32_t>& ref_path,
                                const std::vector<double>& ref_score, int64_t B, int64_t T, int& bad) {
  for (int64_t b = 0; b < B; ++b) {
    if (!std::isfinite(ref_score[b])) continue;
    const auto first = ref_path.begin() + b * T;
    const auto differs = std::mismatch(first, first + T, path.begin() + b * T);
    if (differs.first != first + T && bad++ < 5)
      FAIL_CHECK("sequence " << b << ": at position " << (differs.first - first) << " the path takes state "
                             << *differs.second << " where the smallest of the best ties is " << *differs.first);
  }
}

// The chunk lengths the chunked strategy's tests take for `p`, each once: the shortest that fits (log's products must
// fit in saved; max_plus takes any), 8 for max_plus (many short chunks), and one chunk of the whole chain.
inline std::vector<int64_t> tested_chunks(const ChainProblem& p) {
  int64_t whole = 2, shortest = 2;
  while (whole < p.T - 1) whole *= 2;
  while (shortest < whole && !chunk_unfit(p, shortest).empty()) shortest *= 2;
  std::vector<int64_t> chunks{shortest};
  if (p.semiring == Semiring::max_plus && shortest < 8 && whole > 8) chunks.push_back(8);
  if (whole > shortest) chunks.push_back(whole);
  return chunks;
}

} // namespace jitbmm::test
