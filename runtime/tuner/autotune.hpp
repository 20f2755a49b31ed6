// The autotuner's run: compile the candidates in parallel, check each against the CPU reference, time the correct
// ones, rank them (the leaders re-timed interleaved), and store the winner as a decision.
#pragma once

#include <string>
#include <vector>

#include "jitbmm/kernel_spec.hpp"
#include "runtime/device.hpp"
#include "runtime/tuner/tuning_db.hpp"

namespace jitbmm {

struct TuneReport {
  KernelSpec best;
  std::vector<CandidateResult> candidates;
  double seconds = 0;
  std::string reason; // why these candidates were timed (the caller's words, stored with the decision)
};

// Compiles the candidates on all cores, checks each one's output against the CPU reference on sampled elements,
// times the correct ones (median of repetitions, L2 flushed between them), re-times the leaders interleaved (the
// best three, and up to eight within 30% of the best), and returns the fastest. Progress goes to stderr when `progress`. Throws when no candidate is correct.
// Backward passes are tuned the same way: each candidate's gradient is checked against reference::gradient_element.
// `candidates`, when given, replaces the enumeration (a quick check between a few specs).
// `range`: the inputs candidates are timed and checked on (tuning_db.hpp).
TuneReport autotune(const Problem& problem, const DeviceInfo& device, bool progress, Pass pass = Pass::forward,
                    const std::vector<KernelSpec>& candidates = {}, InputRange range = InputRange::normal);

// The candidates autotune times for `problem` on `device` when none are given (tuning_candidates, bounded by what
// the device allows).
std::vector<KernelSpec> device_candidates(const Problem& problem, const DeviceInfo& device, Pass pass = Pass::forward);

// The decision a tuning result makes for the exact shape: its winner, and its ranking (fastest first, up to
// kRankingKept) measured on that shape.
Decision decision_from(const Problem& problem, const TuningDevice& device, const TuneReport& report,
                       Pass pass = Pass::forward, InputRange range = InputRange::normal);

// Stores a tuning result for the exact shape and, when `bucket`, for its bucket too.
// `exact` = false stores the bucket's decision only (a quick check is no tuning of the exact shape). Whether the disk
// cache kept every decision asked for (false without one, or where a write failed).
bool store_decision(const Problem& problem, const DeviceInfo& device, const TuneReport& report, bool bucket,
                    Pass pass = Pass::forward, bool exact = true, InputRange range = InputRange::normal);

} // namespace jitbmm
