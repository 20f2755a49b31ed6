// Chain trials: a chain problem's inputs on the device, and one candidate's timings on them, checked: its first
// sequence's score after each forward against the CPU reference, and its backward's first and last steps of that
// sequence as what every gradient is (marginals summing to 1, or the best path's indicator). What `jitbmm tune
// --chain` times and `jitbmm bench --chain` prints. As the products' trials (trials.hpp) do, they draw their inputs
// with random_values, time with runtime/timing and check scores with the reference's rule (reference::close, at the
// output dtype's tolerance).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include "jitbmm/chain_problem.hpp"
#include "jitbmm/types.hpp"
#include "runtime/device_memory.hpp"

namespace jitbmm {

// A chain trial's device buffers in the problem's form: the inputs (crf: the potentials [B][T − 1][C][C]; hmm:
// emissions [B][T][C], transitions [C][C] and initial [C]), where their gradients go, the scores, and ones for
// grad_score.
struct ChainTrialBuffers {
  const void* potentials = nullptr;
  HmmInputs hmm;
  void* grad_potentials = nullptr;
  HmmGradients grad_hmm;
  void* score = nullptr;
  const void* grad_score = nullptr;
};

// One candidate as a trial runs it: the forward, of the score only (saved and path null) or keeping what the
// backward reads (log: saved; max_plus: the best path), and the backward from that, on the trial's buffers with the
// workspace given; and the bytes of saved and of each call's workspace. The tuner sits beneath the plans, so it
// runs a variant through these calls: the plan stage makes them of a ChainPlan (runtime/chain_candidate.hpp).
struct ChainCandidate {
  std::function<void(const ChainTrialBuffers&, void* saved, int32_t* path, Stream, const Workspace&)> forward;
  std::function<void(const ChainTrialBuffers&, const void* saved, const int32_t* path, Stream, const Workspace&)>
      backward;
  std::size_t saved_bytes = 0, workspace_bytes = 0, backward_workspace_bytes = 0;
};

// One candidate as measured: median device times (ms) of the forward (score only), the forward that keeps what the
// backward reads and that backward; whether each call's results passed their checks.
struct ChainMeasure {
  double forward_ms = 0, saving_ms = 0, backward_ms = 0;
  bool checked = false;
};

class ChainTrial {
public:
  // Allocates and uploads on the current device: normal random inputs, ones for grad_score, and the first
  // sequence's score on the CPU, which every candidate must reproduce.
  explicit ChainTrial(const ChainProblem& problem);
  // Each call warmed up three times, then `reps` timed runs.
  ChainMeasure measure(const ChainCandidate& candidate, int reps);

private:
  ChainProblem p_;
  double want_ = 0;
  DeviceBuffer inputs_, score_, grad_, grad_score_, path_;
  ChainTrialBuffers buffers_;
};

} // namespace jitbmm
