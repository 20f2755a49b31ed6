// SemiringBMM::backward's own checks. The gradient launch it shares with the tuner's trials is the engine's
// (runtime/grad_launch.hpp, included here for the callers of both).
#pragma once

#include "jitbmm/kernel_spec.hpp"
#include "jitbmm/plan.hpp"
#include "runtime/grad_launch.hpp" // IWYU pragma: export

namespace jitbmm {

// Throws std::invalid_argument naming the operand's strides when its gradient cannot be written in that layout
// (two elements at one address; a batch stride of 0 is a broadcast, whose gradient sums over the batch).
void check_grad_layout(const Problem& problem, Pass pass);

// Chooses and builds `plan`'s kernel of a backward pass (grad_a or grad_b), which the plan keeps: what its first
// backward would do, done ahead (a stand-in's chosen plan's passes, runtime/product_stand_in.hpp).
void build_pass(const SemiringBMM::Impl& plan, Pass pass);

} // namespace jitbmm
