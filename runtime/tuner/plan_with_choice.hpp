// Planning with the choice cascade's spec, and again without a stored spec that fails to compile or load.
#pragma once

#include <functional>
#include <vector>

#include "jitbmm/kernel_spec.hpp"
#include "runtime/tuner/choose.hpp"

namespace jitbmm {

// Plans with the spec `decide` returns (given the specs rejected so far) through `plan`, and returns that spec.
// When the spec came from a stored decision and `plan` throws CompileError or CudaError (a planted or stale
// decision naming a kernel that cannot compile or load here), it warns naming the decision and decides again with
// that spec rejected: the next stored decision, else tuning or the default. Only the variant changes, never the
// results. Errors of any other spec (the default, one tuned now, one the user passed) propagate.
KernelSpec plan_with_choice(const std::function<Choice(const std::vector<KernelSpec>& rejected)>& decide,
                            const std::function<void(const KernelSpec&)>& plan);

} // namespace jitbmm
