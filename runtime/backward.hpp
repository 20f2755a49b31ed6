// SemiringBMM::backward's own checks. The gradient launch it shares with the tuner's trials is the engine's
// (runtime/grad_launch.hpp, included here for the callers of both).
#pragma once

#include "jitbmm/kernel_spec.hpp"
#include "runtime/grad_launch.hpp" // IWYU pragma: export

namespace jitbmm {

// Throws std::invalid_argument naming the operand's strides when its gradient cannot be written in that layout
// (two elements at one address; a batch stride of 0 is a broadcast, whose gradient sums over the batch).
void check_grad_layout(const Problem& problem, Pass pass);

} // namespace jitbmm
