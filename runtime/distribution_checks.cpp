#include "runtime/distribution_checks.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "runtime/plan_impl.hpp" // check_pointer, check_alignment

namespace jitbmm {

namespace {

void check_lengths_pointer(const ChainProblem& p, const int64_t* lengths, bool empty) {
  if (p.with_lengths)
    check_pointer(lengths, "lengths", empty);
  else if (lengths)
    throw std::invalid_argument("lengths: given, but the problem was made without with_lengths");
  check_alignment(lengths, "lengths", 8);
}

} // namespace

void check_distribution_problem(const ChainProblem& p, Semiring semiring, int64_t max_states, const char* what,
                                bool hmm_form) {
  check_chain_problem(p);
  if (p.semiring != semiring)
    throw std::invalid_argument(std::string("chain.semiring: ") + what + " are " + semiring_info(semiring).name +
                                "'s (got " + semiring_info(p.semiring).name + ")");
  if (p.form != ChainForm::crf && !hmm_form)
    throw std::invalid_argument(std::string("chain.form: ") + what + " take the crf form");
  if (std::any_of(std::begin(p.strides), std::end(p.strides), [](int64_t s) { return s != 0; }))
    throw std::invalid_argument(std::string("chain.strides: ") + what + " take contiguous potentials (strides all 0)");
  if (p.C > max_states)
    throw std::invalid_argument(std::string("chain.C: ") + what + " take at most " + std::to_string(max_states) +
                                " states, got " + std::to_string(p.C));
}

void check_distribution_inputs(const ChainProblem& p, const void* potentials, const int64_t* lengths, bool empty,
                               bool no_edges) {
  if (p.form != ChainForm::crf)
    throw std::invalid_argument("potentials: the plan's problem has the hmm form (pass HmmInputs)");
  check_pointer(potentials, "potentials", no_edges);
  check_alignment(potentials, "potentials", dtype_info(p.dtype).size_bytes);
  check_lengths_pointer(p, lengths, empty);
}

void check_hmm_tables(const ChainProblem& p, const HmmInputs& hmm, bool empty, const char* name) {
  const int bytes = dtype_info(p.dtype).size_bytes;
  const std::string n = name, emissions = n + ".emissions", transitions = n + ".transitions", initial = n + ".initial";
  check_pointer(hmm.emissions, emissions.c_str(), empty);
  check_pointer(hmm.transitions, transitions.c_str(), empty || p.T == 1);
  check_pointer(hmm.initial, initial.c_str(), empty);
  check_alignment(hmm.emissions, emissions.c_str(), bytes);
  check_alignment(hmm.transitions, transitions.c_str(), bytes);
  check_alignment(hmm.initial, initial.c_str(), bytes);
}

void check_hmm_gradients(const ChainProblem& p, const HmmGradients& grads, const char* name) {
  const int bytes = dtype_info(p.dtype).size_bytes;
  const std::string n = name;
  check_alignment(grads.emissions, (n + ".emissions").c_str(), bytes);
  check_alignment(grads.transitions, (n + ".transitions").c_str(), bytes);
  check_alignment(grads.initial, (n + ".initial").c_str(), bytes);
}

void check_distribution_inputs(const ChainProblem& p, const HmmInputs& hmm, const int64_t* lengths, bool empty) {
  if (p.form != ChainForm::hmm)
    throw std::invalid_argument("hmm: the plan's problem has the crf form (pass the potentials)");
  check_hmm_tables(p, hmm, empty);
  check_lengths_pointer(p, lengths, empty);
}

} // namespace jitbmm
