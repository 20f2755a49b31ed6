// A chain plan with a chosen variant instead of the default one (what `jitbmm bench --chain` compares and `jitbmm
// tune --chain` times), and the variant ChainPlan::get chooses.
#pragma once

#include <optional>

#include "generator/chain_source.hpp"
#include "jitbmm/chain.hpp"
#include "runtime/chain_stepped.hpp"
#include "runtime/device.hpp"
#include "runtime/tuner/chain_decisions.hpp"

namespace jitbmm {

// As ChainPlan::get, with `spec` (checked against the problem and the device) instead of default_chain_spec's,
// and with `chunk` > 0 the chunked strategy in chunks of that many steps (runtime/chain_chunked.hpp; a power of
// two, std::invalid_argument naming "chunk" where chunk_unfit says why not). The chunked strategy's products take
// stored decisions or the default, as every chain plan's; with `tune_products` (what `jitbmm tune --chain` times
// them with) they tune as the process's policy allows, and store what they find.
// With `stepped`, the stepped strategy (runtime/chain_stepped.hpp; `spec` and `chunk` unused, chunk must be 0), in
// the form `steps` names (by the rule, the products, or fused: std::invalid_argument naming "steps" where that does
// not apply).
ChainPlan chain_plan_for(const ChainProblem& problem, const ChainSpec& spec, int64_t chunk = 0,
                         bool tune_products = false, bool stepped = false, StepKernel steps = StepKernel::rule);

// ChainPlan::get, waiting for the chosen strategy instead of running a stand-in meanwhile: a sampler's forward, whose
// paths must not depend on which strategy ran it (their rounding differs).
ChainPlan settled_chain_plan(const ChainProblem& problem);

// What default_chain_spec takes for a device: its SMs from sm_90 on (clusters of blocks), else 0.
int cluster_sms(const DeviceInfo& device);

// The steps per chunk ChainPlan::get takes for `problem`: 0 (the sequential kernels) unless the chunked strategy
// was measured faster for such a problem (runtime/chain_chunked.hpp).
int64_t default_chain_chunk(const ChainProblem& problem);

// Whether ChainPlan::get takes the stepped strategy for `problem` by the rule on a GPU of `sm_count` SMs: always
// beyond kMaxSequentialChainStates states, and for an HMM's shared table where its products or its fused form were
// measured faster than the sequential kernels (many sequences of many states).
bool default_chain_stepped(const ChainProblem& problem, int sm_count);

// The variant ChainPlan::get takes: the clusters and the strategy a stored decision names for the problem's bucket on
// this device (`jitbmm tune --chain`, runtime/tuner/chain_decisions.hpp) where their registers fit and the problem
// can take its chunks, else default_chain_spec's, default_chain_chunk's and default_chain_stepped's; with the decision
// read (if any) and which of its parts were taken. Beyond kMaxSequentialChainStates states always the stepped
// strategy (the decision read for what it timed alone).
struct ChainChoice {
  ChainSpec spec;
  int64_t chunk = 0; // the chunked strategy's steps per chunk, 0 for the sequential one
  std::optional<ChainDecision> decision;
  bool from_decision = false;          // the clusters are the decision's
  bool chunk_from_decision = false;    // and the chunks (or none)
  bool stepped = false;                // the stepped strategy (spec and chunk unused)
  bool stepped_from_decision = false;  // whether stepped or not, as the decision says
  StepKernel steps = StepKernel::rule; // its form: the decision's where it names one the problem takes
};
ChainChoice choose_chain_spec(const ChainProblem& problem, const DeviceInfo& device);
inline ChainSpec chosen_chain_spec(const ChainProblem& problem, const DeviceInfo& device) {
  return choose_chain_spec(problem, device).spec;
}

} // namespace jitbmm
