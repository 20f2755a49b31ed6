// The GPU suite's main: without a usable GPU it exits 77, which CTest reports as "skipped" (never "passed").
// Test cases whose need is not met (suite_main.hpp) are left out and reported as skipped.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "cache/disk_cache.hpp"
#include "feature_level.hpp"
#include "jitbmm/errors.hpp"
#include "precompile.hpp"
#include "runtime/chain_plan.hpp"
#include "runtime/device.hpp"
#include "suite_main.hpp"
#include "variants.hpp"

namespace {

// Every variant the suite will run (those the device's feature level runs), compiled on all cores first.
void compile_all_variants(const jitbmm::DeviceInfo& device) {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<jitbmm::KernelSpec> specs;
  for (const auto& list : {jitbmm::test::all_variants(), jitbmm::test::grad_variants()})
    for (const jitbmm::KernelSpec& spec : list)
      if (jitbmm::test::runs_here(spec, device)) specs.push_back(spec);
  jitbmm::test::precompile(device, specs);
  std::printf("compiled %zu variants in %.1f s\n", specs.size(),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

} // namespace

int main(int argc, char** argv) {
  // A fresh disk cache per run, so "compiles exactly once" holds on every run (unless the caller chose one).
  std::string cache_dir;
  if (!std::getenv("JITBMM_CACHE_DIR")) {
    std::string templ = (std::filesystem::temp_directory_path() / "jitbmm-gpu-tests-XXXXXX").string();
    if (::mkdtemp(templ.data())) cache_dir = templ;
    if (!cache_dir.empty()) ::setenv("JITBMM_CACHE_DIR", cache_dir.c_str(), 1);
  }
  // Tests choose their variants; the tests of tuning itself ask for it explicitly.
  ::setenv("JITBMM_TUNE", "never", 0);
  // Tests choose their variants: the shipped decisions (tuning/shipped/) only where a test turns them on.
  ::setenv("JITBMM_SHIPPED_DECISIONS", "off", 0);
  // Tests name the strategy a chain plan takes: the stand-in only where a test turns it on.
  ::setenv("JITBMM_STAND_IN", "off", 0);
  bool clusters = false, mma = false;
  std::string level, no_clusters, no_mma; // the device's architecture and feature level; why a need is unmet
  try {
    const auto dev = jitbmm::current_device();
    clusters = jitbmm::cluster_sms(*dev) > 0;
    mma = dev->features.has(jitbmm::kMmaTf32Bf16);
    level = dev->arch_and_level();
    no_clusters = level + " lacks " + jitbmm::missing_features(jitbmm::kClusters, {});
    no_mma = level + " lacks " + jitbmm::missing_features(jitbmm::kMmaTf32Bf16, {});
    std::printf("GPU suite on %s (%s; features: %s)\n", dev->name.c_str(), level.c_str(),
                jitbmm::feature_names(dev->features.bits).c_str());
    // A run narrowed to some test cases compiles what they use as they use it (a chain test's modules are not
    // among the variants).
    bool filtered = false;
    for (int i = 1; i < argc; ++i) {
      const std::string arg = argv[i];
      filtered = filtered || arg.rfind("-tc=", 0) == 0 || arg.rfind("--test-case=", 0) == 0;
    }
    if (!filtered) compile_all_variants(*dev);
  } catch (const jitbmm::NoDriverError& e) {
    std::printf("SKIPPED: no GPU here (%s)\n", e.what());
    std::error_code ec;
    if (!cache_dir.empty()) std::filesystem::remove_all(cache_dir, ec);
    return 77;
  } catch (const std::invalid_argument& e) { // a JITBMM_FEATURES the device cannot take
    std::printf("jitbmm_test_gpu: %s\n", e.what());
    return 2;
  }
  doctest::Context context(argc, argv);
  const int result = jitbmm::test::run_suite(
      context, {{jitbmm::test::kNeedsDiskCache, jitbmm::DiskCache::process_cache() != nullptr,
                 "no disk cache (JITBMM_CACHE=off, or its directory is unusable)"},
                {jitbmm::test::kNeedsClusters, clusters, no_clusters.c_str()},
                {jitbmm::test::kNeedsMmaTf32Bf16, mma, no_mma.c_str()}});
  // The variants skipped inside test cases for the level (each named by its case's MESSAGE); scripts/gpu-levels
  // reads this line.
  std::printf("feature level %s: %ld variants skipped in test cases (their kernels need features it lacks)\n",
              level.c_str(), jitbmm::test::level_skips().load());
  std::error_code ec;
  if (!cache_dir.empty()) std::filesystem::remove_all(cache_dir, ec);
  return result;
}
