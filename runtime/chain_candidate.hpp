// A chain plan as a chain trial's candidate (runtime/tuner/chain_trials.hpp): its calls in the problem's form, so
// that the tuner, beneath the plans, times and checks a variant without naming ChainPlan.
#pragma once

#include "jitbmm/chain.hpp"
#include "runtime/tuner/chain_trials.hpp"

namespace jitbmm {

// The plan's forward (with the workspace of a forward with a path) and backward, and its saved and scratch bytes;
// the candidate keeps the plan.
ChainCandidate chain_candidate(const ChainPlan& plan);

} // namespace jitbmm
