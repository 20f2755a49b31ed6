// Chain kernels: a ChainSpec (what decides the text of a chain module) → CUDA source from templates/chain/.
#pragma once

#include <string>

#include "generator/emit_source.hpp"
#include "jitbmm/chain_problem.hpp"

namespace jitbmm {

// One module per spec: the forward (main entry: a block per sequence, and for log with saved messages a second one
// computing its backward messages) and the backward ("_backward": the edge marginals for log, the best path's
// indicator for max_plus; a block per step) (templates/chain/sequential.cuh).
struct ChainSpec {
  Semiring semiring = Semiring::log;
  DType dtype = DType::f32;
  int C = 1;                  // states: the messages' size and every loop's bound are compile-time
  int threads = 32;           // the forward's block (a multiple of 32, at most 1024)
  int lanes = 1;              // the forward's lanes per target state (a power of two ≤ 32)
  int backward_threads = 32;  // the backward's block (a multiple of 32, at most 1024)

  bool operator==(const ChainSpec& o) const;
  // Registers hold a whole step's potentials (loaded a step ahead) when they are few enough.
  bool prefetch() const;
  // Otherwise the forward fetches them round by round through a ring of stages() slots in shared memory (0: none,
  // where two slots do not fit), forward_shared_bytes() of dynamic shared memory.
  int stages() const;
  unsigned forward_shared_bytes() const;
};

// The spec for a problem: about eight terms per lane and target state, as many threads as a step has work for.
ChainSpec default_chain_spec(const ChainProblem& problem);
// Throws std::invalid_argument naming the field when the spec cannot compute the problem or describes no kernel.
void check_chain_spec(const ChainSpec& spec, const ChainProblem& problem);
// "semiring=log dtype=f32 C=64 threads=512 lanes=8 backward_threads=512", printed into the source.
std::string to_string(const ChainSpec& spec);

GeneratedKernel emit_chain_kernel(const ChainSpec& spec);

} // namespace jitbmm
