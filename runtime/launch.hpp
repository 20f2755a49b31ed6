// The one place kernels are launched: a launch wrapper that names the kernel in its error, and the executor that
// runs a strategy's LaunchPlan (generator/strategy.hpp) for plans, backward passes and the tuner's trials alike.
#pragma once

#include <string>

#include "generator/strategy.hpp"
#include "templates/core/params.cuh"
#include "runtime/jit.hpp"

namespace jitbmm {

// cuLaunchKernel (beyond 48 KiB of dynamic shared memory, the function's limit raised first); a failure is CudaError
// naming the entry point (name + suffix).
void launch(CUfunction f, const unsigned (&grid)[3], const unsigned (&block)[3], void** args, CUstream stream,
            const std::string& name, const std::string& suffix = "", unsigned dynamic_shared = 0);

// cuLaunchCooperativeKernel: every block of the grid resident at once (what a grid-wide barrier needs); a grid
// larger than the device holds is CudaError naming the entry point. Beyond 48 KiB of dynamic shared memory the
// caller has raised the function's limit (a cooperative kernel's, once: its size may differ by problem).
void launch_cooperative(CUfunction f, unsigned grid, unsigned block, void** args, CUstream stream,
                        const std::string& name, const std::string& suffix = "", unsigned dynamic_shared = 0);

// The argument blocks of a problem: sizes and strides, pointers null (the caller fills them per call). A gradient
// pass's also says how many batch slices its accumulator has.
jb::BmmParams bmm_params(const Problem& problem);
jb::GradParams grad_params(const Problem& problem, const KernelSpec& spec);

// Runs the plan's launches in order on `stream`, each with a copy of `params` whose workspace is `workspace` (at
// least plan.workspace_bytes; zeroed first when the plan says so). Arguments must already be checked. same_b: b and
// the workspace are the previous call's, so a launch with a grid_same_b takes that grid.
void run_launches(const LoadedKernel& kernel, const LaunchPlan& plan, jb::BmmParams params, void* workspace,
                  CUstream stream, bool same_b = false);
void run_launches(const LoadedKernel& kernel, const LaunchPlan& plan, jb::GradParams params, void* workspace,
                  CUstream stream);

} // namespace jitbmm
