// What the chain distributions (ChainExpectation, ChainSampler, ChainKBest) check alike: the problem their kernels
// take, and the potentials and lengths of a call.
#pragma once

#include <cstdint>

#include "jitbmm/chain_problem.hpp"

namespace jitbmm {

// The CRF form with contiguous potentials in `semiring`, at most `max_states` states; std::invalid_argument naming
// the field otherwise, `what` saying whose limit it is ("expectations", "samples", "the best paths").
void check_distribution_problem(const ChainProblem& p, Semiring semiring, int64_t max_states, const char* what);

// A call's potentials (null only where `no_edges`) and lengths (as the problem says; null where `empty`), and their
// alignment; std::invalid_argument naming the argument.
void check_distribution_inputs(const ChainProblem& p, const void* potentials, const int64_t* lengths, bool empty,
                               bool no_edges);

} // namespace jitbmm
