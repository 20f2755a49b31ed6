#include "runtime/autotune.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <tuple>

#include "cache/disk_cache.hpp"
#include "cache/kernel_cache.hpp"
#include "cache/sha256.hpp"
#include "jitbmm/errors.hpp"
#include "jitbmm/plan.hpp"
#include "jitbmm/reference.hpp"
#include "jitbmm/version.hpp"
#include "runtime/backward.hpp"
#include "runtime/checked_size.hpp"
#include "runtime/device_memory.hpp"
#include "runtime/layout.hpp"
#include "runtime/log.hpp"
#include "runtime/nvrtc_compiler.hpp"
#include "runtime/scratch.hpp"
#include "runtime/timing.hpp"
#include "runtime/tuner/search_space.hpp"
#include "runtime/tuner/trials.hpp"
#include "runtime/tuner/tuning_db.hpp"

namespace jitbmm {

TuneReport autotune(const Problem& p, const DeviceInfo& device, bool progress, Pass pass,
                    const std::vector<KernelSpec>& only) {
  const auto t0 = std::chrono::steady_clock::now();
  ScopedContext scope(device.context);
  TuneReport report;
  for (const KernelSpec& spec :
       only.empty() ? tuning_candidates(p, {device.max_threads_per_block, 48 * 1024}, pass) : only)
    report.candidates.push_back({spec, -1, "ok"});
  // Compile every candidate on all cores (the kernel cache is thread-safe); a failure only skips that candidate.
  std::atomic<std::size_t> next{0};
  std::vector<std::thread> pool;
  for (unsigned w = 0; w < std::max(1u, std::thread::hardware_concurrency()); ++w)
    pool.emplace_back([&] {
      for (std::size_t i; (i = next.fetch_add(1)) < report.candidates.size();) try {
          load_kernel(device, report.candidates[i].spec);
        } catch (const std::exception& e) {
          report.candidates[i].status = std::string("compile failed: ") + e.what();
        }
    });
  for (auto& t : pool) t.join();

  std::mt19937_64 rng(20261122);
  const Trial trial = make_trial(p, pass, device, rng);
  const L2Flush flush;
  auto time_runs = [&](const KernelSpec& spec, int runs) {
    return time_launches([&](Stream stream) { trial.run(spec, stream); }, 0, runs, nullptr, std::ref(flush)).median_ms;
  };
  const std::string what = describe(p) + (pass == Pass::forward ? "" : std::string(" ") + pass_name(pass));
  double best_ms = -1;
  std::size_t done = 0;
  for (CandidateResult& c : report.candidates) {
    ++done;
    if (c.status != "ok") continue;
    try {
      const std::string wrong = trial.verify(c.spec);
      if (!wrong.empty()) {
        c.status = wrong;
        continue;
      }
      c.median_ms = time_runs(c.spec, 5);
      if (best_ms < 0 || c.median_ms < best_ms) best_ms = c.median_ms;
    } catch (const std::exception& e) {
      c.status = std::string("launch failed: ") + e.what();
    }
    if (progress && log_enabled(LogLevel::info))
      std::fprintf(stderr, "\rjitbmm: tuning %s [%zu/%zu] best %.4f ms   ", what.c_str(), done,
                   report.candidates.size(), best_ms);
  }
  std::vector<CandidateResult*> timed;
  for (CandidateResult& c : report.candidates)
    if (c.median_ms >= 0) timed.push_back(&c);
  if (timed.empty()) throw std::runtime_error("autotune: no correct candidate for " + what);
  std::sort(timed.begin(), timed.end(), [](auto* x, auto* y) { return x->median_ms < y->median_ms; });
  // Re-time the best three interleaved, so drift between the first pass's measurements cannot decide.
  timed.resize(std::min<std::size_t>(3, timed.size()));
  std::vector<std::vector<double>> again(timed.size());
  for (int round = 0; round < 3; ++round)
    for (std::size_t i = 0; i < timed.size(); ++i) again[i].push_back(time_runs(timed[i]->spec, 3));
  std::size_t winner = 0;
  for (std::size_t i = 0; i < timed.size(); ++i) {
    std::sort(again[i].begin(), again[i].end());
    timed[i]->median_ms = again[i][1];
    if (timed[i]->median_ms < timed[winner]->median_ms) winner = i;
  }
  report.best = timed[winner]->spec;
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (progress && log_enabled(LogLevel::info))
    std::fprintf(stderr, "\rjitbmm: tuned %s in %.1f s: %zu candidates, best %.4f ms (%s)\n", what.c_str(),
                 report.seconds, report.candidates.size(), timed[winner]->median_ms, to_string(report.best).c_str());
  return report;
}

void store_decision(const Problem& p, const DeviceInfo& device, const TuneReport& report, bool bucket, Pass pass,
                    bool exact) {
  DiskCache* disk = DiskCache::process_cache();
  if (!disk) return;
  const TuningDevice td = tuning_device(device);
  Decision d;
  d.spec = report.best;
  d.problem = describe(p);
  d.family = tuning_family(p, td, pass);
  d.seconds = report.seconds;
  for (const CandidateResult& c : report.candidates)
    if (c.median_ms >= 0) d.ranking.push_back(c);
  std::sort(d.ranking.begin(), d.ranking.end(), [](auto& x, auto& y) { return x.median_ms < y.median_ms; });
  d.ranking.resize(std::min<std::size_t>(d.ranking.size(), 5));
  d.shape = p.shape;
  if (exact) put_decision(*disk, tuning_key(p, td, false, pass), d);
  if (bucket) {
    d.bucket = true;
    d.shape = shape_bucket(p.shape);
    put_decision(*disk, tuning_key(p, td, true, pass), d);
  }
}

namespace {

// Each unusable stored decision is reported once per process, however often the problem is decided again.
void warn_once(const std::string& topic, const std::string& message) {
  static std::mutex mutex;
  static std::set<std::string> said;
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (!said.insert(topic).second) return;
  }
  log_message(LogLevel::warn, message);
}

// A stored decision under `key`, if present; one that does not decode is ignored with a warning.
std::optional<Decision> load_decision_or_warn(DiskCache* disk, const std::string& key, const char* source) {
  if (!disk) return std::nullopt;
  bool unreadable = false;
  auto d = load_decision(disk, key, &unreadable);
  if (unreadable)
    warn_once(key, std::string("ignoring the stored tuning decision ") + key.substr(0, 16) + " (" + source +
                       "): it does not parse; deciding again");
  return d;
}

bool is_rejected(const std::vector<KernelSpec>& rejected, const KernelSpec& spec) {
  return std::find(rejected.begin(), rejected.end(), spec) != rejected.end();
}

} // namespace

std::optional<Choice> stored_choice(DiskCache* disk, const Problem& p, const TuningDevice& td, TunePolicy policy,
                                    Pass pass, const std::vector<KernelSpec>& rejected, std::optional<Decision>* far) {
  // An exact or bucket decision is this problem's own: one that no longer fits is stale, and said so.
  auto own = [&](const std::string& key, const char* source) -> std::optional<Choice> {
    const auto d = load_decision_or_warn(disk, key, source);
    if (!d) return std::nullopt;
    const auto spec = fitting(d->spec, p);
    if (!spec) {
      std::string why;
      try {
        check_spec_fits(d->spec, p);
      } catch (const std::invalid_argument& e) {
        why = e.what();
      }
      warn_once(key, std::string("ignoring the stored tuning decision ") + key.substr(0, 16) + " (" + source +
                         ", tuned for " + d->problem + "): " + to_string(d->spec) + " no longer fits (" + why +
                         "); deciding again");
      return std::nullopt;
    }
    if (is_rejected(rejected, *spec)) return std::nullopt;
    return Choice{*spec, source, d, true};
  };
  if (auto c = own(tuning_key(p, td, false, pass), "exact")) return c;
  if (policy == TunePolicy::exact) return std::nullopt;
  if (auto c = own(tuning_key(p, td, true, pass), "bucket")) return c;
  // Another bucket's decision may not fit this shape: that is no defect of the decision, so no warning.
  std::vector<Decision> family = family_buckets(disk, tuning_family(p, td, pass));
  family.erase(std::remove_if(family.begin(), family.end(),
                              [&](const Decision& d) {
                                const auto spec = fitting(d.spec, p);
                                return spec && is_rejected(rejected, *spec);
                              }),
               family.end());
  const auto near = nearest_decision(family, p.shape);
  if (!near) return std::nullopt;
  if (bucket_distance(near->shape, shape_bucket(p.shape)) > kNearBucketDistance) {
    if (far) *far = near;
    return std::nullopt;
  }
  if (auto spec = fitting(near->spec, p)) return Choice{*spec, "nearest bucket", near, true};
  return std::nullopt;
}

Choice choose(const Problem& problem, const DeviceInfo& device, TunePolicy policy, Pass pass,
              const std::vector<KernelSpec>& rejected) {
  const Problem p = pass == Pass::forward ? problem : grad_problem(problem);
  // Decisions already made in this process, per context, problem, pass and policy.
  static std::mutex mutex;
  static std::map<std::string, Choice> made;
  std::ostringstream id;
  id << device.context << ' ' << int(policy) << ' ' << pass_name(pass) << ' ' << describe(p) << ' ' << p.with_argmax
     << ' ' << dtype_info(p.output_dtype()).name;
  if (rejected.empty()) {
    std::lock_guard<std::mutex> lock(mutex);
    if (auto it = made.find(id.str()); it != made.end()) return it->second;
  }
  const Choice choice = [&]() -> Choice {
    DiskCache* disk = DiskCache::process_cache();
    const TuningDevice td = tuning_device(device);
    const bool tune = policy != TunePolicy::never && tunable(p, pass);
    std::optional<Decision> far;
    if (auto c = stored_choice(disk, p, td, policy, pass, rejected, &far)) return *c;
    const KernelSpec fallback = pass == Pass::forward ? default_spec(p) : default_grad_spec(p, pass);
    if (far && policy == TunePolicy::bucket && tune) {
      // Far from anything tuned: time the borrowed spec against the default (no full tuning), keep the winner.
      std::vector<KernelSpec> two = {fallback};
      if (auto spec = fitting(far->spec, p); spec && *spec != fallback) two.push_back(*spec);
      const TuneReport report = autotune(p, device, false, pass, two);
      store_decision(p, device, report, true, pass, false);
      return {report.best, "nearest bucket, checked against the default", far};
    }
    if (!tune) return {fallback, "default", {}};
    const TuneReport report = autotune(p, device, true, pass);
    store_decision(p, device, report, policy == TunePolicy::bucket, pass);
    return {report.best, "tuned now", {}};
  }();
  if (log_enabled(LogLevel::debug))
    log_message(LogLevel::debug, "plan " + describe(p) +
                                     (pass == Pass::forward ? "" : std::string(" ") + pass_name(pass)) + ": " +
                                     to_string(choice.spec) + " (" + choice.source + ")");
  std::lock_guard<std::mutex> lock(mutex);
  made[id.str()] = choice; // a choice made again (a stored decision rejected) replaces the first
  return choice;
}

KernelSpec plan_with_choice(const std::function<Choice(const std::vector<KernelSpec>& rejected)>& decide,
                            const std::function<void(const KernelSpec&)>& plan) {
  std::vector<KernelSpec> rejected;
  for (;;) {
    const Choice choice = decide(rejected);
    // Only a stored decision may be wrong about what compiles: the default, a spec tuned now (which compiled to be
    // timed) and one already rejected propagate their errors.
    const bool stored = choice.stored && !is_rejected(rejected, choice.spec);
    if (!stored) {
      plan(choice.spec);
      return choice.spec;
    }
    try {
      plan(choice.spec);
      return choice.spec;
    } catch (const std::exception& e) {
      if (!dynamic_cast<const CompileError*>(&e) && !dynamic_cast<const CudaError*>(&e)) throw;
      log_message(LogLevel::warn, "ignoring the stored tuning decision (" + choice.source + ", tuned for " +
                                      choice.decision->problem + "): " + to_string(choice.spec) +
                                      " failed to compile or load (" + e.what() + "); deciding again without it");
      rejected.push_back(choice.spec);
    }
  }
}

} // namespace jitbmm
