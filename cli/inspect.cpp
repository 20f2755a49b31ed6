// jitbmm inspect / info: show what jitbmm generates and what it runs on.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <stdexcept>

#include "cache/kernel_cache.hpp"
#include "cli/args.hpp"
#include "cli/commands.hpp"
#include "cli/spec_args.hpp"
#include "generator/emit_source.hpp"
#include "generator/kernel_files.hpp"
#include "jitbmm/errors.hpp"
#include "jitbmm/kernel_spec.hpp"
#include "jitbmm/version.hpp"
#include "runtime/autotune.hpp"
#include "runtime/device.hpp"
#include "runtime/driver_api.hpp"
#include "runtime/nvrtc_compiler.hpp"

namespace jitbmm::cli {

namespace {

// Resident blocks and warps per SM for the kernel on this machine's GPU, when it has one of the same arch.
void print_occupancy(const GeneratedKernel& kernel, const std::string& arch, int threads) {
  std::shared_ptr<const DeviceInfo> device;
  try {
    device = current_device();
  } catch (const NoDriverError&) {
    std::printf("occupancy:   (no GPU here)\n");
    return;
  }
  if (device->arch() != arch) {
    std::printf("occupancy:   (this GPU is %s, not %s)\n", device->arch().c_str(), arch.c_str());
    return;
  }
  const auto loaded = load_generated(*device, kernel);
  int blocks = 0;
  check(driver().cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, loaded->function, threads, 0),
        "cuOccupancyMaxActiveBlocksPerMultiprocessor");
  std::printf("occupancy:   %d blocks of %d threads per SM = %d warps (%s, %d registers as loaded)\n", blocks, threads,
              blocks * threads / 32, device->name.c_str(), loaded->registers);
}

void print_resources(const GeneratedKernel& kernel, const std::string& arch, int threads) {
  const CompiledKernel c = compile_to_cubin(kernel, arch);
  const PtxasResources r = parse_ptxas_log(c.log, kernel.name);
  std::printf("kernel:      %s\narch:        %s\ncubin bytes: %zu\nregisters:   %d\nstack bytes: %d\n"
              "spill bytes: %d stored, %d loaded\nshared:      %d bytes static\n",
              kernel.name.c_str(), arch.c_str(), c.binary.size(), r.registers, r.stack_bytes, r.spill_store_bytes,
              r.spill_load_bytes, r.shared_bytes);
  print_occupancy(kernel, arch, threads);
  if (r.registers < 0)
    std::printf("(NVRTC returned no ptxas report for this kernel, so registers and spills are unknown here)\n");
  std::printf("ptxas log:\n%s\n", c.log.c_str());
}

// The directory holding `tool`: PATH first, then the CUDA toolkit's bin; empty when absent.
std::string find_tool(const std::string& tool) {
  std::string dirs = std::getenv("PATH") ? std::getenv("PATH") : "";
  dirs += ":/usr/local/cuda/bin";
  std::size_t pos = 0;
  while (pos <= dirs.size()) {
    const std::size_t end = std::min(dirs.find(':', pos), dirs.size());
    const std::string dir = dirs.substr(pos, end - pos);
    if (!dir.empty() && ::access((dir + "/" + tool).c_str(), X_OK) == 0) return dir + "/" + tool;
    pos = end + 1;
  }
  return "";
}

void print_sass(const GeneratedKernel& kernel, const std::string& arch) {
  const std::string nvdisasm = find_tool("nvdisasm");
  if (nvdisasm.empty()) {
    std::printf("// SASS unavailable: nvdisasm not found on PATH or in /usr/local/cuda/bin (it ships with the CUDA "
                "toolkit); --emit ptx works without it\n");
    return;
  }
  const CompiledKernel c = compile_to_cubin(kernel, arch);
  char path[] = "/tmp/jitbmm-sass-XXXXXX";
  const int fd = ::mkstemp(path);
  if (fd < 0) throw std::runtime_error("inspect: cannot create a temporary file for the cubin");
  const bool written = ::write(fd, c.binary.data(), c.binary.size()) == static_cast<ssize_t>(c.binary.size());
  ::close(fd);
  if (written) {
    std::printf("// SASS of %s for %s (nvdisasm)\n", kernel.name.c_str(), arch.c_str());
    std::fflush(stdout);
    const std::string command = "'" + nvdisasm + "' -c '" + path + "'";
    if (std::system(command.c_str()) != 0) std::printf("// nvdisasm failed on the cubin\n");
  }
  ::unlink(path);
  if (!written) throw std::runtime_error("inspect: cannot write the cubin to a temporary file");
}

// Which variant SemiringBMM::get would run for the problem on this GPU, where that choice came from, and the
// timings the autotuner compared. Never tunes.
int print_tuned(const Problem& p) {
  const auto device = current_device();
  const Choice c = choose(p, *device, TunePolicy::never);
  std::printf("problem:  %s\ndevice:   %s (%s, %d SMs)\nchoice:   %s\nsource:   %s\n", describe(p).c_str(),
              device->name.c_str(), device->arch().c_str(), device->sm_count, to_string(c.spec).c_str(),
              c.source == "default" ? "built-in default (no tuning decision stored for this problem's family; "
                                      "run jitbmm tune)"
                                    : (c.source + " decision").c_str());
  if (!c.decision) return 0;
  const Decision& d = *c.decision;
  std::printf("tuned:    %s (%s %s) in %.1f s\n", d.problem.c_str(), d.bucket ? "bucket" : "exact shape",
              to_string(d.shape).c_str(), d.seconds);
  std::printf("%10s  %s\n", "median ms", "best candidates compared");
  for (const CandidateResult& r : d.ranking) std::printf("%10.4f  %s\n", r.median_ms, to_string(r.spec).c_str());
  return 0;
}

} // namespace

int run_inspect(int argc, char** argv) {
  std::set<std::string> flags = spec_flags();
  flags.insert({"--arch", "--emit"});
  std::set<std::string> switches = spec_switches();
  switches.insert("--tuned");
  const Args args(argc, argv, 2, flags, switches);
  if (args.has("--tuned")) return print_tuned(problem_from(args));
  const KernelSpec spec = spec_from(args, problem_from(args));
  const GeneratedKernel kernel = with_override(emit_kernel(spec));
  const std::string arch = args.get("--arch", "sm_90");
  if (arch.rfind("sm_", 0) != 0) throw std::invalid_argument("--arch: expected sm_XY, got '" + arch + "'");
  const std::string emit = args.get("--emit", "cuda");
  const bool all = emit == "all";
  if (emit != "cuda" && emit != "ptx" && emit != "sass" && emit != "resources" && !all)
    throw std::invalid_argument("--emit: expected cuda, ptx, sass, resources or all, got '" + emit + "'");
  if (emit == "cuda" || all) std::cout << kernel.source;
  if (emit == "ptx" || all) std::cout << compile_to_ptx(kernel, "compute_" + arch.substr(3)).binary;
  if (emit == "sass" || all) print_sass(kernel, arch);
  if (emit == "resources" || all) print_resources(kernel, arch, spec.threads());
  if (dump_requested()) dump_kernel(kernel, compile_to_ptx(kernel, "compute_" + arch.substr(3)).binary);
  return 0;
}

int run_info(int argc, char** argv) {
  const Args args(argc, argv, 2, {}, {});
  std::printf("jitbmm %s, NVRTC %s\n", kVersion, nvrtc_version().c_str());
  try {
    const auto dev = current_device();
    std::printf("driver: CUDA %d.%d\ndevice %d: %s, %s, %d SMs, %.0f MHz\n", dev->driver_version / 1000,
                dev->driver_version % 1000 / 10, dev->ordinal, dev->name.c_str(), dev->arch().c_str(), dev->sm_count,
                dev->clock_khz / 1000.0);
  } catch (const NoDriverError& e) {
    std::printf("no GPU: %s\n", e.what());
  }
  return 0;
}

} // namespace jitbmm::cli
