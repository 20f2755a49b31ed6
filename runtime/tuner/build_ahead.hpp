// Building ahead: the kernels a first call would load one after another (a plan's forward and backward passes, a
// chain's modules and its products), compiled all at once on the CPU pool (runtime/tuner/cpu_pool.hpp) before the
// first of them is asked for, so that the call waits for its longest compile rather than for the sum of them. What
// is built is kept where load_kernel and load_generated keep it (runtime/jit.hpp), so the loads that follow find
// it. A kernel that fails to build here is left for the load that needs it to meet and report: building ahead never
// changes what a call computes, which kernels it takes, or which error it gives.
#pragma once

#include <vector>

#include "generator/emit_source.hpp"
#include "jitbmm/kernel_spec.hpp"
#include "runtime/device.hpp"

namespace jitbmm {

// Builds every kernel of `generated` and `specs` not built yet in this process (quick builds under a QuickBuild).
// Fewer than two are left to their loads: alone, a kernel gains nothing from being built ahead.
void build_ahead(const DeviceInfo& device, const std::vector<GeneratedKernel>& generated,
                 const std::vector<KernelSpec>& specs = {});

} // namespace jitbmm
