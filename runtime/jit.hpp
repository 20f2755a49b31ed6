// The JIT pipeline: spec → source (generator/) → the override and dump directories (runtime/kernel_files) → cubin
// (from the disk cache, cache/, else NVRTC, then stored) → module and entry points (the driver). Loaded kernels are
// kept per (context, spec) for the life of the process: one NVRTC compile and one module load each.
#pragma once

#include <memory>

#include "jitbmm/kernel_spec.hpp"
#include "runtime/device.hpp"
#include "runtime/nvrtc_compiler.hpp"

namespace jitbmm {

struct LoadedKernel {
  GeneratedKernel generated;
  CompiledKernel compiled;
  PtxasResources resources;
  CUmodule module = nullptr;
  CUfunction function = nullptr;
  CUfunction combine = nullptr; // split-K's second pass (<name>_combine), when the module has one
  CUfunction store = nullptr;   // backward: workspace → gradient (<name>_store), when the module has one
  CUfunction prepare = nullptr; // exp_matmul: maxima and exponentiated operands (<name>_prepare)
  CUfunction repair = nullptr;  // exp_matmul: the direct kernel on flagged tiles (<name>_repair)
  int registers = 0;            // as the driver reports for the loaded function
};

// Returns the loaded kernel for `spec` on `device`, generating, compiling and loading it on first use. Concurrent
// callers asking for the same kernel wait for one compilation. Failures are not cached: a later call retries.
std::shared_ptr<const LoadedKernel> load_kernel(const DeviceInfo& device, const KernelSpec& spec);

// Compiles and loads a non-BMM kernel (probes) in the same way, keyed by its name.
std::shared_ptr<const LoadedKernel> load_generated(const DeviceInfo& device, const GeneratedKernel& kernel);

} // namespace jitbmm
