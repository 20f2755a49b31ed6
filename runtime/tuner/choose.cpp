// The choice cascade: a stored decision (exact, bucket, nearest bucket: stored_choice.cpp; one brought from another
// machine checked first), else tuning now, else the default spec; remembered per process (planning again without a
// stored spec that fails to compile: plan_with_choice.cpp).
#include "runtime/tuner/choose.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <sstream>
#include <stdexcept>

#include "cache/disk_cache.hpp"
#include "jitbmm/errors.hpp"
#include "runtime/grad_launch.hpp"
#include "support/log.hpp"
#include "support/process_share.hpp"
#include "runtime/tuner/autotune.hpp"
#include "runtime/tuner/family_model.hpp"
#include "runtime/tuner/search_space.hpp"
#include "runtime/tuner/once_per_key.hpp"
#include "runtime/tuner/shipped_decisions.hpp"
#include "runtime/tuner/trials.hpp"
#include "runtime/tuner/policy.hpp"

namespace jitbmm {

namespace {

// How long a process waits for another's tuning of the same key before tuning itself (a hung holder).
constexpr std::chrono::seconds kTuneLockWait{600};

// The machine-wide tuning lock on `key` (cache/key_lock.hpp): waited for up to kTuneLockWait, announced once (by
// local rank 0) while another process holds it; without a writable cache directory there is none to take.
KeyLock lock_tuning(DiskCache* disk, const std::string& key, const std::string& what) {
  if (!disk) return KeyLock::unavailable("no disk cache");
  KeyLock held = disk->lock(key, kTuneLockWait, [&](const std::string& holder) {
    if (is_local_leader())
      log_message(LogLevel::info, "waiting for " + KeyLock::holder_words(holder) + ", which is tuning " + what +
                                      " (one tuning per machine)");
  });
  if (held.state() == KeyLock::State::timed_out)
    log_message(LogLevel::warn, "tuning " + what + " without the machine-wide lock: " + held.why());
  else if (!held.held() && log_enabled(LogLevel::debug))
    log_message(LogLevel::debug, "tuning " + what + " without the machine-wide lock: " + held.why());
  return held;
}

// Whether a stored choice's decision was tuned on another machine: shipped with jitbmm, or imported.
bool brought_in(const Choice& c) {
  return c.source.rfind("shipped ", 0) == 0 || (c.decision && !c.decision->origin.empty());
}

bool is_rejected(const std::vector<KernelSpec>& rejected, const KernelSpec& spec) {
  return std::find(rejected.begin(), rejected.end(), spec) != rejected.end();
}

// The tunings of this process, per tuning key: each runs once, whichever threads plan problems of its key; nothing
// when the tuning kept no choice (choose_wide's). A failed one is remembered as its exception, so the default follows
// without a second tuning.
OncePerKey<std::optional<Choice>> g_tunings;

// Tunes by `tune` under `key` unless another thread of this process tunes or has tuned it: then what that tuning
// settled, for this problem (`p`, `rejected`): its stored decision, else its variant where it fits; else nothing.
std::optional<Choice> tune_once(const std::string& key, const std::string& what,
                                const std::function<std::optional<Choice>()>& tune, const Problem& p,
                                const TuningDevice& td, TunePolicy policy, Pass pass,
                                const std::vector<KernelSpec>& rejected, InputRange range) {
  bool tuned_here = false;
  const std::optional<Choice> outcome = g_tunings.get(
      key,
      [&] {
        tuned_here = true;
        return tune();
      },
      [&] {
        if (is_local_leader())
          log_message(LogLevel::info, "waiting for another thread of this process, which is tuning " + what);
      });
  if (tuned_here) return outcome;
  DiskCache* disk = DiskCache::process_cache();
  if (auto c = stored_choice(disk, p, td, policy, pass, rejected, range)) {
    c->source = "decided by another thread (" + c->source + ")";
    return c;
  }
  if (!outcome) return std::nullopt;
  const auto spec = fitting(outcome->spec, p);
  if (!spec || is_rejected(rejected, *spec)) return std::nullopt;
  return Choice{*spec, "tuned by another thread (" + outcome->source + ")", {}};
}

} // namespace

namespace {

// Decisions already made in this process, per context, problem, pass and policy; and, per pass and problem, the
// choices to share (choices_made).
std::mutex g_made_mutex;
std::atomic<uint64_t> g_generation{0}; // forget_choices's count
std::map<std::string, Choice> g_made;
std::map<std::string, MadeChoice> g_settled;

std::optional<Choice> usable_stored_choice(const Problem& p, const DeviceInfo& device, TunePolicy policy, Pass pass,
                                           std::vector<KernelSpec>& refused, InputRange range,
                                           std::optional<Choice>& unchecked);

// Tunes `p` now (one tuning per key on the machine; a new bucket of a tuned family times the family model's
// candidates) and stores the decision.
Choice tune_machine_wide(const Problem& p, const DeviceInfo& device, TunePolicy policy, Pass pass,
                         const std::vector<KernelSpec>& rejected, const KernelSpec& fallback) {
  DiskCache* disk = DiskCache::process_cache();
  const TuningDevice td = tuning_device(device);
  // One tuning per key on the machine: the processes that find it taken wait, then read the holder's decision.
  const KeyLock held = lock_tuning(disk, tuning_key(p, td, policy == TunePolicy::bucket, pass), describe(p));
  // What another process stored meanwhile: its tuning, or a decision imported from elsewhere (checked first, as any
  // brought-in decision is).
  std::vector<KernelSpec> refused = rejected;
  if (held.held() || held.waited()) {
    std::optional<Choice> unchecked;
    if (auto c = usable_stored_choice(p, device, policy, pass, refused, InputRange::normal, unchecked)) {
      c->source = "decided by another process (" + c->source + ")";
      return *c;
    }
  }
  // A variant refused by its check (usable_stored_choice) is not timed again: a defect that shows now and then
  // could win.
  auto kept = [&](std::vector<KernelSpec> specs) {
    const auto is_refused = [&](const KernelSpec& s) { return is_rejected(refused, s); };
    specs.erase(std::remove_if(specs.begin(), specs.end(), is_refused), specs.end());
    return specs;
  };
  if (policy == TunePolicy::bucket && is_small_problem(p)) {
    // A first plan must not wait seconds of compiles for a product that runs in microseconds: a small problem times
    // only the default and the light variants (search_space.hpp), a fraction of a second of compiles.
    const std::vector<KernelSpec> timed = kept(small_problem_candidates(device_candidates(p, device, pass), fallback));
    if (timed.empty()) return {fallback, "small problem: every light variant refused by its check", {}};
    TuneReport report = autotune(p, device, false, pass, timed);
    report.reason = "small problem: the default and " + std::to_string(timed.size() - 1) + " light variants timed";
    store_decision(p, device, report, true, pass, false); // for the bucket: JITBMM_TUNE=exact still searches all
    return {report.best, report.reason, {}};
  }
  if (policy == TunePolicy::bucket) {
    // A new bucket of a family (or of its siblings) already tuned: time the variants the family model ranks
    // best, whose binaries usually exist already, instead of the whole search space (family_model.hpp).
    const std::vector<std::string> families = related_families(p, td, pass);
    std::vector<Decision> related = families_buckets(disk, families);
    for (Decision& d : set_buckets(shipped_decisions(), families)) related.push_back(std::move(d));
    const std::vector<KernelSpec> timed =
        kept(model_candidates(related, p, fallback, untimed_variants(related, p, device_candidates(p, device, pass))));
    if (!timed.empty()) {
      TuneReport report = autotune(p, device, false, pass, timed);
      report.reason = "family model: " + std::to_string(timed.size()) +
                      " variants timed, the best predicted from " + std::to_string(related.size()) +
                      " tuned buckets, the default and any no bucket timed";
      store_decision(p, device, report, true, pass, false);
      return {report.best, report.reason, {}};
    }
  }
  // Progress from the machine's one tuner (it holds the lock), else (no lock) from local rank 0 only.
  const std::vector<KernelSpec> left =
      refused.empty() ? std::vector<KernelSpec>{} : kept(device_candidates(p, device, pass));
  if (!refused.empty() && left.empty()) return {fallback, "default: every variant refused by its check", {}};
  TuneReport report = autotune(p, device, held.held() || is_local_leader(), pass, left);
  report.reason = "tuned: the whole search space (" + std::to_string(report.candidates.size()) + " variants) timed";
  store_decision(p, device, report, policy == TunePolicy::bucket, pass);
  return {report.best, "tuned now", {}};
}

// tune_machine_wide once per process and key; a thread that finds nothing it can use in another thread's tuning
// takes the default rather than tuning again.
Choice tune_now(const Problem& p, const DeviceInfo& device, TunePolicy policy, Pass pass,
                const std::vector<KernelSpec>& rejected, const KernelSpec& fallback) {
  const TuningDevice td = tuning_device(device);
  const std::optional<Choice> c = tune_once(
      tuning_key(p, td, policy == TunePolicy::bucket, pass), describe(p),
      [&] { return std::optional<Choice>(tune_machine_wide(p, device, policy, pass, rejected, fallback)); }, p, td,
      policy, pass, rejected, InputRange::normal);
  return c ? *c : Choice{fallback, "default: another thread's tuning of this bucket does not fit it", {}};
}

} // namespace

std::vector<MadeChoice> choices_made() {
  std::lock_guard<std::mutex> lock(g_made_mutex);
  std::vector<MadeChoice> out;
  for (const auto& [id, c] : g_settled) out.push_back(c);
  return out;
}

void forget_choices() {
  std::lock_guard<std::mutex> lock(g_made_mutex);
  g_made.clear();
  g_settled.clear();
  g_tunings.forget();
  g_generation.fetch_add(1, std::memory_order_acq_rel);
}

uint64_t choices_generation() { return g_generation.load(std::memory_order_acquire); }

namespace {

// The key of a choice remembered in this process: `p` is the pass's own problem (grad_problem for a backward).
std::string choice_id(const Problem& p, const DeviceInfo& device, TunePolicy policy, Pass pass) {
  std::ostringstream id;
  id << device.context_id << ' ' << int(policy) << ' ' << pass_name(pass) << ' ' << describe(p) << ' ' << p.with_argmax
     << ' ' << dtype_info(p.output_dtype()).name;
  return id.str();
}

bool may_tune(const Problem& p, TunePolicy policy, Pass pass) {
  return policy != TunePolicy::never && tunable(p, pass);
}

// The stored choice of `range` that may serve `p`. A decision brought from elsewhere (shipped with jitbmm, imported)
// was tuned on another machine: its kernel is checked against the CPU reference first, as a tuned candidate is, and
// one that fails is warned about and passed over like a stale decision (added to `refused`, so that a tuning that
// follows leaves it out too). `unchecked` receives one that cannot be checked now (the caller's stream is being
// captured), which is not returned.
std::optional<Choice> usable_stored_choice(const Problem& p, const DeviceInfo& device, TunePolicy policy, Pass pass,
                                           std::vector<KernelSpec>& refused, InputRange range,
                                           std::optional<Choice>& unchecked) {
  DiskCache* disk = DiskCache::process_cache();
  const TuningDevice td = tuning_device(device);
  const DecisionSet* shipped = range == InputRange::normal ? &shipped_decisions() : nullptr;
  while (auto c = stored_choice(disk, p, td, policy, pass, refused, range, shipped)) {
    if (!brought_in(*c)) return c;
    if (TuningHold::capturing()) {
      unchecked = c;
      return std::nullopt;
    }
    std::string wrong;
    try {
      wrong = check_on_trial(p, pass, device, c->spec, range);
    } catch (const std::exception& e) {
      wrong = e.what();
    }
    if (wrong.empty()) return c;
    const std::string what = describe(p) + (range == InputRange::normal ? "" : " on wide-range data");
    warn_once("check " + to_string(c->spec) + ' ' + what + ' ' + pass_name(pass),
              "ignoring the " + c->source + " tuning decision for " + what + ": " + to_string(c->spec) +
                  " failed its check against the CPU reference (" + wrong + "); deciding again without it");
    refused.push_back(c->spec);
  }
  return std::nullopt;
}

KernelSpec fallback_spec(const Problem& p, Pass pass) {
  return pass == Pass::forward ? default_spec(p) : default_grad_spec(p, pass);
}

} // namespace

Choice choose(const Problem& problem, const DeviceInfo& device, TunePolicy policy, Pass pass,
              const std::vector<KernelSpec>& rejected) {
  const Problem p = pass == Pass::forward ? problem : grad_problem(problem);
  const std::string id = choice_id(p, device, policy, pass);
  if (rejected.empty()) {
    std::lock_guard<std::mutex> lock(g_made_mutex);
    if (auto it = g_made.find(id); it != g_made.end()) return it->second;
  }
  const Choice choice = [&]() -> Choice {
    const bool tune = may_tune(p, policy, pass);
    const KernelSpec fallback = fallback_spec(p, pass);
    std::vector<KernelSpec> refused = rejected;
    std::optional<Choice> unchecked;
    if (auto c = usable_stored_choice(p, device, policy, pass, refused, InputRange::normal, unchecked)) return *c;
    if (unchecked)
      return {fallback,
              "default: the caller's stream is being captured into a CUDA graph, so the " + unchecked->source +
                  " decision cannot be checked now",
              {}, false, true};
    if (tune && TuningHold::active())
      return {fallback, "default: tuning is held (a stream capture, or a chain's products)", {}, false, true};
    if (!tune) return {fallback, "default", {}};
    const std::string what = describe(p) + (pass == Pass::forward ? "" : std::string(" ") + pass_name(pass));
    // A trial draws device and host memory of the problem's size: it is sized against what is free before anything
    // is drawn, and a tuning that fails anyway leaves the call with the default rather than an error. Neither is
    // stored, so a later process tunes.
    if (const std::string why = trial_memory_refusal(p, pass, device); !why.empty()) {
      warn_once("memory " + id, "not tuning " + what + " now: " + why + "; running the default variant");
      return {fallback, "default: not tuned, " + why, {}, false, true};
    }
    try {
      return tune_now(p, device, policy, pass, refused, fallback);
    } catch (const std::exception& e) {
      warn_once("failed " + id, "tuning " + what + " failed (" + e.what() +
                                          "); running the default variant, and nothing is stored");
      return {fallback, std::string("default: tuning failed, ") + e.what(), {}};
    }
  }();
  if (log_enabled(LogLevel::debug))
    log_message(LogLevel::debug, "plan " + describe(p) +
                                     (pass == Pass::forward ? "" : std::string(" ") + pass_name(pass)) + ": " +
                                     to_string(choice.spec) + " (" + choice.source + ")");
  std::lock_guard<std::mutex> lock(g_made_mutex);
  if (!choice.held) g_made[id] = choice; // a choice made again (a stored decision rejected) replaces the first
  if (!choice.held && choice.source.rfind("default", 0) != 0) // defaults are nobody's decision
    g_settled[std::string(pass_name(pass)) + ' ' + describe(p) + ' ' + std::to_string(p.with_argmax) + ' ' +
              dtype_info(p.output_dtype()).name] = MadeChoice{p, pass, choice.spec};
  return choice;
}

std::vector<KernelSpec> kernels_ahead(const Problem& problem, const DeviceInfo& device, TunePolicy policy, Pass pass) {
  const Problem p = pass == Pass::forward ? problem : grad_problem(problem);
  {
    std::lock_guard<std::mutex> lock(g_made_mutex);
    if (auto it = g_made.find(choice_id(p, device, policy, pass)); it != g_made.end()) return {it->second.spec};
  }
  if (auto c = stored_choice(DiskCache::process_cache(), p, tuning_device(device), policy, pass, {},
                             InputRange::normal, &shipped_decisions()))
    return brought_in(*c) ? check_kernels(p, pass, c->spec) : std::vector<KernelSpec>{c->spec};
  if (may_tune(p, policy, pass) && !TuningHold::active()) return {};
  return {fallback_spec(p, pass)};
}

namespace {
// The wide-data tuning itself (below): one tuning per key on the machine, the decision stored.
std::optional<Choice> tune_wide_now(const Problem& p, const DeviceInfo& device, TunePolicy policy,
                                    const std::vector<KernelSpec>& candidates);
} // namespace

std::optional<Choice> choose_wide(const Problem& p, const DeviceInfo& device, TunePolicy policy,
                                  const std::vector<KernelSpec>& candidates) {
  const std::string what = describe(p) + " on wide-range data";
  std::vector<KernelSpec> refused;
  std::optional<Choice> unchecked; // one brought from elsewhere while a capture forbids its check: the plan stays
  if (auto c = usable_stored_choice(p, device, policy, Pass::forward, refused, InputRange::wide, unchecked)) {
    c->source = "stored for wide-range data: " + c->source;
    return c;
  }
  if (unchecked) return std::nullopt;
  if (policy == TunePolicy::never || TuningHold::active() || candidates.empty() || !tunable(p, Pass::forward))
    return std::nullopt;
  // As for choose(): sized against free memory first, and a failure keeps the plan on its variant.
  if (const std::string why = trial_memory_refusal(p, Pass::forward, device); !why.empty()) {
    warn_once("memory wide " + what, "not tuning " + what + " now: " + why + "; the plan keeps its variant");
    return std::nullopt;
  }
  try {
    return tune_wide_now(p, device, policy, candidates);
  } catch (const std::exception& e) {
    warn_once("failed wide " + what, "tuning " + what + " failed (" + e.what() + "); the plan keeps its variant");
    return std::nullopt;
  }
}

namespace {

std::optional<Choice> tune_wide_now(const Problem& p, const DeviceInfo& device, TunePolicy policy,
                                    const std::vector<KernelSpec>& candidates) {
  const TuningDevice td = tuning_device(device);
  const std::string key = tuning_key(p, td, policy == TunePolicy::bucket, Pass::forward, InputRange::wide);
  const std::string what = describe(p) + " on wide-range data";
  return tune_once(
      key, what,
      [&]() -> std::optional<Choice> {
        DiskCache* disk = DiskCache::process_cache();
        const KeyLock held = lock_tuning(disk, key, what);
        std::vector<KernelSpec> refused, timed = candidates;
        if (held.held() || held.waited()) {
          std::optional<Choice> unchecked;
          if (auto c = usable_stored_choice(p, device, policy, Pass::forward, refused, InputRange::wide, unchecked)) {
            c->source = "decided by another process (" + c->source + ")";
            return c;
          }
          const auto is_refused = [&](const KernelSpec& s) { return is_rejected(refused, s); };
          timed.erase(std::remove_if(timed.begin(), timed.end(), is_refused), timed.end());
          if (timed.empty()) return std::nullopt;
        }
        TuneReport report =
            autotune(p, device, held.held() || is_local_leader(), Pass::forward, timed, InputRange::wide);
        report.reason = "tuned on wide-range inputs (randn*" + std::to_string(int(kWideSpread)) +
                        "): " + std::to_string(timed.size()) + " variants whose workspace fits the plan's";
        store_decision(p, device, report, policy == TunePolicy::bucket, Pass::forward, true, InputRange::wide);
        return Choice{report.best, "tuned now on wide-range data", {}};
      },
      p, td, policy, Pass::forward, {}, InputRange::wide);
}

} // namespace

} // namespace jitbmm
