// The state behind a SemiringBMM, shared by the forward (plan.cpp) and the backward (backward.cpp).
#pragma once

#include <memory>
#include <mutex>

#include "cache/kernel_cache.hpp"
#include "jitbmm/plan.hpp"
#include "params.cuh"

namespace jitbmm {

// A backward pass's kernel, chosen (stored decision, tuning or default) on first use.
struct GradKernel {
  KernelSpec spec;
  std::shared_ptr<const LoadedKernel> kernel;
};

struct SemiringBMM::Impl {
  Problem problem;
  KernelSpec spec;
  std::shared_ptr<const DeviceInfo> device;
  std::shared_ptr<const LoadedKernel> kernel; // null when the problem has no outputs (nothing to launch)
  jb::BmmParams params{};                     // sizes and strides; pointers filled per call
  unsigned grid[3] = {1, 1, 1};
  unsigned block[3] = {1, 1, 1};
  std::size_t workspace_bytes = 0; // split-K only
  unsigned combine_grid = 1;

  mutable std::mutex grad_mutex;                          // guards the two below
  mutable std::shared_ptr<const GradKernel> grad[2];      // grad_a, grad_b
  mutable std::shared_ptr<const SemiringBMM> with_argmax; // the forward with argmax, for the selecting backward
};

} // namespace jitbmm
