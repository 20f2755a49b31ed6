// The most scratch a product plan of a problem may take, whichever variant it comes to run, known before the plan is
// made: for a caller that sizes a workspace once for calls that plan their products later (a chain plan announcing
// its chosen strategy's workspace while a stand-in runs, runtime/chain_stand_in.hpp). The variants counted are every
// one a plan can take on the device: the tuner's candidates, the variants chosen without tuning (a stored decision,
// with the kernels of its check, or the default), a stand-in's quick builds and the chain's step-product rule.
#pragma once

#include <cstddef>

#include "jitbmm/kernel_spec.hpp"
#include "runtime/device.hpp"

namespace jitbmm {

// A forward call's (SemiringBMM::workspace_bytes of any plan of `problem`).
std::size_t product_workspace_bound(const Problem& problem, const DeviceInfo& device);
// A backward call's writing both gradients, given the forward's argmax where the semiring reads it
// (SemiringBMM::backward_workspace_bytes(true, true)), a stand-in's room for its chosen plan's passes included.
std::size_t product_backward_workspace_bound(const Problem& problem, const DeviceInfo& device);

} // namespace jitbmm
