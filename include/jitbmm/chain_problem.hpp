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
//
// The HMM form (form = hmm) gives the same chain by its tables instead, and no potential of size B·T·C² is ever
// formed: emissions[b][t][c] (the score of state c at position t), transitions[c][p] (from p to c, the potentials'
// order; [B][C][C] with batched_transitions) and initial[p] ([B][C] with batched_initial). The step from t to
// t + 1 has the potentials transitions[c][p] + emissions[t + 1][c], and the first position adds initial[p] +
// emissions[0][p]; so a length-1 sequence scores ⊕_p initial[p] ⊗ emissions[0][p]. The gradients are those of
// the three tables: the state marginals (log) or the best path's states (max_plus) for emissions and initial,
// the expected (log) or the best path's (max_plus) transition counts, summed over the steps (and the sequences
// unless batched_transitions), for transitions.
enum class ChainForm { crf, hmm };

struct ChainProblem {
  Semiring semiring = Semiring::log; // log or max_plus
  // The inputs' dtype: f32, f64, f16 or bf16. Half types are read into f32 and computed in it: the score, alpha,
  // grad_score and the saved messages are then f32 (the accumulator's dtype, chain_output_dtype), the inputs'
  // gradients in the inputs' dtype.
  DType dtype = DType::f32;
  int64_t B = 0, T = 1, C = 1;       // B in [0, kMaxChainSequences]; T ≥ 1; C in [1, kMaxChainStates]
  // Element strides of potentials for (b, t, c, p); any non-negative values (broadcast dimensions have stride 0).
  // All four 0 (the default): contiguous [B][T − 1][C][C].
  int64_t strides[4] = {0, 0, 0, 0};
  // The calls get lengths[b] (int64 on the device, each in [1, T]): sequence b ends at position lengths[b] − 1, and
  // the potentials of its later steps are not read. Without lengths every sequence has T positions.
  bool with_lengths = false;
  // The input form. crf: the potentials above (the fields below must then keep their defaults). hmm: the tables
  // below (strides must then be all 0).
  ChainForm form = ChainForm::crf;
  bool batched_transitions = false; // hmm: transitions [B][C][C], one table per sequence (else [C][C], shared)
  bool batched_initial = false;     // hmm: initial [B][C] (else [C], shared)
  // hmm: element strides, any non-negative values; all 0 (the default) means contiguous. emissions (b, t, c);
  // transitions (b, c, p), the b stride read only with batched_transitions; initial (b, c), b only with
  // batched_initial.
  int64_t emission_strides[3] = {0, 0, 0};
  int64_t transition_strides[3] = {0, 0, 0};
  int64_t initial_strides[2] = {0, 0};
};
// The most states a chain may have; the sequential kernels, which keep a sequence's messages in one block's shared
// memory, take at most kMaxSequentialChainStates (more run in the stepped strategy).
constexpr int64_t kMaxChainStates = 16384;
constexpr int64_t kMaxSequentialChainStates = 1024;
// The stepped strategy launches a product a position from the host: it takes chains of at most 2^24 positions.
constexpr int64_t kMaxSteppedChainLength = int64_t(1) << 24;
// A forward that saves its messages launches two blocks a sequence (more with clusters), and a grid holds fewer
// than 2^31 blocks.
constexpr int64_t kMaxChainSequences = (int64_t(1) << 30) - 1;

// The HMM form's tables (ChainProblem::form = hmm), laid out as the problem's hmm strides say: device memory for
// ChainPlan, host memory for the reference.
struct HmmInputs {
  const void* emissions = nullptr;   // [B][T][C]
  const void* transitions = nullptr; // [C][C], or [B][C][C] with batched_transitions
  const void* initial = nullptr;     // [C], or [B][C] with batched_initial
};
// Their gradients, contiguous, in the problem's dtype; a null one is not computed.
struct HmmGradients {
  void* emissions = nullptr;   // [B][T][C]
  void* transitions = nullptr; // [C][C], or [B][C][C] with batched_transitions
  void* initial = nullptr;     // [C], or [B][C] with batched_initial
};

// The dtype of score, alpha and grad_score: the problem's, f32 for half types.
DType chain_output_dtype(const ChainProblem& problem);

// Throws std::invalid_argument naming the field when the problem is not one jitbmm computes: a semiring other
// than log and max_plus, a dtype that is not a float, T < 1, C outside [1, kMaxChainStates], B outside
// [0, kMaxChainSequences], more than kMaxSteppedChainLength positions beyond kMaxSequentialChainStates states (no
// strategy runs that), negative strides, an input beyond 2^62 bytes, potentials' strides given to the hmm form,
// or the hmm form's fields (batched_*, *_strides of the tables) given to the crf form.
void check_chain_problem(const ChainProblem& problem);
// The element stride of potentials along (b, t, c, p), contiguous strides filled in.
void chain_strides(const ChainProblem& problem, int64_t out[4]);
// The hmm form's element strides, contiguous ones filled in: emissions (b, t, c), transitions (b, c, p) and
// initial (b, c), with b strides 0 for shared tables.
struct HmmStrides {
  int64_t emissions[3], transitions[3], initial[2];
};
HmmStrides hmm_strides(const ChainProblem& problem);

} // namespace jitbmm
