// Chain kernels: a ChainSpec (what decides the text of a chain module) → CUDA source from templates/chain/.
#pragma once

#include <string>

#include "generator/emit_source.hpp"
#include "jitbmm/chain_problem.hpp"

namespace jitbmm {

// One block's recursion along the chain (templates/chain/sequential.cuh: chain_forward): `threads` per block,
// `lanes` per target state (a power of two ≤ 32).
struct ChainLoop {
  int threads = 32;
  int lanes = 1;
  bool operator==(const ChainLoop& o) const { return threads == o.threads && lanes == o.lanes; }
};

// One module per spec, three entry points (templates/chain/sequential.cuh): the forward (main entry: a block per
// sequence), "_saving" (log: the forward that saves its messages for a backward, with a second block per sequence
// computing its backward messages), and "_backward" (the edge marginals for log, the best path's indicator for
// max_plus; a block per step).
struct ChainSpec {
  Semiring semiring = Semiring::log;
  DType dtype = DType::f32;
  int C = 1;                 // states: the messages' size and every loop's bound are compile-time
  ChainLoop forward;         // the forward's block
  ChainLoop saving;          // log: "_saving"'s forward-message blocks; its block size is saving.threads
  int beta_lanes = 1;        // log: "_saving"'s backward-message blocks' lanes per state
  int backward_threads = 32; // the backward's block (a multiple of 32, at most 1024)

  bool operator==(const ChainSpec& o) const;
  // A loop's potentials sit in registers, a whole step loaded a step ahead, when they are few enough; otherwise
  // they come round by round through a ring of stages(loop) slots of shared memory (0: none, where two slots do
  // not fit), ring_bytes(loop) of dynamic shared memory.
  bool prefetch(const ChainLoop& loop) const;
  int stages(const ChainLoop& loop) const;
  unsigned ring_bytes(const ChainLoop& loop) const;
  ChainLoop beta() const { return {saving.threads, beta_lanes}; }
};

// The spec for a problem: about eight terms per lane and target state, as many threads as a step has work for.
ChainSpec default_chain_spec(const ChainProblem& problem);
// The backward messages' lanes for spec.saving's block: four, or as many as leave every group a state, more where
// their registers would spill (their potentials are read transposed: fewer lanes read more of each row at once).
int default_beta_lanes(const ChainSpec& spec);
// Throws std::invalid_argument naming the field when the spec cannot compute the problem or describes no kernel.
void check_chain_spec(const ChainSpec& spec, const ChainProblem& problem);
// "semiring=log dtype=f32 C=64 forward=512x8 saving=512x8 beta_lanes=8 backward_threads=256", printed into the
// source.
std::string to_string(const ChainSpec& spec);

GeneratedKernel emit_chain_kernel(const ChainSpec& spec);

} // namespace jitbmm
