// One gradient pass's launch (templates/grad/backward.cuh): what SemiringBMM::backward and the tuner's trials both run.
// It sits in the engine, beneath both, so that the tuner never includes the plan's backward (runtime/backward.hpp)
// while the backward asks the tuner for its kernels.
#pragma once

#include <cstddef>
#include <cstdint>

#include "generator/strategy.hpp"
#include "jitbmm/kernel_spec.hpp"
#include "runtime/jit.hpp"

namespace jitbmm {

struct GradArgs {
  const void* a = nullptr;
  const void* b = nullptr;
  const void* out = nullptr;       // log: the saved forward output
  const void* grad_out = nullptr;  // laid out like out
  const int32_t* argmax = nullptr; // selecting semirings: the forward's argmax, [B][M][N] contiguous
  void* grad = nullptr;            // grad_a or grad_b, in its operand's layout
  void* workspace = nullptr;       // grad_workspace_bytes(problem, spec) of scratch (see runtime/scratch.hpp)
};

// The problem backward specs are planned and tuned for: the forward problem without argmax.
Problem grad_problem(const Problem& problem);

// The scratch one gradient pass takes: an accumulator when the kernel adds atomically (scatter, or a gradient
// broadcast over the batch), else none.
std::size_t grad_workspace_bytes(const Problem& problem, const KernelSpec& spec);

// Launches one gradient on `stream`: zeroed workspace when the kernel accumulates atomically, the kernel, the
// store into the gradient's layout. Arguments must already be checked.
void launch_grad(const Problem& problem, const KernelSpec& spec, const LoadedKernel& kernel, const GradArgs& args,
                 CUstream stream);
// The same with the pass's launches already worked out (strategy_def(spec).launches(spec, problem)), as a plan
// keeps them.
void launch_grad(const Problem& problem, const KernelSpec& spec, const LaunchPlan& launches,
                 const LoadedKernel& kernel, const GradArgs& args, CUstream stream);

} // namespace jitbmm
