// NVRTC: generated source → cubin (for one exact sm_XY) or PTX. Thread-safe, no GPU needed.
#pragma once

#include <atomic>
#include <string>
#include <vector>

#include "generator/arch_features.hpp"
#include "generator/emit_source.hpp"

namespace jitbmm {

struct CompiledKernel {
  std::string name;
  std::string binary;               // cubin bytes, or PTX text for compile_to_ptx
  std::string log;                  // NVRTC log, including ptxas's resource report
  std::vector<std::string> options; // exactly what NVRTC was given
};

// Registers, spills and stack as ptxas reported them in an NVRTC log (-1 where the log does not say). Spills are
// summed over the functions read: an entry and those it calls, or the whole log.
struct PtxasResources {
  int registers = -1;
  int stack_bytes = -1;
  int spill_store_bytes = -1;
  int spill_load_bytes = -1;
  int shared_bytes = 0;
};
// With `kernel_name`, only that entry function's section of the log is read (with the functions it calls).
PtxasResources parse_ptxas_log(const std::string& log, const std::string& kernel_name = "");

// The options jitbmm compiles with for `arch` ("sm_90", "sm_90a") with `features` (the device code's JB_HAS_*
// macros; by default the architecture's own), and for a quick build (GeneratedKernel::quick) NVRTC's
// --Ofast-compile=mid where this NVRTC takes it; part of every cache key.
std::vector<std::string> compile_options(const std::string& arch, const ArchFeatures& features, bool quick = false);
std::vector<std::string> compile_options(const std::string& arch);
// Whether this NVRTC takes --Ofast-compile (asked once, with an empty program): where it does not, a quick build is
// an ordinary one.
bool nvrtc_compiles_fast();
// What NVRTC targets for a kernel on a GPU of `arch` ("sm_90" or "compute_90") with `features`: the arch itself, or
// for an architecture-specific kernel (wgmma) its "a" target; std::invalid_argument naming the kernel and what it
// needs when the features lack one of its needs.
std::string kernel_target(const GeneratedKernel& kernel, const std::string& arch, const ArchFeatures& features);
std::string kernel_target(const GeneratedKernel& kernel, const std::string& arch);

// Throws CompileError carrying the kernel name, options and log when NVRTC rejects the source. `arch` is the GPU's;
// both compile for kernel_target(kernel, arch).
// NVRTC 13.0 sometimes returns a cubin whose log lacks ptxas's resource report (registers, spills). With
// PtxasReport::wanted (inspect, the compile tests) such a kernel is compiled once more, alone in the process, to get
// it; plans and the tuner take the log as it comes (they read registers from the driver), since those retries
// serialise the tuner's parallel compiles (on the H100: 16 of 24 retried, a 5 s cold tune became 16 s).
enum class PtxasReport { as_given, wanted };
CompiledKernel compile_to_cubin(const GeneratedKernel& kernel, const std::string& arch,
                                PtxasReport report = PtxasReport::as_given);
CompiledKernel compile_to_cubin(const GeneratedKernel& kernel, const std::string& arch, const ArchFeatures& features,
                                PtxasReport report = PtxasReport::as_given);
CompiledKernel compile_to_ptx(const GeneratedKernel& kernel, const std::string& virtual_arch); // "compute_90"
CompiledKernel compile_to_ptx(const GeneratedKernel& kernel, const std::string& virtual_arch,
                              const ArchFeatures& features);

// "13.0": the NVRTC this process runs.
std::string nvrtc_version();
// The NVRTC build this process runs, as a cubin's cache key names it: its version (which gives no patch number) and
// the file loaded, its name and size, so that a patched NVRTC of the same version never meets another's binaries.
std::string nvrtc_build();

// The architectures this NVRTC can target, as numbers (75 for sm_75), in NVRTC's order.
std::vector<int> nvrtc_supported_archs();

// How many kernels this process has compiled with NVRTC (tests use it to prove reuse).
long nvrtc_compile_count();

} // namespace jitbmm
