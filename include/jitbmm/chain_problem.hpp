// The chain problem: B linear chains of T positions over C states, as the chain plans (jitbmm/chain.hpp), the
// generator and the CPU reference read it.
#pragma once

#include <cstdint>

#include "jitbmm/types.hpp"

namespace jitbmm {

// B sequences of T positions over C states. potentials[b][t][c][p] (t < T − 1) scores the edge from state p at
// position t to state c at position t + 1: torch-struct's LinearChainCRF layout (batch, N − 1, C, C) with index
// order (z_{t+1}, z_t). A sequence's score is the ⊗ of its T − 1 edges' potentials, and
//   log:      score[b] = log Σ over all paths of exp(path score): the log-partition, whose gradient with respect to
//             the potentials is the edge marginals;
//   max_plus: score[b] = the best path's score (Viterbi), whose gradient is the best path's edge indicator.
// A length-1 sequence has no edge: its score is log C (log) or 0 (max_plus).
struct ChainProblem {
  Semiring semiring = Semiring::log; // log or max_plus
  DType dtype = DType::f32;          // f32 or f64
  int64_t B = 0, T = 1, C = 1;       // B may be 0; T ≥ 1; C ≥ 1 (at most kMaxChainStates)
  // Element strides of potentials for (b, t, c, p); any non-negative values (broadcast dimensions have stride 0).
  // All four 0 (the default): contiguous [B][T − 1][C][C].
  int64_t strides[4] = {0, 0, 0, 0};
  // The calls get lengths[b] (int64 on the device, each in [1, T]): sequence b ends at position lengths[b] − 1, and
  // the potentials of its later steps are not read. Without lengths every sequence has T positions.
  bool with_lengths = false;
};
constexpr int64_t kMaxChainStates = 1024;

// Throws std::invalid_argument naming the field when the problem is not one jitbmm computes: a semiring other
// than log and max_plus, a dtype other than f32 and f64, T < 1, C outside [1, kMaxChainStates], B < 0, negative
// strides, or a potentials tensor beyond 2^62 bytes.
void check_chain_problem(const ChainProblem& problem);
// The element stride of potentials along (b, t, c, p), contiguous strides filled in.
void chain_strides(const ChainProblem& problem, int64_t out[4]);

} // namespace jitbmm
