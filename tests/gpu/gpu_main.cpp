// The GPU suite's main: without a usable GPU it exits 77, which CTest reports as "skipped" (never "passed").
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "jitbmm/errors.hpp"
#include "cache/kernel_cache.hpp"
#include "runtime/device.hpp"
#include "variants.hpp"

namespace {

// Compiles every variant the suite will run on all cores first (NVRTC is thread-safe and the kernel cache waits
// for in-flight builds), so the tests below do not compile hundreds of kernels one at a time.
void compile_all_variants(const jitbmm::DeviceInfo& device) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<jitbmm::KernelSpec> specs = jitbmm::test::all_variants();
  std::atomic<std::size_t> next{0};
  std::vector<std::thread> pool;
  for (unsigned w = 0; w < std::max(2u, std::thread::hardware_concurrency()); ++w)
    pool.emplace_back([&] {
      for (std::size_t i; (i = next.fetch_add(1)) < specs.size();) {
        try {
          jitbmm::load_kernel(device, specs[i]);
        } catch (const std::exception&) {
          // reported by the test that uses it
        }
      }
    });
  for (auto& t : pool) t.join();
  std::printf("compiled %zu variants in %.1f s\n", specs.size(),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

} // namespace

int main(int argc, char** argv) {
  try {
    const auto dev = jitbmm::current_device();
    std::printf("GPU suite on %s (%s)\n", dev->name.c_str(), dev->arch().c_str());
    compile_all_variants(*dev);
  } catch (const jitbmm::NoDriverError& e) {
    std::printf("SKIPPED: no GPU here (%s)\n", e.what());
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}
