// The compile sweeps' subset (sweep.hpp): what it must reach whatever the seed, that it is a function of the seed,
// the progress it reports, and what a fixed set's kernel stands for in it (compile_pool.hpp).
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "nvrtc/compile_pool.hpp"
#include "nvrtc/sweep.hpp"
#include "temp_dir.hpp"

using namespace jitbmm::test;

namespace {

// 60 items over four features each: "a" in 3 kinds, "b" in 5, "c" in 60 (each its own), the first of every ten
// the largest of its kind.
std::vector<SweepItem> synthetic_items() {
  std::vector<SweepItem> items;
  for (int i = 0; i < 60; ++i) {
    SweepItem item;
    item.features = {"a" + std::to_string(i % 3), "b" + std::to_string(i % 5), "c" + std::to_string(i / 30)};
    item.largest = i % 10 == 0;
    items.push_back(item);
  }
  return items;
}

std::set<std::string> features_of(const std::vector<SweepItem>& items, const std::vector<std::size_t>& chosen) {
  std::set<std::string> out;
  for (std::size_t i : chosen) out.insert(items[i].features.begin(), items[i].features.end());
  return out;
}

} // namespace

TEST_CASE("sweep: the sample reaches every feature and every largest tile, whatever the seed") {
  const std::vector<SweepItem> items = synthetic_items();
  std::vector<std::size_t> all;
  for (std::size_t i = 0; i < items.size(); ++i) all.push_back(i);
  for (uint64_t seed : {0ull, 1ull, 42ull, 0xffffffffffffffffull}) {
    CAPTURE(seed);
    const SweepChoice c = select_sweep(items, SweepPlan{false, seed, 0.1});
    CHECK(features_of(items, c.chosen) == features_of(items, all));
    for (std::size_t i = 0; i < items.size(); ++i)
      if (items[i].largest) CHECK(std::find(c.chosen.begin(), c.chosen.end(), i) != c.chosen.end());
    CHECK(c.largest == 6);
    CHECK(c.chosen.size() == c.cover + c.largest + c.sampled);
    CHECK(c.sampled == std::size_t(0.1 * double(items.size() - c.cover - c.largest) + 0.5));
    CHECK(c.chosen.size() < items.size());
    CHECK(std::is_sorted(c.chosen.begin(), c.chosen.end()));
  }
}

TEST_CASE("sweep: the same seed chooses the same variants; other seeds rotate the sample; full chooses all") {
  const std::vector<SweepItem> items = synthetic_items();
  const SweepChoice a = select_sweep(items, SweepPlan{false, 7, 0.2});
  const SweepChoice b = select_sweep(items, SweepPlan{false, 7, 0.2});
  CHECK(a.chosen == b.chosen);
  // Over a few seeds the samples differ and between them reach variants no single one chose.
  std::set<std::size_t> seen;
  std::set<std::vector<std::size_t>> distinct;
  for (uint64_t seed = 0; seed < 8; ++seed) {
    const SweepChoice c = select_sweep(items, SweepPlan{false, seed, 0.2});
    seen.insert(c.chosen.begin(), c.chosen.end());
    distinct.insert(c.chosen);
  }
  CHECK(distinct.size() == 8);
  CHECK(seen.size() > a.chosen.size());
  const SweepChoice full = select_sweep(items, SweepPlan{true, 7, 0.2});
  CHECK(full.chosen.size() == items.size());
}

TEST_CASE("sweep: the mode and seed come from JITBMM_NVRTC_SWEEP and JITBMM_NVRTC_SEED, strictly") {
  const char* mode = std::getenv("JITBMM_NVRTC_SWEEP");
  const char* seed = std::getenv("JITBMM_NVRTC_SEED");
  const std::string kept_mode = mode ? mode : "", kept_seed = seed ? seed : "";
  ::setenv("JITBMM_NVRTC_SWEEP", "full", 1);
  ::setenv("JITBMM_NVRTC_SEED", "123", 1);
  CHECK(sweep_plan_from_env().full);
  CHECK(sweep_plan_from_env().seed == 123);
  ::setenv("JITBMM_NVRTC_SWEEP", "sample", 1);
  CHECK_FALSE(sweep_plan_from_env().full);
  ::setenv("JITBMM_NVRTC_SWEEP", "all", 1);
  CHECK_THROWS_WITH(sweep_plan_from_env(), doctest::Contains("JITBMM_NVRTC_SWEEP"));
  ::setenv("JITBMM_NVRTC_SWEEP", "sample", 1);
  ::setenv("JITBMM_NVRTC_SEED", "12x", 1);
  CHECK_THROWS_WITH(sweep_plan_from_env(), doctest::Contains("JITBMM_NVRTC_SEED"));
  const auto restore = [](const char* name, const char* was, const std::string& kept) {
    was ? ::setenv(name, kept.c_str(), 1) : ::unsetenv(name);
  };
  restore("JITBMM_NVRTC_SWEEP", mode, kept_mode);
  restore("JITBMM_NVRTC_SEED", seed, kept_seed);
}

TEST_CASE("sweep: the progress file holds the latest count after every compile, for scripts/test's watcher") {
  const char* kept = std::getenv("JITBMM_PROGRESS_DIR");
  const std::string kept_dir = kept ? kept : "";
  TempDir dir;
  ::setenv("JITBMM_PROGRESS_DIR", dir.path.c_str(), 1);
  const auto file = [&] {
    std::ifstream in(dir.path + "/sweep of three");
    std::string line;
    std::getline(in, line);
    return line;
  };
  {
    SweepProgress progress("sweep of three", 3);
    CHECK(file().rfind("sweep of three: 0 of 3 compiled in ", 0) == 0);
    progress.one_done();
    progress.one_done();
    CHECK(file().rfind("sweep of three: 2 of 3 compiled in ", 0) == 0); // not only every 30 s
  }
  kept ? ::setenv("JITBMM_PROGRESS_DIR", kept_dir.c_str(), 1) : ::unsetenv("JITBMM_PROGRESS_DIR");
}

TEST_CASE("sweep: the cover takes the cheapest item that adds a feature") {
  std::vector<SweepItem> items(4);
  items[0].features = {"x", "y"}, items[0].cost = 9; // adds both, but dear
  items[1].features = {"x"}, items[1].cost = 1;
  items[2].features = {"y"}, items[2].cost = 2;
  items[3].features = {"x"}, items[3].cost = 1; // as cheap as item 1, after it: not needed
  const SweepChoice c = select_sweep(items, SweepPlan{false, 0, 0});
  CHECK(c.chosen == std::vector<std::size_t>{1, 2});
  CHECK(c.cover == 2);
}

TEST_CASE("sweep: a fixed set's kernel stands for the words of its name and its templates, on its architecture") {
  jitbmm::GeneratedKernel kernel;
  kernel.name = "chain_log_f64_c33_saving_s256x8x8_0123abcd";
  kernel.source = "// ---- templates/chain/step_terms.cuh ----\nint x;\n";
  const SweepItem item = kernel_features(kernel, 90);
  const std::set<std::string> features(item.features.begin(), item.features.end());
  for (const char* f : {"arch=sm_90", "sm_90 name:chain", "sm_90 name:log", "sm_90 name:f64", "sm_90 name:c33",
                        "sm_90 name:saving", "sm_90 name:s256x8x8", "sm_90 template:chain/step_terms.cuh"})
    CHECK(features.count(f) == 1);
  for (const std::string& f : features) CHECK(f.find("0123abcd") == std::string::npos); // the hash is no feature
  kernel.name = "hmm_steps_log_f32_backward"; // a last word that is no hash is a word
  const SweepItem plain = kernel_features(kernel, 75);
  CHECK(std::count(plain.features.begin(), plain.features.end(), "sm_75 name:backward") == 1);
}
