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
#include "jitbmm/errors.hpp"
#include "precompile.hpp"
#include "runtime/chain_plan.hpp"
#include "runtime/device.hpp"
#include "suite_main.hpp"
#include "variants.hpp"

namespace {

// Every variant the suite will run, compiled on all cores first.
void compile_all_variants(const jitbmm::DeviceInfo& device) {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<jitbmm::KernelSpec> specs = jitbmm::test::all_variants();
  for (const jitbmm::KernelSpec& spec : jitbmm::test::grad_variants()) specs.push_back(spec);
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
  bool clusters = false;
  try {
    const auto dev = jitbmm::current_device();
    clusters = jitbmm::cluster_sms(*dev) > 0;
    std::printf("GPU suite on %s (%s)\n", dev->name.c_str(), dev->arch().c_str());
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
  }
  doctest::Context context(argc, argv);
  const int result = jitbmm::test::run_suite(
      context, {{jitbmm::test::kNeedsDiskCache, jitbmm::DiskCache::process_cache() != nullptr,
                 "no disk cache (JITBMM_CACHE=off, or its directory is unusable)"},
                {jitbmm::test::kNeedsClusters, clusters,
                 "no clusters of blocks on this GPU (they need sm_90 or later)"}});
  std::error_code ec;
  if (!cache_dir.empty()) std::filesystem::remove_all(cache_dir, ec);
  return result;
}
