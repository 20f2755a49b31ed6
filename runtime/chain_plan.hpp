// A chain plan with a chosen variant instead of the default one (what `jitbmm bench --chain` compares and `jitbmm
// tune --chain` times), and the variant ChainPlan::get chooses.
#pragma once

#include <optional>

#include "generator/chain_source.hpp"
#include "jitbmm/chain.hpp"
#include "runtime/device.hpp"
#include "runtime/tuner/chain_decisions.hpp"

namespace jitbmm {

// As ChainPlan::get, with `spec` (checked against the problem and the device) instead of default_chain_spec's.
ChainPlan chain_plan_for(const ChainProblem& problem, const ChainSpec& spec);

// What default_chain_spec takes for a device: its SMs from sm_90 on (clusters of blocks), else 0.
int cluster_sms(const DeviceInfo& device);

// The spec ChainPlan::get takes: the clusters a stored decision names for the problem's bucket on this device
// (`jitbmm tune --chain`, runtime/tuner/chain_decisions.hpp) where their registers fit, else default_chain_spec's;
// with the decision read (if any) and whether its clusters were taken.
struct ChainChoice {
  ChainSpec spec;
  std::optional<ChainDecision> decision;
  bool from_decision = false;
};
ChainChoice choose_chain_spec(const ChainProblem& problem, const DeviceInfo& device);
inline ChainSpec chosen_chain_spec(const ChainProblem& problem, const DeviceInfo& device) {
  return choose_chain_spec(problem, device).spec;
}

} // namespace jitbmm
