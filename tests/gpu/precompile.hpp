// Compiles many kernels on all cores before the tests that launch them: NVRTC is thread-safe and the kernel cache
// waits for in-flight builds, so a test then finds its kernels loaded instead of compiling them one at a time.
#pragma once

#include <algorithm>
#include <atomic>
#include <exception>
#include <thread>
#include <vector>

#include "runtime/jit.hpp"
#include "jitbmm/kernel_spec.hpp"
#include "runtime/device.hpp"

namespace jitbmm::test {

inline void precompile(const DeviceInfo& device, const std::vector<KernelSpec>& specs) {
  std::atomic<std::size_t> next{0};
  std::vector<std::thread> pool;
  for (unsigned w = 0; w < std::max(2u, std::thread::hardware_concurrency()); ++w)
    pool.emplace_back([&] {
      for (std::size_t i; (i = next.fetch_add(1)) < specs.size();) {
        try {
          load_kernel(device, specs[i]);
        } catch (const std::exception&) {
          // reported by the test that uses it (failures are not cached: it compiles again there)
        }
      }
    });
  for (auto& t : pool) t.join();
}

} // namespace jitbmm::test
