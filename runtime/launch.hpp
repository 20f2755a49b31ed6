// The one place kernels are launched: a launch wrapper that names the kernel in its error, and the executor that
// runs a strategy's LaunchPlan (generator/strategy.hpp) for plans, backward passes and the tuner's trials alike.
#pragma once

#include <string>

#include "generator/strategy.hpp"
#include "templates/core/params.cuh"
#include "runtime/jit.hpp"

namespace jitbmm {

// Launches the entry point `suffix` of `kernel` (beyond 48 KiB of dynamic shared memory, the function's limit raised
// first); a failure is CudaError naming the entry point. Where the kernel allows it (LoadedKernel::dependent_launch)
// and $JITBMM_DEPENDENT_LAUNCH is not off, the launch may overlap the end of the previous kernel of the stream
// (cuLaunchKernelEx with programmatic stream serialization): it is launched and its blocks are dispatched as the
// previous kernel's blocks end, and they wait for that kernel to finish before they read or write anything. Where the
// driver refuses such a launch, the plain one is made and the process makes plain launches from then on.
void launch(const LoadedKernel& kernel, const std::string& suffix, const unsigned (&grid)[3],
            const unsigned (&block)[3], void** args, CUstream stream, unsigned dynamic_shared = 0);

// Whether $JITBMM_DEPENDENT_LAUNCH lets launches overlap (on, the default, or off; another value is
// std::invalid_argument naming it).
bool dependent_launch_enabled();

// A launch whose blocks are clusters of `cluster` consecutive blocks (cuLaunchKernelEx's attribute, for a kernel
// compiled with no cluster of its own; sm_90 on): the caller has raised the function's limit of dynamic shared memory
// where it takes more than 48 KiB. It never overlaps the kernel before it. max_active_clusters: how many such clusters
// the device holds at once (0: none fits).
void launch_clustered(const LoadedKernel& kernel, const std::string& suffix, unsigned grid, unsigned block,
                      unsigned cluster, void** args, CUstream stream, unsigned dynamic_shared);
int max_active_clusters(const LoadedKernel& kernel, const std::string& suffix, unsigned grid, unsigned block,
                        unsigned cluster, unsigned dynamic_shared);

// cuLaunchCooperativeKernel: every block of the grid resident at once (what a grid-wide barrier needs); a grid
// larger than the device holds is CudaError naming the entry point. Beyond 48 KiB of dynamic shared memory the
// caller has raised the function's limit (a cooperative kernel's, once: its size may differ by problem). It never
// overlaps the kernel before it, whose blocks could hold SMs its grid needs.
void launch_cooperative(const LoadedKernel& kernel, const std::string& suffix, unsigned grid, unsigned block,
                        void** args, CUstream stream, unsigned dynamic_shared = 0);

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
