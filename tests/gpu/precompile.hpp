// Compiles many kernels on all cores before the tests that launch them: NVRTC is thread-safe and the kernel cache
// waits for in-flight builds, so a test then finds its kernels loaded instead of compiling them one at a time.
// Failures are not cached: the test that uses a kernel compiles it again there and reports the error.
#pragma once

#include <algorithm>
#include <atomic>
#include <exception>
#include <thread>
#include <vector>

#include "generator/chain_source.hpp"
#include "jitbmm/chain_problem.hpp"
#include "jitbmm/kernel_spec.hpp"
#include "runtime/chain_plan.hpp"
#include "runtime/device.hpp"
#include "runtime/jit.hpp"

namespace jitbmm::test {

// Runs build(i) for every i < n on all cores, ignoring what it throws.
template <class Build> void on_all_cores(std::size_t n, const Build& build) {
  std::atomic<std::size_t> next{0};
  std::vector<std::thread> pool;
  for (unsigned w = 0; w < std::max(2u, std::thread::hardware_concurrency()); ++w)
    pool.emplace_back([&] {
      for (std::size_t i; (i = next.fetch_add(1)) < n;) {
        try {
          build(i);
        } catch (const std::exception&) {
        }
      }
    });
  for (auto& t : pool) t.join();
}

inline void precompile(const DeviceInfo& device, const std::vector<KernelSpec>& specs) {
  on_all_cores(specs.size(), [&](std::size_t i) { load_kernel(device, specs[i]); });
}

inline void precompile(const DeviceInfo& device, const std::vector<ChainSpec>& specs) {
  std::vector<GeneratedKernel> units;
  for (const ChainSpec& spec : specs)
    for (GeneratedKernel& unit : emit_chain_units(spec)) units.push_back(std::move(unit));
  on_all_cores(units.size(), [&](std::size_t i) { load_generated(device, units[i]); });
}

// The modules of chain problems' default variants on the device (what ChainPlan::get loads: T does not change a
// module, and B only the clusters, alike for every batch of a few sequences).
inline void precompile(const DeviceInfo& device, const std::vector<ChainProblem>& problems) {
  std::vector<ChainSpec> specs;
  for (const ChainProblem& p : problems) specs.push_back(default_chain_spec(p, cluster_sms(device)));
  precompile(device, specs);
}

// Those of one semiring and form in f32 and f64 for each of `states` and a batch of a few sequences, on the
// current device.
inline void precompile_chains(Semiring semiring, ChainForm form, const std::vector<int64_t>& states,
                              const std::vector<DType>& dtypes = {DType::f32, DType::f64}) {
  std::vector<ChainProblem> problems;
  for (DType dtype : dtypes)
    for (int64_t C : states) {
      ChainProblem p;
      p.semiring = semiring;
      p.dtype = dtype;
      p.form = form;
      p.B = 1;
      p.T = 2;
      p.C = C;
      problems.push_back(p);
    }
  precompile(*current_device(), problems);
}

} // namespace jitbmm::test
