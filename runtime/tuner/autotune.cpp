// The autotuner's run: the compile pool (parallel NVRTC through the kernel cache), the first timing pass over the
// correct candidates, the re-timing of the leaders, and the stored decision.
#include "runtime/tuner/autotune.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>

#include "cache/disk_cache.hpp"
#include "runtime/device_pool.hpp"
#include "runtime/jit.hpp"
#include "support/log.hpp"
#include "runtime/timing.hpp"
#include "runtime/tuner/cpu_pool.hpp"
#include "runtime/tuner/search_space.hpp"
#include "runtime/tuner/trials.hpp"

namespace jitbmm {

namespace {

DeviceLimits device_limits(const DeviceInfo& d) {
  return {d.max_threads_per_block, jb::kMaxStaticSharedBytes, d.max_shared_per_block_optin, d.features};
}

// Compiles and loads every candidate through the kernel cache (which is thread-safe) on the tuner's CPU pool
// (runtime/tuner/cpu_pool.hpp); a failure only marks that candidate.
void compile_candidates(const DeviceInfo& device, std::vector<CandidateResult>& candidates) {
  for_each_on_cpus(candidates.size(), [&](std::size_t i) {
    try {
      load_kernel(device, candidates[i].spec);
    } catch (const std::exception& e) {
      candidates[i].status = std::string("compile failed: ") + e.what();
    }
  });
}

// The median of `runs` timed launches of `spec` on the trial, the L2 flushed before each.
double time_candidate(const Trial& trial, const L2Flush& flush, const KernelSpec& spec, int runs) {
  return time_launches([&](Stream stream) { trial.run(spec, stream); }, 0, runs, nullptr, std::ref(flush)).median_ms;
}

// A candidate whose first timed launch takes more than kHopeless times the best median so far keeps that one
// timing: it cannot be a leader (rank() re-times those within kRetimeWithin of the best), and its other four
// launches were most of a large problem's tuning time (a slow direct kernel next to a winner five times faster).
constexpr double kHopeless = 2.0;

// Checks each compiled candidate against the reference and times the correct ones (median of 5, or the one launch
// of a hopeless one); the others get their status. Progress on stderr when `progress`.
void verify_and_time(std::vector<CandidateResult>& candidates, const Trial& trial, const L2Flush& flush,
                     const std::string& what, bool progress) {
  double best_ms = -1;
  std::size_t done = 0;
  for (CandidateResult& c : candidates) {
    ++done;
    if (c.status != "ok") continue;
    try {
      const std::string wrong = trial.verify(c.spec);
      if (!wrong.empty()) {
        c.status = wrong;
        continue;
      }
      c.median_ms = time_candidate(trial, flush, c.spec, 1);
      if (best_ms < 0 || c.median_ms <= kHopeless * best_ms) c.median_ms = time_candidate(trial, flush, c.spec, 5);
      if (best_ms < 0 || c.median_ms < best_ms) best_ms = c.median_ms;
    } catch (const std::exception& e) {
      c.status = std::string("launch failed: ") + e.what();
    }
    if (progress && log_enabled(LogLevel::info))
      std::fprintf(stderr, "\r%stuning %s [%zu/%zu] best %.4f ms   ", log_prefix().c_str(), what.c_str(), done,
                   candidates.size(), best_ms);
  }
}

// The first pass's candidates re-timed: every one within kRetimeWithin of its best, at most kRetimedMost of them (at
// least the best three), so that one slow first measurement of the true winner (clock or power drift) cannot drop it.
constexpr double kRetimeWithin = 1.3;
constexpr std::size_t kRetimedMost = 8;

// Re-times the first pass's leaders (above) interleaved, so drift between the first pass's measurements cannot
// decide; their median_ms become the new timings (the middle of three rounds). Returns the fastest.
const CandidateResult& rank(std::vector<CandidateResult>& candidates, const Trial& trial, const L2Flush& flush,
                            const std::string& what) {
  std::vector<CandidateResult*> timed;
  for (CandidateResult& c : candidates)
    if (c.median_ms >= 0) timed.push_back(&c);
  if (timed.empty()) throw std::runtime_error("autotune: no correct candidate for " + what);
  std::sort(timed.begin(), timed.end(), [](auto* x, auto* y) { return x->median_ms < y->median_ms; });
  std::size_t leaders = std::min<std::size_t>(3, timed.size());
  while (leaders < std::min(kRetimedMost, timed.size()) &&
         timed[leaders]->median_ms <= kRetimeWithin * timed.front()->median_ms)
    ++leaders;
  timed.resize(leaders);
  std::vector<std::vector<double>> again(timed.size());
  for (int round = 0; round < 3; ++round)
    for (std::size_t i = 0; i < timed.size(); ++i) again[i].push_back(time_candidate(trial, flush, timed[i]->spec, 3));
  std::size_t winner = 0;
  for (std::size_t i = 0; i < timed.size(); ++i) {
    std::sort(again[i].begin(), again[i].end());
    timed[i]->median_ms = again[i][1];
    if (timed[i]->median_ms < timed[winner]->median_ms) winner = i;
  }
  return *timed[winner];
}

} // namespace

std::vector<KernelSpec> device_candidates(const Problem& p, const DeviceInfo& device, Pass pass) {
  return tuning_candidates(p, device_limits(device), pass);
}

TuneReport autotune(const Problem& p, const DeviceInfo& device, bool progress, Pass pass,
                    const std::vector<KernelSpec>& only, InputRange range) {
  const auto t0 = std::chrono::steady_clock::now();
  auto seconds_since = [](auto t) { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count(); };
  std::vector<double> phases; // for the debug line below: compile, trial, check and time, re-time
  auto phase_done = [&, t = t0]() mutable {
    phases.push_back(seconds_since(t));
    t = std::chrono::steady_clock::now();
  };
  ScopedContext scope(device.context);
  // The candidates' workspaces come from jitbmm's pool, which would keep the largest (split-K's partials can take
  // GBs) after the tuning: given back when it ends, however it ends, so the framework beside it keeps its memory.
  struct TrimAfter {
    ~TrimAfter() { trim_pools(); }
  } trim_after;
  TuneReport report;
  for (const KernelSpec& spec : only.empty() ? device_candidates(p, device, pass) : only)
    report.candidates.push_back({spec, -1, "ok"});
  compile_candidates(device, report.candidates);
  phase_done();

  std::mt19937_64 rng(20261122);
  const Trial trial = make_trial(p, pass, device, rng, range);
  const L2Flush flush;
  phase_done();
  const std::string what = describe(p) + (pass == Pass::forward ? "" : std::string(" ") + pass_name(pass)) +
                           (range == InputRange::normal ? "" : std::string(" on ") + input_range_name(range) + " data");
  verify_and_time(report.candidates, trial, flush, what, progress);
  phase_done();
  const CandidateResult& winner = rank(report.candidates, trial, flush, what);
  phase_done();
  report.best = winner.spec;
  report.seconds = seconds_since(t0);
  if (log_enabled(LogLevel::debug)) {
    char line[512];
    std::snprintf(line, sizeof line,
                  "tuning %s took %.3f s: compile and load %.3f s, trial inputs %.3f s, check and time %zu "
                  "candidates %.3f s, re-time the leaders %.3f s",
                  what.c_str(), report.seconds, phases[0], phases[1], report.candidates.size(), phases[2], phases[3]);
    log_message(LogLevel::debug, line);
  }
  if (progress && log_enabled(LogLevel::info))
    std::fprintf(stderr, "\r%stuned %s in %.1f s: %zu candidates, best %.4f ms (%s)\n", log_prefix().c_str(),
                 what.c_str(), report.seconds, report.candidates.size(), winner.median_ms,
                 to_string(report.best).c_str());
  return report;
}

Decision decision_from(const Problem& p, const TuningDevice& td, const TuneReport& report, Pass pass,
                       InputRange range) {
  Decision d;
  d.spec = report.best;
  d.problem = describe(p);
  d.family = tuning_family(p, td, pass, range);
  d.seconds = report.seconds;
  d.reason = report.reason;
  for (const CandidateResult& c : report.candidates)
    if (c.median_ms >= 0) d.ranking.push_back(c);
  std::stable_sort(d.ranking.begin(), d.ranking.end(), [](auto& x, auto& y) { return x.median_ms < y.median_ms; });
  d.ranking.resize(std::min(d.ranking.size(), kRankingKept));
  d.shape = p.shape;
  d.measured = p.shape;
  return d;
}

bool store_decision(const Problem& p, const DeviceInfo& device, const TuneReport& report, bool bucket, Pass pass,
                    bool exact, InputRange range) {
  DiskCache* disk = DiskCache::process_cache();
  if (!disk) return false;
  const TuningDevice td = tuning_device(device);
  Decision d = decision_from(p, td, report, pass, range);
  bool kept = !exact || put_decision(*disk, tuning_key(p, td, false, pass, range), d);
  if (bucket) {
    d.bucket = true;
    d.shape = shape_bucket(p.shape);
    kept = put_decision(*disk, tuning_key(p, td, true, pass, range), d) && kept;
  }
  return kept;
}

} // namespace jitbmm
