// The chain problems the reference's host tests build: f64, contiguous, of one semiring and size.
#pragma once

#include <cstdint>

#include "jitbmm/chain_problem.hpp"

namespace jitbmm::test {

inline ChainProblem chain(Semiring semiring, int64_t B, int64_t T, int64_t C, bool with_lengths = false) {
  ChainProblem p;
  p.semiring = semiring;
  p.dtype = DType::f64;
  p.B = B, p.T = T, p.C = C;
  p.with_lengths = with_lengths;
  return p;
}

} // namespace jitbmm::test
