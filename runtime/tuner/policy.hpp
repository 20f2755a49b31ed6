// The tuning policy: when the tuner may run ($JITBMM_TUNE, or set_tune_policy for this process).
#pragma once

#include <optional>
#include <string>

#include "jitbmm/kernel_spec.hpp"

namespace jitbmm {

// never: use stored decisions if any (exact, bucket, nearest bucket), else the default spec; never tune.
// bucket (the default): an exact decision, else the shape's bucket, else the nearest tuned bucket of the same
// family (device, semiring, dtypes, argmax, layout kinds), else tune (the first problem of a family on a GPU; a
// small problem, is_small_problem, times only its light variants).
// exact: an exact decision, else tune this exact shape.
enum class TunePolicy { never, bucket, exact };

// A problem of fewer terms (B·M·N·K) than this runs in microseconds, while a search of all its variants compiles for
// seconds: under bucket it times only a few light variants (small_problem_candidates) when it is first planned.
constexpr double kSmallProblemTerms = 1 << 22;
bool is_small_problem(const Problem& problem);
const char* tune_policy_name(TunePolicy policy);
TunePolicy parse_tune_policy(const std::string& text);  // throws std::invalid_argument naming JITBMM_TUNE
TunePolicy tune_policy_from_env();                      // set_tune_policy's, else $JITBMM_TUNE, default bucket
void set_tune_policy(std::optional<TunePolicy> policy); // for this process (the C ABI); nullopt: back to the env

// Tuning allocates, launches and synchronises, none of which may happen while the caller's stream is being captured
// into a CUDA graph. While a TuningHold made with `hold` = true lives, choices made on its thread come from stored
// decisions or the default, whatever the policy, and a default chosen so is not remembered: the first choice outside
// the hold tunes as usual. Plans that find the caller's stream capturing (SemiringBMM::get with a stream, backward)
// hold tuning this way; so do a chunked chain's calls for its products (a chain plan tunes nothing on its own), but
// with `capturing` false: they may still launch the check of a decision brought from elsewhere (choose.hpp), which a
// capture may not.
class TuningHold {
public:
  explicit TuningHold(bool hold, bool capturing = true);
  ~TuningHold();
  TuningHold(const TuningHold&) = delete;
  TuningHold& operator=(const TuningHold&) = delete;
  static bool active();    // on this thread
  static bool capturing(); // on this thread: nothing may be launched outside the caller's stream

private:
  bool previous_, previous_capturing_;
};

} // namespace jitbmm
