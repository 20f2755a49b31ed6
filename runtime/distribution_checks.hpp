// What the chain distributions (ChainExpectation, ChainSampler, ChainKBest) check alike: the problem their kernels
// take, and the potentials (or the HMM form's tables, as the chain plan checks them too) and lengths of a call.
#pragma once

#include <cstdint>

#include "jitbmm/chain_problem.hpp"

namespace jitbmm {

// The CRF form with contiguous potentials (or, where `hmm_form`, the HMM form too, its tables at any strides) in
// `semiring`, at most `max_states` states; std::invalid_argument naming the field otherwise, `what` saying whose
// limit it is ("expectations", "samples", "the best paths").
void check_distribution_problem(const ChainProblem& p, Semiring semiring, int64_t max_states, const char* what,
                                bool hmm_form = false);

// A call's potentials (null only where `no_edges`) and lengths (as the problem says; null where `empty`), and their
// alignment; std::invalid_argument naming the argument. A call of the other form than the problem's is refused,
// naming `potentials` (an HMM problem) or `hmm` (a CRF one).
void check_distribution_inputs(const ChainProblem& p, const void* potentials, const int64_t* lengths, bool empty,
                               bool no_edges);
// The same for the HMM form's tables (check_hmm_tables) and lengths.
void check_distribution_inputs(const ChainProblem& p, const HmmInputs& hmm, const int64_t* lengths, bool empty);

// The HMM form's tables of a call, as every HMM call takes them: emissions and initial (null only where `empty`),
// transitions (also where T is 1, which reads none), each aligned to its dtype; std::invalid_argument naming it as
// `name`.emissions and so on.
void check_hmm_tables(const ChainProblem& p, const HmmInputs& hmm, bool empty, const char* name = "hmm");

// The HMM form's gradients of a call, each aligned to its dtype (null: not asked for); std::invalid_argument naming it
// as `name`.emissions and so on.
void check_hmm_gradients(const ChainProblem& p, const HmmGradients& grads, const char* name = "grads");

} // namespace jitbmm
