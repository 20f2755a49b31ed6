#include "runtime/tuner/cpu_pool.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "cache/disk_cache.hpp"
#include "support/process_share.hpp"

namespace jitbmm {

namespace {

constexpr auto kTokenPoll = std::chrono::milliseconds(20);

// Takes one of the machine's `tokens` CPU tokens, trying them from `first` on, and again every kTokenPoll while
// `wanted()`; not held when no longer wanted.
KeyLock take_cpu_token(DiskCache& disk, unsigned tokens, unsigned first, const std::function<bool()>& wanted) {
  for (;;) {
    for (unsigned t = 0; t < tokens; ++t) {
      KeyLock token = disk.try_cpu_token((first + t) % tokens);
      if (token.held()) return token;
    }
    if (!wanted()) return KeyLock::unavailable("no longer needed");
    std::this_thread::sleep_for(kTokenPoll);
  }
}

} // namespace

void for_each_on_cpus(std::size_t count, const std::function<void(std::size_t)>& work) {
  for_each_on_cpus(count, work, DiskCache::process_cache());
}

void for_each_on_cpus(std::size_t count, const std::function<void(std::size_t)>& work, DiskCache* disk) {
  if (count == 0) return;
  const bool tokens = disk && disk->usable() && !disk->read_only();
  const std::size_t threads = std::min<std::size_t>(count, tokens ? usable_cpus() : compile_threads());
  std::atomic<std::size_t> next{0};
  std::atomic<bool> failed{false};
  std::exception_ptr first_error;
  std::mutex error_mutex;
  const auto run = [&] {
    for (std::size_t i; !failed && (i = next.fetch_add(1)) < count;) try {
        work(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!first_error) first_error = std::current_exception();
        failed = true;
      }
  };
  const unsigned machine = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> pool;
  for (std::size_t w = 1; w < threads; ++w)
    pool.emplace_back([&, w] {
      KeyLock token; // not held: no tokens to take
      if (tokens) {
        token = take_cpu_token(*disk, machine, static_cast<unsigned>(w), [&] { return !failed && next < count; });
        if (!token.held()) return;
      }
      run();
    });
  run();
  for (std::thread& t : pool) t.join();
  if (first_error) std::rethrow_exception(first_error);
}

} // namespace jitbmm
