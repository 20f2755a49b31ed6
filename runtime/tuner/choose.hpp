// The choice cascade: which spec a plan uses — a stored decision the policy allows (exact, bucket, nearest
// bucket), else tuning now, else the default — and planning again without a stored spec that fails to compile.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "jitbmm/kernel_spec.hpp"
#include "runtime/device.hpp"
#include "runtime/tuner/policy.hpp"
#include "runtime/tuner/decisions_file.hpp"
#include "runtime/tuner/tuning_db.hpp"

namespace jitbmm {

class DiskCache;

// Where a spec came from, for inspect --tuned.
struct Choice {
  KernelSpec spec;
  std::string source; // "exact", "bucket", "nearest bucket", "tuned now", "family model: ...", "default"
  std::optional<Decision> decision; // the stored decision used, if any
  bool stored = false;              // the spec is the stored decision's, not yet compiled in this process
  bool held = false; // the default because tuning was held (TuningHold) or memory was short: not remembered
};
// The spec SemiringBMM::get uses: a stored decision the policy allows, else tuning when the policy allows it and
// the problem is tunable() (the result is stored), else default_spec. A stored decision that does not parse or no
// longer fits the problem is ignored with one warning naming it; one whose spec is in `rejected` (it failed to
// compile or load: plan_with_choice) is skipped. Remembered per process, so repeated get() calls read the disk
// once; a choice made with specs rejected replaces the remembered one. While a TuningHold is active on the thread,
// or while the device or host has too little free memory for the problem's trial (trial_memory_refusal), a problem
// that would be tuned gets the default instead, and that choice is not remembered. A tuning that fails (no candidate
// correct, an allocation or launch failing) gives the default too, with one warning: remembered in this process,
// stored nowhere. A key is tuned once per process: a thread planning a problem of a key another thread tunes (or
// tuned) waits for that tuning and takes its decision, or the default after its failure, without tuning again.
// Under bucket a small problem (is_small_problem) without a decision times only its light variants.
Choice choose(const Problem& problem, const DeviceInfo& device, TunePolicy policy, Pass pass = Pass::forward,
              const std::vector<KernelSpec>& rejected = {});

// The kernels choose() would load for `problem`'s `pass` without tuning now, for building them ahead
// (runtime/tuner/build_ahead.hpp): the spec it made already in this process, else a stored decision's (with the
// kernels of its check when it was brought from elsewhere), else, where it would not tune (the policy, a
// TuningHold on this thread, a problem not tunable), the default. None where it would tune: a tuning compiles its
// candidates on the CPU pool itself.
std::vector<KernelSpec> kernels_ahead(const Problem& problem, const DeviceInfo& device, TunePolicy policy,
                                      Pass pass = Pass::forward);

// What choose() settled in this process (by a stored decision or tuning; not defaults, not choices held in a
// capture), per pass and problem (for a backward pass its grad_problem), once each: what share_choices exports.
struct MadeChoice {
  Problem problem;
  Pass pass = Pass::forward;
  KernelSpec spec;
};
std::vector<MadeChoice> choices_made();
// Forgets every choice made in this process, so the next choose() reads the stored decisions again.
void forget_choices();
// How many times forget_choices has run in this process: a plan made for a choice before it is not one to hand out
// after it (the products' stand-in registry keys its plans with it).
uint64_t choices_generation();

// The stored-decision steps of choose()'s cascade, without the device: the exact decision, then (unless `policy`
// is exact) the bucket's, then the nearest tuned bucket within kNearBucketDistance. Decisions that do not parse or
// fit are skipped with a warning, those whose spec is in `rejected` silently. Beyond that distance choose() tunes
// under `bucket`: the family model's best variants when the family (or a sibling) has been tuned, else everything.
std::optional<Choice> stored_choice(DiskCache* disk, const Problem& problem, const TuningDevice& device,
                                    TunePolicy policy, Pass pass, const std::vector<KernelSpec>& rejected,
                                    InputRange range = InputRange::normal, const DecisionSet* shipped = nullptr);

// The forward variant for `problem` on wide-range inputs (InputRange::wide), which a plan whose repairs dominate
// moves to (runtime/repair_watch.hpp): a stored wide decision as stored_choice finds one, else, unless the policy is
// never or tuning is held, a tuning now of `candidates` on wide inputs (stored for the exact shape and its bucket,
// one process of the machine at a time like any tuning); nothing when neither is possible.
std::optional<Choice> choose_wide(const Problem& problem, const DeviceInfo& device, TunePolicy policy,
                                  const std::vector<KernelSpec>& candidates);

inline KernelSpec choose_spec(const Problem& problem, const DeviceInfo& device, TunePolicy policy) {
  return choose(problem, device, policy).spec;
}

} // namespace jitbmm
