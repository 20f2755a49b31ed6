#include "runtime/distribution_checks.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "runtime/plan_impl.hpp" // check_pointer, check_alignment

namespace jitbmm {

void check_distribution_problem(const ChainProblem& p, Semiring semiring, int64_t max_states, const char* what) {
  check_chain_problem(p);
  if (p.semiring != semiring)
    throw std::invalid_argument(std::string("chain.semiring: ") + what + " are " + semiring_info(semiring).name +
                                "'s (got " + semiring_info(p.semiring).name + ")");
  if (p.form != ChainForm::crf) throw std::invalid_argument(std::string("chain.form: ") + what + " take the crf form");
  if (std::any_of(std::begin(p.strides), std::end(p.strides), [](int64_t s) { return s != 0; }))
    throw std::invalid_argument(std::string("chain.strides: ") + what + " take contiguous potentials (strides all 0)");
  if (p.C > max_states)
    throw std::invalid_argument(std::string("chain.C: ") + what + " take at most " + std::to_string(max_states) +
                                " states, got " + std::to_string(p.C));
}

void check_distribution_inputs(const ChainProblem& p, const void* potentials, const int64_t* lengths, bool empty,
                               bool no_edges) {
  check_pointer(potentials, "potentials", no_edges);
  if (p.with_lengths)
    check_pointer(lengths, "lengths", empty);
  else if (lengths)
    throw std::invalid_argument("lengths: given, but the problem was made without with_lengths");
  check_alignment(potentials, "potentials", dtype_info(p.dtype).size_bytes);
  check_alignment(lengths, "lengths", 8);
}

} // namespace jitbmm
