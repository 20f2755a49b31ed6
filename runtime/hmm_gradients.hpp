// What every backward of the HMM form (ChainPlan's, ChainExpectation's) does alike with its tables' gradients.
#pragma once

#include "jitbmm/chain_problem.hpp"
#include "runtime/driver_api.hpp"

namespace jitbmm {

// With no sequence (B = 0) a shared table's gradient is a sum of nothing: zeros for the shared transitions and
// initial tables asked for, on `stream` in the current context; a per-sequence table's gradient is empty.
void clear_shared_hmm_gradients(const ChainProblem& p, const HmmGradients& grads, CUstream stream);

} // namespace jitbmm
