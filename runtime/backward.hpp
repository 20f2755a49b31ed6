// Backward launches (templates/backward.cuh), shared by SemiringBMM::backward and the autotuner.
#pragma once

#include <cstdint>

#include "runtime/jit.hpp"
#include "generator/strategy.hpp"
#include "jitbmm/plan.hpp"

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

// Throws std::invalid_argument naming the operand's strides when its gradient cannot be written in that layout
// (two elements at one address; a batch stride of 0 is a broadcast, whose gradient sums over the batch).
void check_grad_layout(const Problem& problem, Pass pass);

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
