// What the chain plan's files share (runtime/chain_plan.cpp, runtime/chain_hmm_backward.cpp): a plan's state and
// the checks of its calls.
#pragma once

#include <cstdint>
#include <memory>

#include "generator/chain_source.hpp"
#include "jitbmm/chain.hpp"
#include "runtime/chain_strategy.hpp"
#include "runtime/device.hpp"
#include "runtime/tuner/policy.hpp"
#include "templates/chain/params.cuh"

namespace jitbmm {

struct ChainPlan::Impl {
  ChainProblem problem;
  ChainSpec spec;
  std::shared_ptr<const DeviceInfo> device;
  std::shared_ptr<const ChainStrategy> strategy; // what the plan's calls run (runtime/chain_strategy.hpp)
  int64_t strides[4] = {}; // the potentials' (b, t, c, p); the HMM form's transitions as potentials (t: 0)
  HmmStrides hmm{};
};

namespace chain_detail {

// What a backward reads of its forward: log its `saved`, max_plus its best path.
void check_backward_reads(const ChainProblem& p, const void* saved, const int32_t* path, bool empty);
// The call's form is the problem's (naming the argument of the other form where not).
void check_form(const ChainProblem& p, ChainForm form);
// The HMM form's tables as the kernels read them: the transitions in the potentials' place.
jb::ChainParams hmm_params(const ChainPlan::Impl& im, const HmmInputs& hmm, bool empty);
void check_lengths(const ChainProblem& p, const int64_t* lengths, bool empty);
// The lengths, the best path and the pieces of `saved` into params, each aligned as its elements need.
void attach(jb::ChainParams& params, const ChainProblem& p, const int64_t* lengths, const int32_t* path,
            const void* saved);

// What a call holds from its start, before its workspace is checked: on a stream being captured into a CUDA graph,
// nothing it plans (the chunked strategy's products, on a first use that may come in that check) tunes or launches
// outside the capture. In the plan's device's context, whichever is current on the calling thread.
class CallHold {
public:
  CallHold(const ChainPlan::Impl& im, Stream stream);

private:
  ScopedContext scope_;
  TuningHold hold_;
};

} // namespace chain_detail

} // namespace jitbmm
