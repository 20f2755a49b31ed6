// Checks of a case's elements against the CPU reference, spread over the host's threads. The reference is most of a
// GPU case's time (long double, one element at a time), so a case's rows run in contiguous ranges side by side, each
// into its own result, and the results merge in row order: counts add up and the first failure reported is the first
// row's, as one thread checking row after row would report it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <exception>
#include <thread>
#include <vector>

namespace jitbmm::test {

// check(first, last, result) checks rows [first, last) into result; merge(into, part) adds part after into. Every row
// is checked exactly once; an exception from any range is rethrown here (the first range's first) once all have
// ended. threads: at most that many (0: the host's hardware threads).
template <class Result, class Check, class Merge>
Result check_rows_in_parallel(int64_t rows, Check check, Merge merge, unsigned threads = 0) {
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  const int64_t ranges = std::max<int64_t>(1, std::min<int64_t>(rows, threads));
  std::vector<Result> parts(static_cast<std::size_t>(ranges));
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(ranges));
  auto run = [&](int64_t r) {
    try {
      check(rows * r / ranges, rows * (r + 1) / ranges, parts[static_cast<std::size_t>(r)]);
    } catch (...) {
      errors[static_cast<std::size_t>(r)] = std::current_exception();
    }
  };
  std::vector<std::thread> pool;
  for (int64_t r = 1; r < ranges; ++r) pool.emplace_back(run, r);
  run(0); // this thread takes the first range
  for (std::thread& t : pool) t.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
  Result all{};
  for (const Result& part : parts) merge(all, part);
  return all;
}

// Threads for a check of this many reference terms: one below about 2^18 (a few milliseconds, less than starting
// the threads costs the suite's many small cases), else all the host has (0).
inline unsigned threads_for_terms(int64_t terms) { return terms < (int64_t(1) << 18) ? 1u : 0u; }

} // namespace jitbmm::test
