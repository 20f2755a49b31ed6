// A chain plan with a chosen variant instead of the default one (what `jitbmm bench --chain` compares).
#pragma once

#include "generator/chain_source.hpp"
#include "jitbmm/chain.hpp"

namespace jitbmm {

// As ChainPlan::get, with `spec` (checked against the problem) instead of default_chain_spec(problem).
ChainPlan chain_plan_for(const ChainProblem& problem, const ChainSpec& spec);

} // namespace jitbmm
