// A chain plan with a chosen variant instead of the default one (what `jitbmm bench --chain` compares).
#pragma once

#include "generator/chain_source.hpp"
#include "jitbmm/chain.hpp"
#include "runtime/device.hpp"

namespace jitbmm {

// As ChainPlan::get, with `spec` (checked against the problem and the device) instead of default_chain_spec's.
ChainPlan chain_plan_for(const ChainProblem& problem, const ChainSpec& spec);

// What default_chain_spec takes for a device: its SMs from sm_90 on (clusters of blocks), else 0.
int cluster_sms(const DeviceInfo& device);

} // namespace jitbmm
