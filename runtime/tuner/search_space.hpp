// The tuner's search space: which specs are worth timing for a problem, each fitting it and the device.
#pragma once

#include <optional>
#include <vector>

#include "generator/arch_features.hpp"
#include "jitbmm/kernel_spec.hpp"
#include "templates/core/limits.cuh"

namespace jitbmm {

// Device facts that bound the candidates.
struct DeviceLimits {
  int max_threads_per_block = 1024;
  int max_static_shared_bytes = jb::kMaxStaticSharedBytes;
  int max_dynamic_shared_bytes = 0; // the opt-in limit per block
  ArchFeatures features = arch_features(80); // what its kernels may use (needed_features)
};

// Strategies × parameters worth timing for this problem, each one fitting it (check_spec_fits) and the device.
// For a backward pass, `problem` is the forward problem (its with_argmax is ignored).
std::vector<KernelSpec> tuning_candidates(const Problem& problem, const DeviceLimits& limits,
                                          Pass pass = Pass::forward);

// What a small problem (is_small_problem) times when it is first planned: `fallback` (the default) and the light
// variants of `space`: the direct kernels and the plain tiled kernel's tiles of at most 32×32 outputs, which are the
// ones that win at small shapes and whose compiles are short (the other tiled strategies' are not, whatever the tile).
constexpr int kLightTileOutputs = 32 * 32;
std::vector<KernelSpec> small_problem_candidates(const std::vector<KernelSpec>& space, const KernelSpec& fallback);

// `spec` as it is when it fits `problem`, else with 64-bit indices when that fits, else nothing.
std::optional<KernelSpec> fitting(KernelSpec spec, const Problem& problem);

} // namespace jitbmm
