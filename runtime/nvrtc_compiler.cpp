#include "runtime/nvrtc_compiler.hpp"

#include <algorithm>
#include <chrono>

#include "support/log.hpp"

#include "runtime/nvrtc_api.hpp"

#include <mutex>
#include <regex>
#include <shared_mutex>
#include <stdexcept>

#include "jitbmm/errors.hpp"

namespace jitbmm {

namespace {

std::atomic<long> g_compiles{0};
// Compiles run concurrently (shared); a retry for a missing ptxas report runs alone (exclusive).
std::shared_mutex g_compile_lock;
// Set once a retry also came back without a report: retrying further would only serialise compiles.
std::atomic<bool> g_reports_unreliable{false};

class Program {
public:
  // The name is absolute: NVRTC puts a relative one, made absolute with the compiling process's working directory,
  // into the line info of the PTX and the cubin, so binaries would differ between directories and a shared cache
  // would show where its users worked. The kernel has no file: the name only labels it (NVRTC's log, profilers).
  explicit Program(const GeneratedKernel& k) {
    const std::string name = "/jitbmm/" + k.name + ".cu";
    const nvrtcResult r = nvrtc().nvrtcCreateProgram(&prog_, k.source.c_str(), name.c_str(), 0, nullptr, nullptr);
    if (r != NVRTC_SUCCESS)
      throw CompileError("nvrtcCreateProgram failed for " + k.name + ": " + nvrtc().nvrtcGetErrorString(r), "");
  }
  ~Program() { nvrtc().nvrtcDestroyProgram(&prog_); }
  Program(const Program&) = delete;
  Program& operator=(const Program&) = delete;
  nvrtcProgram get() const { return prog_; }

  std::string log() const {
    std::size_t size = 0;
    if (nvrtc().nvrtcGetProgramLogSize(prog_, &size) != NVRTC_SUCCESS || size <= 1) return "";
    std::string log(size, '\0');
    nvrtc().nvrtcGetProgramLog(prog_, log.data());
    log.resize(size - 1);
    return log;
  }

private:
  nvrtcProgram prog_ = nullptr;
};

std::string join(const std::vector<std::string>& options) {
  std::string out;
  for (const auto& o : options) out += (out.empty() ? "" : " ") + o;
  return out;
}

CompiledKernel compile(const GeneratedKernel& kernel, std::vector<std::string> options, bool cubin) {
  Program prog(kernel);
  std::vector<const char*> argv;
  argv.reserve(options.size());
  for (const auto& o : options) argv.push_back(o.c_str());
  const nvrtcResult r = nvrtc().nvrtcCompileProgram(prog.get(), static_cast<int>(argv.size()), argv.data());
  CompiledKernel out{kernel.name, "", prog.log(), std::move(options)};
  if (r != NVRTC_SUCCESS)
    throw CompileError("NVRTC could not compile kernel " + kernel.name + " (" + nvrtc().nvrtcGetErrorString(r) +
                           ")\noptions: " + join(out.options) + "\nlog:\n" + out.log,
                       out.log);
  std::size_t size = 0;
  const nvrtcResult sr = cubin ? nvrtc().nvrtcGetCUBINSize(prog.get(), &size) : nvrtc().nvrtcGetPTXSize(prog.get(), &size);
  if (sr != NVRTC_SUCCESS || size == 0)
    throw CompileError("NVRTC produced no " + std::string(cubin ? "cubin" : "PTX") + " for " + kernel.name +
                           " (options: " + join(out.options) + "; a virtual architecture gives no cubin)",
                       out.log);
  out.binary.resize(size);
  if (cubin)
    nvrtc().nvrtcGetCUBIN(prog.get(), out.binary.data());
  else {
    nvrtc().nvrtcGetPTX(prog.get(), out.binary.data());
    if (!out.binary.empty() && out.binary.back() == '\0') out.binary.pop_back();
  }
  return out;
}

int match_int(const std::string& log, const std::regex& re) {
  std::smatch m;
  return std::regex_search(log, m, re) ? std::stoi(m[1].str()) : -1;
}
// The sum over every match (-1: none).
int sum_ints(const std::string& log, const std::regex& re) {
  int sum = -1;
  for (std::sregex_iterator it(log.begin(), log.end(), re), end; it != end; ++it)
    sum = (sum < 0 ? 0 : sum) + std::stoi((*it)[1].str());
  return sum;
}

} // namespace

// What a quick build adds: "mid" halves the compile of the sequential chain kernels and of a tiled product with no
// spill, where "max" stops inlining (every device function a call) and "min" saves about a third.
constexpr const char* kFastCompile = "--Ofast-compile=mid";

std::vector<std::string> compile_options(const std::string& arch, const ArchFeatures& features, bool quick) {
  std::vector<std::string> out = {"--gpu-architecture=" + arch, "-std=c++17", "-lineinfo", "--ptxas-options=-v"};
  for (std::string& d : feature_defines(features)) out.push_back(std::move(d));
  if (quick && nvrtc_compiles_fast()) out.push_back(kFastCompile);
  return out;
}

bool nvrtc_compiles_fast() {
  static const bool takes = [] {
    nvrtcProgram prog = nullptr;
    if (nvrtc().nvrtcCreateProgram(&prog, "", "/jitbmm/probe.cu", 0, nullptr, nullptr) != NVRTC_SUCCESS) return false;
    const char* options[] = {kFastCompile};
    const nvrtcResult r = nvrtc().nvrtcCompileProgram(prog, 1, options);
    nvrtc().nvrtcDestroyProgram(&prog);
    return r == NVRTC_SUCCESS;
  }();
  return takes;
}

std::vector<std::string> compile_options(const std::string& arch) {
  return compile_options(arch, arch_features(parse_sm(arch, "arch")));
}

std::string kernel_target(const GeneratedKernel& kernel, const std::string& arch, const ArchFeatures& features) {
  const ArchFeatures have = capped_features(parse_sm(arch, "arch"), features.sm);
  if (const std::string missing = missing_features(kernel.needs, have); !missing.empty())
    throw std::invalid_argument("kernel " + kernel.name + " needs " + missing + ", which " +
                                (have.sm < parse_sm(arch, "arch") ? "feature level " + sm_name(have.sm) + " on " : "") +
                                arch + " lacks; the tuner offers such specs only where they run: choose another");
  // wgmma exists on sm_90 alone (not on sm_100 and later), through the sm_90a target.
  return kernel.needs & kWgmma ? arch + "a" : arch;
}

std::string kernel_target(const GeneratedKernel& kernel, const std::string& arch) {
  return kernel_target(kernel, arch, arch_features(parse_sm(arch, "arch")));
}

CompiledKernel compile_to_cubin(const GeneratedKernel& kernel, const std::string& gpu_arch, PtxasReport wanted) {
  return compile_to_cubin(kernel, gpu_arch, arch_features(parse_sm(gpu_arch, "arch")), wanted);
}

CompiledKernel compile_to_cubin(const GeneratedKernel& kernel, const std::string& gpu_arch,
                                const ArchFeatures& features, PtxasReport wanted) {
  const std::string arch = kernel_target(kernel, gpu_arch, features);
  const std::vector<std::string> options =
      compile_options(arch, capped_features(parse_sm(gpu_arch, "arch"), features.sm), kernel.quick);
  const auto t0 = std::chrono::steady_clock::now();
  struct Report { // logs the compilation on every way out
    const GeneratedKernel& k;
    const std::string& arch;
    std::chrono::steady_clock::time_point t0;
    ~Report() {
      if (!log_enabled(LogLevel::debug)) return;
      const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
      log_message(LogLevel::debug, "NVRTC compiled " + k.name + (k.quick ? " (a quick build)" : "") + " for " + arch +
                                       " in " + std::to_string(ms.count()) + " ms");
    }
  } report{kernel, arch, t0};
  g_compiles.fetch_add(1);
  CompiledKernel out;
  {
    std::shared_lock<std::shared_mutex> lock(g_compile_lock);
    out = compile(kernel, options, true);
  }
  // On the GPU machine NVRTC 13.0 returned logs without ptxas's report: for single kernels, and for every kernel
  // of later processes (apparently binaries served from a compile cache, where ptxas never runs). Where the report
  // is wanted (it is how spills are caught), retry once, alone in this process, and stop retrying if that does not
  // bring it.
  if (wanted == PtxasReport::wanted && parse_ptxas_log(out.log, kernel.name).registers < 0 &&
      !g_reports_unreliable.load()) {
    if (log_enabled(LogLevel::debug))
      log_message(LogLevel::debug, "NVRTC gave no ptxas report for " + kernel.name + ": compiling it again, alone");
    std::unique_lock<std::shared_mutex> lock(g_compile_lock);
    out = compile(kernel, options, true);
    if (parse_ptxas_log(out.log, kernel.name).registers < 0) g_reports_unreliable = true;
  }
  return out;
}

CompiledKernel compile_to_ptx(const GeneratedKernel& kernel, const std::string& virtual_arch) {
  return compile_to_ptx(kernel, virtual_arch, arch_features(parse_sm(virtual_arch, "arch")));
}

CompiledKernel compile_to_ptx(const GeneratedKernel& kernel, const std::string& virtual_arch,
                              const ArchFeatures& features) {
  g_compiles.fetch_add(1);
  const ArchFeatures have = capped_features(parse_sm(virtual_arch, "arch"), features.sm);
  std::vector<std::string> options = compile_options(kernel_target(kernel, virtual_arch, have), have, kernel.quick);
  options.erase(std::remove(options.begin(), options.end(), "--ptxas-options=-v"), options.end()); // no ptxas runs
  return compile(kernel, options, false);
}

PtxasResources parse_ptxas_log(const std::string& full_log, const std::string& kernel_name) {
  // Only the report of `kernel_name` counts, so another function's report can never be taken for it. Its section
  // runs to the next entry's and lists the functions it calls (not inlined) after it: their spills are its spills.
  std::string log = full_log;
  if (!kernel_name.empty()) {
    const std::size_t at = full_log.find("Compiling entry function '" + kernel_name + "'");
    if (at == std::string::npos) return PtxasResources{};
    const std::size_t next = full_log.find("Compiling entry function", at + 1);
    log = full_log.substr(at, next == std::string::npos ? std::string::npos : next - at);
  }
  PtxasResources r;
  r.registers = match_int(log, std::regex(R"(Used (\d+) registers)"));
  r.stack_bytes = match_int(log, std::regex(R"((\d+) bytes stack frame)"));
  r.spill_store_bytes = sum_ints(log, std::regex(R"((\d+) bytes spill stores)"));
  r.spill_load_bytes = sum_ints(log, std::regex(R"((\d+) bytes spill loads)"));
  const int smem = match_int(log, std::regex(R"((\d+) bytes smem)"));
  r.shared_bytes = smem < 0 ? 0 : smem;
  return r;
}

std::string nvrtc_version() {
  int major = 0, minor = 0;
  nvrtc().nvrtcVersion(&major, &minor);
  return std::to_string(major) + "." + std::to_string(minor);
}

std::string nvrtc_build() {
  // never destroyed: a background build may still use it as the process exits
  static const std::string& build = *new std::string([] {
    const NvrtcApi& api = nvrtc();
    return nvrtc_version() + " " + api.library.substr(api.library.rfind('/') + 1) + " " + api.library_size;
  }());
  return build;
}

std::vector<int> nvrtc_supported_archs() {
  int count = 0;
  if (nvrtc().nvrtcGetNumSupportedArchs(&count) != NVRTC_SUCCESS || count <= 0)
    throw std::runtime_error("nvrtcGetNumSupportedArchs failed");
  std::vector<int> archs(static_cast<std::size_t>(count));
  if (nvrtc().nvrtcGetSupportedArchs(archs.data()) != NVRTC_SUCCESS)
    throw std::runtime_error("nvrtcGetSupportedArchs failed");
  return archs;
}

long nvrtc_compile_count() { return g_compiles.load(); }

} // namespace jitbmm
