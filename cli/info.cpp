// jitbmm info: what jitbmm runs on here: NVRTC, the driver, the device and what its architecture (or the feature
// level in use) lets the kernels do, the architectures supported, the disk cache and the shipped decisions.
#include <cstdio>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>

#include "cli/args.hpp"
#include "cli/commands.hpp"
#include "generator/arch_features.hpp"
#include "generator/needed_features.hpp"
#include "jitbmm/errors.hpp"
#include "jitbmm/kernel_spec.hpp"
#include "jitbmm/version.hpp"
#include "runtime/device.hpp"
#include "runtime/driver_api.hpp"
#include "runtime/nvrtc_api.hpp"
#include "runtime/nvrtc_compiler.hpp"
#include "runtime/tuner/shipped_decisions.hpp"

namespace jitbmm::cli {

namespace {

// The exp_matmul math forms the features allow (the tuner offers only those), and those they do not, grouped by the
// features they need: the tensor-core forms are the ones a feature gates.
void print_exp_matmul_forms(const ArchFeatures& features) {
  std::string offered;
  std::map<unsigned, std::string> refused; // by needs
  for (int m = 0; m < math_count(); ++m) {
    KernelSpec spec;
    spec.strategy = Strategy::exp_matmul;
    spec.math = static_cast<Math>(m);
    const unsigned needs = needed_features(spec);
    std::string& list = features.has(needs) ? offered : refused[needs];
    list += (list.empty() ? "" : ", ") + std::string(math_name(spec.math));
  }
  std::printf("exp_matmul math: %s%s\n", offered.c_str(),
              offered == "fma" ? " alone (CUDA cores: no tensor-core form)" : "");
  for (const auto& [needs, forms] : refused)
    std::printf("  not %s: they need %s\n", forms.c_str(), missing_features(needs, features).c_str());
}

std::shared_ptr<const DeviceInfo> print_device() {
  const auto dev = current_device();
  std::printf("driver: CUDA %d.%d: %s\ndevice %d: %s, %s, %d SMs, %.0f MHz\n", dev->driver_version / 1000,
              dev->driver_version % 1000 / 10, driver().library.c_str(), dev->ordinal, dev->name.c_str(),
              dev->arch().c_str(), dev->sm_count, dev->clock_khz / 1000.0);
  const ArchFeatures& f = dev->features;
  if (f.sm == dev->sm())
    std::printf("feature level: %s (the device's own)\n", sm_name(f.sm).c_str());
  else
    std::printf("feature level: %s (set by JITBMM_FEATURES; kernels compiled for %s with %s's code paths)\n",
                sm_name(f.sm).c_str(), dev->arch().c_str(), sm_name(f.sm).c_str());
  std::printf("features: %s\n", feature_names(f.bits).c_str());
  print_exp_matmul_forms(f);
  if (f.has(kClusters))
    std::printf("chain clusters: yes\n");
  else
    std::printf("chain clusters: no: they need %s\n", missing_features(kClusters, f).c_str());
  if (!f.has(kHalfPairs)) std::printf("half inputs: every term computed in f32 (no packed half-pair instructions)\n");
  return dev;
}

} // namespace

int run_info(int argc, char** argv) {
  const Args args(argc, argv, 2, {}, {});
  std::printf("jitbmm %s\n", kVersion);
  try {
    const std::string version = nvrtc_version();
    std::printf("NVRTC %s: %s\n", version.c_str(), nvrtc().library.c_str());
    std::printf("quick builds (a stand-in's kernels): %s\n",
                nvrtc_compiles_fast() ? "yes, NVRTC's --Ofast-compile=mid" : "no: this NVRTC lacks --Ofast-compile");
  } catch (const NoNvrtcError& e) {
    std::printf("no NVRTC: %s\n", e.what());
  }
  std::shared_ptr<const DeviceInfo> device;
  try {
    device = print_device();
  } catch (const NoDriverError& e) {
    std::printf("no GPU: %s\n", e.what());
  }
  try {
    std::printf("supported: %s\n", supported_architectures().c_str());
    if (device) check_supported(*device);
  } catch (const NoNvrtcError&) {
    std::printf("supported: %s or later, as far as the NVRTC in use can target (none loaded)\n",
                sm_name(kOldestSm).c_str());
  } catch (const std::runtime_error& e) {
    std::printf("  not this device: %s\n", e.what());
  }
  try {
    std::printf("disk cache: %s\n", cache_dir_line().c_str());
  } catch (const std::exception& e) {
    std::printf("disk cache: not usable: %s\n", e.what());
  }
  // The files shipped (each for the GPU its comment names; a plan uses only the decisions whose keys fit it).
  try {
    std::string files;
    for (const ShippedFile& f : shipped_files()) files += std::string(files.empty() ? "" : ", ") + f.name;
    if (!shipped_decisions_enabled())
      std::printf("shipped decisions: off (JITBMM_SHIPPED_DECISIONS)\n");
    else
      std::printf("shipped decisions: %zu in %s\n", shipped_decisions().products.size(),
                  files.empty() ? "no file" : files.c_str());
  } catch (const std::exception& e) {
    std::printf("shipped decisions: not usable: %s\n", e.what());
  }
  return 0;
}

} // namespace jitbmm::cli
