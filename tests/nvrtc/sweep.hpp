// Which variants the NVRTC compile sweeps compile: all of them, or a subset that a 2-core machine compiles in a few
// minutes and that still reaches every kind of kernel.
//
// $JITBMM_NVRTC_SWEEP=full compiles every variant (scripts/gpu-suite on the GPU machine's cores, scripts/test --full);
// sample (the default) compiles
//   - a cover: for each feature (template, entry header, strategy and pass, semiring, dtype, output dtype, math,
//     index width, argmax; for chains form, state count and cluster; each on every architecture), the cheapest
//     variant that has it (the first of those as cheap);
//   - the largest tiles (and chains of the most states): the variants that spill first, so that the register and
//     spill checks still see them;
//   - a rotating sample of 2% of the rest, drawn by $JITBMM_NVRTC_SEED (scripts/test passes the commit's), so that over
//     successive commits every variant is compiled somewhere.
// The choice is a function of the variants' features and the seed alone (select_sweep, tested in test_sweep.cpp).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace jitbmm::test {

struct SweepItem {
  std::vector<std::string> features; // "template:core/kslice.cuh", "semiring:log", ...
  bool largest = false;              // always compiled: a largest tile of its kind
  double cost = 0;                   // a rough compile time: the cover takes the cheapest item that adds a feature
};

struct SweepPlan {
  bool full = false;
  uint64_t seed = 0;
  double sample_share = 0.02; // of the variants neither the cover nor the largest tiles chose
};

struct SweepChoice {
  std::vector<std::size_t> chosen; // indices into the items, ascending
  std::size_t cover = 0, largest = 0, sampled = 0;
};

// A 64-bit mix (splitmix64's finalizer): a seed's draws, the same on every machine and standard library.
inline uint64_t sweep_mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

inline SweepChoice select_sweep(const std::vector<SweepItem>& items, const SweepPlan& plan) {
  SweepChoice c;
  std::vector<bool> taken(items.size(), plan.full);
  if (!plan.full) {
    for (std::size_t i = 0; i < items.size(); ++i)
      if (items[i].largest) taken[i] = true, ++c.largest;
    std::set<std::string> reached;
    for (std::size_t i = 0; i < items.size(); ++i)
      if (taken[i]) reached.insert(items[i].features.begin(), items[i].features.end());
    std::vector<std::size_t> cheapest_first(items.size());
    for (std::size_t i = 0; i < items.size(); ++i) cheapest_first[i] = i;
    std::stable_sort(cheapest_first.begin(), cheapest_first.end(),
                     [&](std::size_t x, std::size_t y) { return items[x].cost < items[y].cost; });
    for (std::size_t i : cheapest_first) {
      if (taken[i]) continue;
      const bool adds = std::any_of(items[i].features.begin(), items[i].features.end(),
                                    [&](const std::string& f) { return !reached.count(f); });
      if (!adds) continue;
      taken[i] = true, ++c.cover;
      reached.insert(items[i].features.begin(), items[i].features.end());
    }
    // The rest ordered by a hash of the seed and their index: the first share of them is the seed's sample.
    std::vector<std::pair<uint64_t, std::size_t>> rest;
    for (std::size_t i = 0; i < items.size(); ++i)
      if (!taken[i]) rest.emplace_back(sweep_mix(sweep_mix(plan.seed) ^ i), i);
    std::sort(rest.begin(), rest.end());
    c.sampled = static_cast<std::size_t>(plan.sample_share * double(rest.size()) + 0.5);
    for (std::size_t k = 0; k < c.sampled; ++k) taken[rest[k].second] = true;
  }
  for (std::size_t i = 0; i < items.size(); ++i)
    if (taken[i]) c.chosen.push_back(i);
  return c;
}

// The plan from the environment: $JITBMM_NVRTC_SWEEP (full or sample; anything else is an error naming it) and
// $JITBMM_NVRTC_SEED (an unsigned integer; 0 when unset).
inline SweepPlan sweep_plan_from_env() {
  SweepPlan plan;
  const char* mode = std::getenv("JITBMM_NVRTC_SWEEP");
  const std::string m = mode ? mode : "sample";
  if (m != "full" && m != "sample" && !m.empty())
    throw std::invalid_argument("JITBMM_NVRTC_SWEEP: expected full or sample, got '" + m + "'");
  plan.full = m == "full";
  if (const char* seed = std::getenv("JITBMM_NVRTC_SEED"); seed && *seed) {
    char* end = nullptr;
    plan.seed = std::strtoull(seed, &end, 10);
    if (*end != '\0' || seed[0] == '-')
      throw std::invalid_argument(std::string("JITBMM_NVRTC_SEED: expected an unsigned integer, got '") + seed + "'");
  }
  return plan;
}

inline std::string describe(const SweepChoice& c, const SweepPlan& plan, std::size_t total, const char* what) {
  std::ostringstream os;
  os << "nvrtc sweep (" << what << "): compiling " << c.chosen.size() << " of " << total << " variants";
  if (plan.full)
    os << " (JITBMM_NVRTC_SWEEP=full)";
  else
    os << " (sample, seed " << plan.seed << "): " << c.cover << " to reach every feature, " << c.largest
       << " largest tiles, " << c.sampled << " drawn by the seed; JITBMM_NVRTC_SWEEP=full compiles all";
  return os.str();
}

// A line every 30 s on stdout while a sweep compiles, so that a long run shows it is moving; and where
// $JITBMM_PROGRESS_DIR names a directory (scripts/test's), the latest count after every compile in the file
// <dir>/<name>, which scripts/test's watcher shows beside the entries still running. Thread-safe.
class SweepProgress {
public:
  SweepProgress(std::string name, std::size_t total) : name_(std::move(name)), total_(total) { say(true); }
  void one_done() {
    std::lock_guard<std::mutex> lock(mutex_);
    ++done_;
    say(std::chrono::steady_clock::now() - last_ >= std::chrono::seconds(30) || done_ == total_);
  }

private:
  void say(bool on_stdout) {
    const auto now = std::chrono::steady_clock::now();
    const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(now - start_).count();
    const std::string line = name_ + ": " + std::to_string(done_) + " of " + std::to_string(total_) +
                             " compiled in " + std::to_string(seconds) + " s";
    if (on_stdout) {
      last_ = now;
      std::printf("%s\n", line.c_str());
      std::fflush(stdout);
    }
    if (const char* dir = std::getenv("JITBMM_PROGRESS_DIR"); dir && *dir)
      std::ofstream(std::string(dir) + "/" + name_) << line << "\n";
  }
  std::mutex mutex_;
  std::string name_;
  std::size_t total_, done_ = 0;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now(), last_ = start_;
};

// A variant's features on architecture `arch` ("sm_75"): each of them, and those beginning with one of `paired` also
// paired with `kind` (by default the architecture itself), so that the cover reaches each of those on every kind of
// architecture and the rest once. Architectures of the same features are one kind (archs.hpp: feature_kind): their
// device code is the same, and ptxas's register allocation for each is reached by their largest tiles and their own
// "arch=" feature. By
// default those whose code the JB_HAS_* options or the architecture change: templates, entry headers, strategies
// with their passes, dtypes (the older equivalents are per dtype) and maths.
inline const std::vector<std::string> kArchPaired = {"template:", "header:", "strategy+pass=", "dtype=", "math="};
inline SweepItem on_arch(const std::vector<std::string>& features, const std::string& arch,
                         const std::vector<std::string>& paired = kArchPaired, const std::string& kind = "") {
  SweepItem item;
  item.features.push_back("arch=" + arch);
  for (const std::string& f : features) {
    item.features.push_back(f);
    for (const std::string& prefix : paired)
      if (f.rfind(prefix, 0) == 0) item.features.push_back((kind.empty() ? arch : kind) + " " + f);
  }
  return item;
}

// The templates a generated source inlines: the frames emit_source.cpp writes ("// ---- templates/<path> ----").
inline std::vector<std::string> inlined_templates(const std::string& source) {
  std::vector<std::string> out;
  const std::string frame = "// ---- templates/";
  for (std::size_t at = source.find(frame); at != std::string::npos; at = source.find(frame, at + 1)) {
    const std::size_t from = at + frame.size(), to = source.find(' ', from);
    out.push_back("template:" + source.substr(from, to - from));
  }
  return out;
}

} // namespace jitbmm::test
