// The JIT pipeline: spec → source (generator/) → the override and dump directories (runtime/kernel_files) → cubin
// (from the disk cache, cache/, else NVRTC, then stored) → module and entry points (the driver). Loaded kernels are
// kept per (context, spec) for the life of the process: one NVRTC compile and one module load each.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "jitbmm/kernel_spec.hpp"
#include "runtime/device.hpp"
#include "runtime/nvrtc_compiler.hpp"

namespace jitbmm {

struct LoadedKernel {
  GeneratedKernel generated;
  CompiledKernel compiled;
  PtxasResources resources;
  CUmodule module = nullptr;
  CUfunction function = nullptr; // the main entry point
  std::vector<std::pair<std::string, CUfunction>> entries; // every entry point by suffix (generated.entries)
  int registers = 0;             // as the driver reports for the main entry
  int sm_count = 0;              // the device's (persistent launches: Launch::blocks_per_sm)
  // Whether its launches may overlap the previous kernel of their stream: it waits for the grids before it
  // (GeneratedKernel::waits_for_prior_grids) on a device that has programmatic dependent launch (sm_90 on).
  bool dependent_launch = false;

  // The entry point <name><suffix>; std::logic_error when the module has none (a plan and its kernel disagree).
  CUfunction entry(const std::string& suffix) const;
};

// Returns the loaded kernel for `spec` on `device`, generating, compiling and loading it on first use. Concurrent
// callers asking for the same kernel wait for one compilation. Failures are not cached: a later call retries.
std::shared_ptr<const LoadedKernel> load_kernel(const DeviceInfo& device, const KernelSpec& spec);

// Compiles and loads a non-BMM kernel (probes) in the same way, keyed by its name.
std::shared_ptr<const LoadedKernel> load_generated(const DeviceInfo& device, const GeneratedKernel& kernel);

// Whether load_kernel or load_generated, asked on this thread, would find the kernel built or being built in this
// process, without building anything or reading an override (an override keeps the kernel's name): what building
// ahead skips.
bool kernel_known(const DeviceInfo& device, const GeneratedKernel& kernel);
bool kernel_known(const DeviceInfo& device, const KernelSpec& spec);

// While one lives on a thread, what load_kernel and load_generated load there are quick builds
// (GeneratedKernel::quick), kept apart from the optimised builds of the same kernels: a stand-in's kernels, which
// run only until its plan's optimised ones are built (runtime/chain_stand_in.hpp). build_ahead's threads take the
// scope of the thread that asked them. Scopes nest; QuickBuild(false) changes nothing.
class QuickBuild {
public:
  explicit QuickBuild(bool quick = true);
  ~QuickBuild();
  QuickBuild(const QuickBuild&) = delete;
  QuickBuild& operator=(const QuickBuild&) = delete;
  static bool active(); // on this thread

private:
  bool previous_;
};

} // namespace jitbmm
