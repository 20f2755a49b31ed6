// The autotuner: candidate specs for a problem, timed on the device, verified against the CPU reference, the
// fastest correct one kept on disk (kind "tune" of the disk cache) per exact shape and per shape bucket.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "jitbmm/kernel_spec.hpp"
#include "runtime/device.hpp"

namespace jitbmm {

// never: use stored decisions if any, else the default spec (never tune). bucket: an exact decision, else the
// decision of the shape's bucket, else tune. exact: an exact decision, else tune.
enum class TunePolicy { never, bucket, exact };
TunePolicy parse_tune_policy(const std::string& text); // throws std::invalid_argument naming JITBMM_TUNE
TunePolicy tune_policy_from_env();                     // $JITBMM_TUNE, default never

// Device facts that bound the candidates.
struct DeviceLimits {
  int max_threads_per_block = 1024;
  int max_static_shared_bytes = 48 * 1024;
};

// Strategies × parameters worth timing for this problem, each one fitting it (check_spec_fits) and the device.
std::vector<KernelSpec> tuning_candidates(const Problem& problem, const DeviceLimits& limits);

// Each size rounded up to a power of two: problems in one bucket share a stored decision under `bucket`.
Shape shape_bucket(const Shape& shape);

// The key of a stored decision: device (name, SM count, arch, driver), NVRTC and jitbmm versions, and the problem
// (semiring, dtypes, argmax, layout kind, and the exact shape or its bucket).
struct TuningDevice {
  std::string name, arch, nvrtc_version;
  int sm_count = 0, driver_version = 0;
};
std::string tuning_key(const Problem& problem, const TuningDevice& device, bool bucket);

struct CandidateResult {
  KernelSpec spec;
  double median_ms = -1; // -1: not timed
  std::string status;    // "ok", or why the candidate was skipped
};
struct TuneReport {
  KernelSpec best;
  std::vector<CandidateResult> candidates;
  double seconds = 0;
};

// Compiles the candidates on all cores, checks each one's output against the CPU reference on sampled elements,
// times the correct ones (median of repetitions, L2 flushed between them), re-times the best three interleaved,
// and returns the fastest. Progress goes to stderr when `progress`. Throws when no candidate is correct.
TuneReport autotune(const Problem& problem, const DeviceInfo& device, bool progress);

// The spec SemiringBMM::get uses: a stored decision the policy allows, else tuning when the policy allows it (the
// result is stored), else default_spec. A stored decision that no longer fits the problem is ignored.
KernelSpec choose_spec(const Problem& problem, const DeviceInfo& device, TunePolicy policy);

} // namespace jitbmm
