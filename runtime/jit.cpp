#include "runtime/jit.hpp"

#include "support/log.hpp"

#include <chrono>
#include <future>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>

#include "cache/disk_cache.hpp"
#include "cache/key_lock.hpp"
#include "jitbmm/errors.hpp"
#include "jitbmm/version.hpp"
#include "runtime/kernel_files.hpp"

namespace jitbmm {

namespace {

// Context id (DeviceInfo::context_id), kernel name (which carries the source hash) and whether a quick build.
using Key = std::tuple<unsigned long long, std::string, bool>;

thread_local bool t_quick = false;
using Entry = std::shared_future<std::shared_ptr<const LoadedKernel>>;

// How long a process waits for another that compiles the same kernel into the same cache directory before it
// compiles the kernel itself: longer than the longest compile, so that a holder that hangs costs no more than this.
constexpr auto kCompileWait = std::chrono::seconds(60);

// The cubin from the disk cache when a valid entry exists for everything that shapes it, else from NVRTC (and
// then stored, with its source beside it). A process that misses takes the directory's lock on compiling the
// kernel first and looks again, so that processes started together (a job's ranks) compile it once.
CompiledKernel compiled_cubin(const DeviceInfo& device, const GeneratedKernel& kernel) {
  DiskCache* disk = DiskCache::process_cache();
  const std::vector<std::string> options =
      compile_options(kernel_target(kernel, device.arch(), device.features), device.features, kernel.quick);
  const std::string key =
      cubin_key({kernel.source, options, nvrtc_build(), device.arch(), device.driver_version, kVersion});
  const auto cached = [&]() -> std::optional<CompiledKernel> {
    std::optional<std::string> cubin = disk->get(key, "cubin");
    if (!cubin) return std::nullopt;
    log_message(LogLevel::debug, "disk cache hit: " + kernel.name + " (" + key.substr(0, 16) + "...)");
    return CompiledKernel{kernel.name, std::move(*cubin), "(loaded from the disk cache: " + disk->dir() + ")", options};
  };
  KeyLock compiling;
  // Let go, its file removed, however the compile ends.
  struct EndCompile {
    DiskCache* disk;
    KeyLock& lock;
    const std::string& key;
    ~EndCompile() {
      if (disk) disk->end_compile(lock, key);
    }
  } end_compile{disk, compiling, key};
  if (disk) {
    if (std::optional<CompiledKernel> hit = cached()) return std::move(*hit);
    log_message(LogLevel::debug, "disk cache miss: " + kernel.name);
    compiling = disk->compile_lock(key, kCompileWait, [&](const std::string& holder) {
      log_message(LogLevel::debug, "waiting for " + KeyLock::holder_words(holder) + ", which compiles " + kernel.name);
    });
    if (compiling.held())
      if (std::optional<CompiledKernel> hit = cached()) return std::move(*hit);
  }
  CompiledKernel compiled = compile_to_cubin(kernel, device.arch(), device.features);
  if (disk && disk->put(key, "cubin", compiled.binary)) {
    disk->put_source(key, kernel.source);
    disk->evict(disk->cap_bytes());
  }
  return compiled;
}

std::shared_ptr<const LoadedKernel> build(const DeviceInfo& device, const GeneratedKernel& kernel) {
  auto loaded = std::make_shared<LoadedKernel>();
  loaded->generated = kernel;
  loaded->sm_count = device.sm_count;
  loaded->dependent_launch = kernel.waits_for_prior_grids && device.cc_major >= 9;
  loaded->compiled = compiled_cubin(device, kernel);
  loaded->resources = parse_ptxas_log(loaded->compiled.log, kernel.name);
  const DriverApi& d = driver();
  ScopedContext scope(device.context);
  const CUresult loaded_module = d.cuModuleLoadData(&loaded->module, loaded->compiled.binary.data());
  // 222, CUDA_ERROR_UNSUPPORTED_PTX_VERSION: code of a newer CUDA than the driver's (JITBMM_NVRTC_LIBRARY's NVRTC).
  check(loaded_module, ("cuModuleLoadData(" + kernel.name + ")" +
                        (int(loaded_module) == 222 ? " (NVRTC " + nvrtc_version() + "'s code, newer than the driver's "
                                                     "CUDA " + std::to_string(device.driver_version / 1000) +
                                                     ": use the NVRTC of the driver's CUDA)"
                                                   : ""))
                           .c_str());
  try { // the module goes with a failure: nothing keeps it
    // The entry points the generator declared (an override must define the same ones).
    for (const std::string& suffix : kernel.entries) {
      const std::string name = kernel.name + suffix;
      CUfunction f = nullptr;
      check(d.cuModuleGetFunction(&f, loaded->module, name.c_str()), ("cuModuleGetFunction(" + name + ")").c_str());
      loaded->entries.emplace_back(suffix, f);
    }
    loaded->function = loaded->entry("");
    check(d.cuFuncGetAttribute(&loaded->registers, CU_FUNC_ATTRIBUTE_NUM_REGS, loaded->function),
          "cuFuncGetAttribute(NUM_REGS)");
  } catch (...) {
    d.cuModuleUnload(loaded->module);
    throw;
  }
  return loaded; // modules stay loaded for the life of the process, like the cache that owns them
}

// A quick build only saves time: one NVRTC refuses is built the ordinary way instead, so that nothing fails for it.
std::shared_ptr<const LoadedKernel> build_quick_or_optimised(const DeviceInfo& device, GeneratedKernel kernel) {
  if (!kernel.quick) return build(device, kernel);
  try {
    return build(device, kernel);
  } catch (const CompileError& e) {
    log_message(LogLevel::debug, "the quick build of " + kernel.name + " failed (" + e.what() +
                                     "); building it optimised instead");
    kernel.quick = false;
    return build(device, kernel);
  }
}

} // namespace

CUfunction LoadedKernel::entry(const std::string& suffix) const {
  for (const auto& [name, f] : entries)
    if (name == suffix) return f;
  throw std::logic_error("kernel " + generated.name + " has no entry point '" + generated.name + suffix + "'");
}

namespace {

// The kernels load_generated built or is building, by Key, and load_kernel's by spec.
struct Loads {
  std::mutex mutex;
  std::map<Key, Entry> entries;
};
Loads& generated_loads() {
  static auto* loads = new Loads(); // never destroyed: modules must outlive static teardown
  return *loads;
}
struct SpecLoads {
  std::mutex mutex;
  std::map<Key, std::shared_ptr<const LoadedKernel>> loaded;
};
SpecLoads& spec_loads() {
  static auto* loads = new SpecLoads();
  return *loads;
}

} // namespace

std::shared_ptr<const LoadedKernel> load_generated(const DeviceInfo& device, const GeneratedKernel& generated) {
  check_supported(device);
  GeneratedKernel kernel = with_override(generated);
  kernel.quick = kernel.quick || t_quick;
  std::mutex& mutex = generated_loads().mutex;
  std::map<Key, Entry>* entries = &generated_loads().entries;
  const Key key{device.context_id, kernel.name, kernel.quick};
  std::promise<std::shared_ptr<const LoadedKernel>> promise;
  Entry existing;
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = entries->find(key);
    if (it != entries->end())
      existing = it->second;
    else
      entries->emplace(key, promise.get_future().share());
  }
  if (existing.valid()) return existing.get(); // built, or being built by another thread
  try {
    if (dump_requested())
      dump_kernel(kernel, compile_to_ptx(kernel, "compute_" + device.arch().substr(3), device.features).binary);
    auto loaded = build_quick_or_optimised(device, kernel);
    promise.set_value(loaded);
    return loaded;
  } catch (...) {
    promise.set_exception(std::current_exception());
    std::lock_guard<std::mutex> lock(mutex);
    entries->erase(key);
    throw;
  }
}

std::shared_ptr<const LoadedKernel> load_kernel(const DeviceInfo& device, const KernelSpec& spec) {
  // Every get() lands here: remember what each spec loaded, so a repeat skips generating and hashing the source.
  std::mutex& mutex = spec_loads().mutex;
  std::map<Key, std::shared_ptr<const LoadedKernel>>* loaded = &spec_loads().loaded;
  const Key key{device.context_id, to_string(spec), t_quick};
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = loaded->find(key);
    if (it != loaded->end()) return it->second;
  }
  auto kernel = load_generated(device, emit_kernel(spec));
  std::lock_guard<std::mutex> lock(mutex);
  return loaded->emplace(key, std::move(kernel)).first->second;
}

bool kernel_known(const DeviceInfo& device, const GeneratedKernel& kernel) {
  Loads& loads = generated_loads();
  std::lock_guard<std::mutex> lock(loads.mutex);
  return loads.entries.count(Key{device.context_id, kernel.name, kernel.quick || t_quick}) != 0;
}

bool kernel_known(const DeviceInfo& device, const KernelSpec& spec) {
  SpecLoads& loads = spec_loads();
  const Key key{device.context_id, to_string(spec), t_quick};
  std::lock_guard<std::mutex> lock(loads.mutex);
  return loads.loaded.count(key) != 0;
}

QuickBuild::QuickBuild(bool quick) : previous_(t_quick) { t_quick = t_quick || quick; }

QuickBuild::~QuickBuild() { t_quick = previous_; }

bool QuickBuild::active() { return t_quick; }

} // namespace jitbmm
