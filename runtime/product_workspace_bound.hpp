// The most scratch a product plan of a problem may take, known before the plan is made: for a caller that sizes a
// workspace once for calls that plan their products later (a chain plan announcing its chosen strategy's workspace
// while a stand-in runs, runtime/chain_stand_in.hpp). The plans counted are those SemiringBMM::get makes while tuning
// is held (TuningHold, as a chain's products are planned): the variant chosen already in this process, else a stored
// decision's, with those of its check where it was brought from elsewhere, and the default; not the tuner's other
// candidates, which such a plan never takes, nor a stand-in's quick builds, which it never runs. A plan that takes
// another after all (a stored decision that fails to compile, passed over for the next) makes the caller's check of
// its sizes fail: a chain plan's chosen strategy then never serves (its stand-in does, with a warning).
#pragma once

#include <cstddef>
#include <vector>

#include "jitbmm/kernel_spec.hpp"
#include "runtime/device.hpp"

namespace jitbmm {

// A forward call's (SemiringBMM::workspace_bytes), of such a plan or of one made with a spec of `also` (a rule the
// caller's products follow).
std::size_t product_workspace_bound(const Problem& problem, const DeviceInfo& device,
                                    const std::vector<KernelSpec>& also = {});
// A backward call's writing both gradients, given the forward's argmax where the semiring reads it
// (SemiringBMM::backward_workspace_bytes(true, true)).
std::size_t product_backward_workspace_bound(const Problem& problem, const DeviceInfo& device);

} // namespace jitbmm
