// The GPU suite at a feature level: JITBMM_FEATURES=sm_75 (or sm_80) runs a newer GPU's kernels with an older
// architecture's code paths (runtime/device.hpp), and the variants whose kernels need a feature the level lacks
// (generator/needed_features.hpp) cannot run. A test skips them here, by the device's features, and
// says so: a MESSAGE in its test case, and a count the suite's main prints at the end. Never passed silently.
// Whole test cases that need a feature join a test suite of needs.hpp instead (kNeedsClusters, kNeedsMmaTf32Bf16).
#pragma once

#include <doctest/doctest.h>

#include <atomic>
#include <cstdlib>
#include <vector>

#include "generator/arch_features.hpp"
#include "generator/needed_features.hpp"
#include "jitbmm/kernel_spec.hpp"
#include "runtime/device.hpp"

namespace jitbmm::test {

// Whether `spec`'s kernels run on `device` at its feature level.
inline bool runs_here(const KernelSpec& spec, const DeviceInfo& device) {
  return device.features.has(needed_features(spec));
}

// The variants the process's tests skipped for the level, summed over every test case (the main prints it).
inline std::atomic<long>& level_skips() {
  static std::atomic<long> skipped{0};
  return skipped;
}

// The specs of `specs` that run on the current device; the others are counted, and named by a MESSAGE of the test
// case that calls this (with what they need).
inline std::vector<KernelSpec> runnable_here(const std::vector<KernelSpec>& specs) {
  const DeviceInfo& device = *current_device();
  std::vector<KernelSpec> out;
  unsigned needed = 0;
  for (const KernelSpec& spec : specs) {
    if (runs_here(spec, device))
      out.push_back(spec);
    else
      needed |= needed_features(spec);
  }
  if (const std::size_t skipped = specs.size() - out.size()) {
    level_skips() += static_cast<long>(skipped);
    MESSAGE("skipped " << skipped << " of " << specs.size() << " variants on " << device.arch_and_level()
                       << ": they need " << missing_features(needed, device.features));
  }
  return out;
}

// exp_matmul's default spec for `p`, or where the device's level lacks its tensor-core math, the FMA form at
// tests/variants.hpp's small tile (it needs no feature, and fits every problem the default does).
inline KernelSpec exp_matmul_spec_here(const Problem& p) {
  KernelSpec s = default_spec(p, Strategy::exp_matmul);
  if (runs_here(s, *current_device())) return s;
  s.math = Math::fma;
  s.tile_m = s.tile_n = 32, s.tile_k = 8, s.thread_m = 2, s.thread_n = 4, s.min_blocks = 1;
  return s;
}

// The architecture the device's kernels use the features of, read from the environment as the user gave it (not
// from the runtime, which the level tests check): $JITBMM_FEATURES, else the device's own.
inline int expected_level(const DeviceInfo& device) {
  const char* level = std::getenv("JITBMM_FEATURES");
  return level && *level ? parse_sm(level, "JITBMM_FEATURES") : device.sm();
}

} // namespace jitbmm::test
