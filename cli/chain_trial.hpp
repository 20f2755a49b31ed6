// What `jitbmm bench --chain` and `jitbmm tune --chain` time a chain variant on: standard normal inputs of the
// problem (the potentials [B][T − 1][C][C], or the HMM form's emissions [B][T][C], transitions [C][C] and initial
// [C]), ones for grad_score, and the first sequence's score on the CPU, which every variant must reproduce.
#pragma once

#include "generator/chain_source.hpp"
#include "jitbmm/chain_problem.hpp"
#include "runtime/device_memory.hpp"

namespace jitbmm::cli {

// One variant as measured: median device times (ms) of the forward (score only), the forward that keeps what the
// backward reads (log: saved; max_plus: the best path) and that backward; whether its first score is the CPU's.
struct ChainRow {
  ChainSpec spec;
  int64_t chunk = 0; // the chunked strategy's steps per chunk, 0 for the sequential one
  bool stepped = false; // the stepped strategy (spec and chunk unused)
  double forward_ms = 0, saving_ms = 0, backward_ms = 0;
  bool checked = false;
};

class ChainTrial {
public:
  // Allocates and uploads on the current device. With `tune_products`, the chunked strategy's products tune on
  // their first call (chain_plan_for), within the warm-up: what `tune --chain` times; otherwise they run as a
  // ChainPlan::get plan's do.
  explicit ChainTrial(const ChainProblem& problem, bool tune_products = false);
  // Each launch warmed up three times, then `reps` timed runs; `chunk` and `stepped` as chain_plan_for takes them.
  ChainRow measure(const ChainSpec& spec, int reps, int64_t chunk = 0, bool stepped = false);

private:
  ChainProblem p_;
  bool tune_products_ = false;
  double want_ = 0;
  DeviceBuffer inputs_, score_, grad_, grad_score_, path_;
};

} // namespace jitbmm::cli
