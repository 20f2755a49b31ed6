// The architecture features a spec's kernels cannot run without (generator/arch_features.hpp): what its strategy
// and parameters ask of the device, as the tuner filters candidates by and the emitter records in GeneratedKernel.
#pragma once

#include "jitbmm/kernel_spec.hpp"

namespace jitbmm {

// The Feature bits a spec's kernels need (those without an older equivalent): its math's, or the packed kernel's
// half pairs at its largest tile.
unsigned needed_features(const KernelSpec& spec);

} // namespace jitbmm
