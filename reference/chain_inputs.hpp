// What the chain references share: the checks of a problem of either form and its lengths.
#pragma once

#include <cstdint>

#include "jitbmm/chain_problem.hpp"

namespace jitbmm::reference {

// The problem valid and of the CRF form, its work within what the CPU reference computes (kMaxReferenceTerms terms,
// kMaxReferenceOutputs messages a sequence), and its lengths given exactly where the problem says, each in [1, T];
// std::invalid_argument naming what is not.
void check_chain_inputs(const ChainProblem& problem, const int64_t* lengths);
// The same for the HMM form, its tables given (transitions may be null where T = 1).
void check_hmm_inputs(const ChainProblem& problem, const HmmInputs& hmm, const int64_t* lengths);

} // namespace jitbmm::reference
