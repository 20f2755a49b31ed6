// libjitbmm_fake_cuda.so: a stand-in for libcuda.so.1, loaded through $JITBMM_LIBCUDA, so CI machines without a GPU
// exercise jitbmm's host paths with a driver present: validation, plan creation, the tuning choice, the disk cache,
// the C ABI. It exports every entry point runtime/driver_api.hpp lists, under the names the loader asks for (cuda.h's
// macros turn the definitions below into cuMemAlloc_v2 etc.). It computes nothing.
//
// What it does:
// - one device, "Fake H100", sm_90, with an H100's limits (132 SMs, 227 KiB shared memory a block opt-in, ...); an
//   attribute it does not know is CUDA_ERROR_INVALID_VALUE, so a new query fails loudly rather than reading 0;
//   $JITBMM_FAKE_CUDA_SM (digits: "61" for sm_61) gives it another compute capability and the name "Fake sm_61"
//   (the limits stay an H100's); a value that is not 2 or 3 digits makes the capability queries fail;
//   $JITBMM_FAKE_CUDA_DRIVER (digits, default 13000) the CUDA version cuDriverGetVersion reports;
// - a primary context and a per-thread context stack; cuCtxGetId gives the context's id, which
//   cuDevicePrimaryCtxReset (which jitbmm never calls: a test stands in for the program that does) changes, as a real
//   reset makes the primary context anew at the same address; a function of a module loaded before the reset is then
//   dead, and launching it is CUDA_ERROR_CONTEXT_IS_DESTROYED;
// - device memory is host memory (aligned, capped at $JITBMM_FAKE_CUDA_MEMORY_BYTES, default 2 GiB, which
//   cuMemGetInfo and cuDeviceTotalMem report as the total, less what is allocated as free); copies and
//   memsets check that the whole range lies in one allocation (CUDA_ERROR_INVALID_VALUE otherwise) and then run;
//   the asynchronous forms run synchronously; pinned host memory is plain host memory;
// - cuModuleLoadData accepts only an ELF image (magic, 64-bit, header in range) and appends "load <sha256> <bytes>"
//   to the file $JITBMM_FAKE_CUDA_LOG names (if any), the SHA-256 taken over the image as its ELF header sizes it;
//   jitbmm_fake_cuda_modules_loaded() counts the modules loaded (the C ABI fuzz's watchdog counts one as progress),
//   jitbmm_fake_cuda_live_streams() the streams created and not destroyed;
// - cuModuleGetFunction succeeds for any name; cuLaunchKernel checks the launch geometry against the device's limits
//   (as the driver does), appends "launch <kernel> grid=x,y,z block=x,y,z" to the log and does nothing else;
//   cuLaunchKernelEx does the same, the line ending in " programmatic" where the launch may overlap the one before
//   and " cluster=n" where its blocks are clusters of n (from sm_90 on; the grid a multiple of n, n at most 8);
//   with $JITBMM_FAKE_CUDA_FAIL_LAUNCH=1 every launch returns CUDA_ERROR_LAUNCH_FAILED instead;
// - cuStreamIsCapturing says every stream is being captured into a graph while $JITBMM_FAKE_CUDA_CAPTURING=1, else
//   none (nothing else changes: launches still run); cuThreadExchangeStreamCaptureMode keeps a mode a thread and
//   logs "capture-mode <n>" with the mode set; a module loaded meanwhile on a thread left in the global mode, which
//   CUDA refuses and which ends a capture in that mode on any thread, is logged "capture-broken" (and still loads), as
//   is cuCtxSynchronize meanwhile on any thread (CUDA refuses it while a stream of the context is captured);
// - memory pools hand out host memory like cuMemAlloc and append "pool-alloc <bytes>" to the log; a pool's reserved
//   size is the most its allocations held at once until cuMemPoolTrimTo ("pool-trim <bytes>") lowers it;
// - events: every one has completed (cuEventQuery succeeds), elapsed time is always 0.5 ms; occupancy is always 1 block
//   an SM, and as many clusters as the SMs hold from sm_90 on (none before).
//
// Since no kernel runs, outputs hold whatever was there, and the autotuner (which checks every candidate against the
// CPU reference) finds no correct candidate: autotune() throws "autotune: no correct candidate", and a plan that tuned
// warns once and runs its default variant, storing nothing, after compiling every candidate for nothing. The tests
// using this library therefore plan with JITBMM_TUNE=never, and test that failure on purpose.
#include <cuda.h>
#include <fcntl.h>
#include <openssl/sha.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

struct CUctx_st {
  CUdevice device = 0;
  std::atomic<unsigned long long> id{1}; // changed by cuDevicePrimaryCtxReset
};
struct CUfunc_st {
  std::string name;
  CUctx_st* context = nullptr;       // where its module was loaded
  unsigned long long context_id = 0; // and that context's id then
};
struct CUmod_st {
  std::map<std::string, std::unique_ptr<CUfunc_st>> functions;
  CUctx_st* context = nullptr;
  unsigned long long context_id = 0;
};
struct CUevent_st {};
struct CUmemPoolHandle_st {
  std::size_t reserved = 0;
};
struct CUstream_st {};

namespace {

constexpr int kSmCount = 132;
constexpr int kMaxThreadsPerBlock = 1024;
constexpr int kSharedPerBlock = 48 * 1024;
constexpr int kSharedPerBlockOptin = 227 * 1024;
constexpr int kSharedPerSm = 228 * 1024;
constexpr float kEventMs = 0.5f;

std::mutex g_mutex;
CUctx_st g_primary;
std::map<uintptr_t, std::size_t> g_allocations; // base → bytes
std::size_t g_allocated = 0;
// Each thread's stack of current contexts, of plain arrays that nothing destroys: at the process's end the library's
// exit handlers (the background builds' waits, releasing the plans they made) still push and pop after the main
// thread's thread_local objects are gone, as a real driver allows.
constexpr int kContextDepth = 64;
thread_local CUcontext t_contexts[kContextDepth];
thread_local int t_depth = 0;
thread_local bool g_programmatic_launch = false; // the launch in progress came through cuLaunchKernelEx's attribute
thread_local unsigned g_launch_cluster = 0;      // and its blocks a cluster, where they are
std::mutex g_pool_mutex; // guards the pools and the two below
std::map<CUdeviceptr, std::size_t> g_pool_allocations;
std::size_t g_pool_in_use = 0;
std::atomic<long> g_modules_loaded{0};
std::atomic<long> g_live_streams{0};
thread_local CUstreamCaptureMode t_capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

// Whether every stream is being captured now ($JITBMM_FAKE_CUDA_CAPTURING=1).
bool capturing() {
  const char* v = std::getenv("JITBMM_FAKE_CUDA_CAPTURING");
  return v && std::strcmp(v, "1") == 0;
}

// The compute capability as major * 10 + minor: 90, or $JITBMM_FAKE_CUDA_SM; 0 when that is malformed.
int fake_sm() {
  const char* v = std::getenv("JITBMM_FAKE_CUDA_SM");
  if (!v || !*v) return 90;
  const std::size_t n = std::strlen(v);
  if (n < 2 || n > 3 || std::strspn(v, "0123456789") != n || v[0] == '0') return 0;
  return std::atoi(v);
}

std::size_t memory_cap() {
  const char* v = std::getenv("JITBMM_FAKE_CUDA_MEMORY_BYTES");
  return v && *v ? std::strtoull(v, nullptr, 10) : std::size_t(2) << 30;
}

void log_line(const std::string& line) {
  const char* path = std::getenv("JITBMM_FAKE_CUDA_LOG");
  if (!path || !*path) return;
  const int fd = ::open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) return;
  const std::string text = line + "\n";
  (void)!::write(fd, text.data(), text.size()); // one write with O_APPEND: lines of several processes never mix
  ::close(fd);
}

// True when [ptr, ptr + bytes) lies inside one allocation.
bool in_allocation(CUdeviceptr ptr, std::size_t bytes) {
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_allocations.upper_bound(static_cast<uintptr_t>(ptr));
  if (it == g_allocations.begin()) return false;
  --it;
  const uintptr_t offset = static_cast<uintptr_t>(ptr) - it->first;
  return offset <= it->second && bytes <= it->second - offset;
}

CUresult allocate(CUdeviceptr* ptr, std::size_t bytes) {
  if (!ptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  constexpr std::size_t kAlign = 256;
  if (bytes > memory_cap()) return CUDA_ERROR_OUT_OF_MEMORY;
  const std::size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_allocated + rounded > memory_cap()) return CUDA_ERROR_OUT_OF_MEMORY;
  void* p = std::aligned_alloc(kAlign, rounded);
  if (!p) return CUDA_ERROR_OUT_OF_MEMORY;
  g_allocations[reinterpret_cast<uintptr_t>(p)] = bytes;
  g_allocated += rounded;
  *ptr = reinterpret_cast<CUdeviceptr>(p);
  return CUDA_SUCCESS;
}

CUresult release(CUdeviceptr ptr) {
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_allocations.find(static_cast<uintptr_t>(ptr));
  if (it == g_allocations.end()) return CUDA_ERROR_INVALID_VALUE;
  g_allocated -= (it->second + 255) / 256 * 256;
  std::free(reinterpret_cast<void*>(it->first));
  g_allocations.erase(it);
  return CUDA_SUCCESS;
}

CUresult fill(CUdeviceptr dst, const void* pattern, std::size_t size, std::size_t count) {
  if (count > SIZE_MAX / size || !in_allocation(dst, count * size)) return CUDA_ERROR_INVALID_VALUE;
  auto* out = reinterpret_cast<unsigned char*>(dst);
  for (std::size_t i = 0; i < count; ++i) std::memcpy(out + i * size, pattern, size);
  return CUDA_SUCCESS;
}

// The size of an ELF64 image as its header says (the furthest of the section and program header tables), or 0 when
// the bytes are not a plausible ELF64 image.
std::size_t elf_image_bytes(const void* image) {
  const auto* h = static_cast<const unsigned char*>(image);
  if (std::memcmp(h,
                  "\x7f"
                  "ELF",
                  4) != 0 ||
      h[4] != 2 /* ELFCLASS64 */)
    return 0;
  auto u64 = [&](int at) {
    uint64_t v;
    std::memcpy(&v, h + at, 8);
    return v;
  };
  auto u16 = [&](int at) {
    uint16_t v;
    std::memcpy(&v, h + at, 2);
    return uint64_t(v);
  };
  const uint64_t ph_end = u64(0x20) + u16(0x36) * u16(0x38), sh_end = u64(0x28) + u16(0x3a) * u16(0x3c);
  const uint64_t end = std::max<uint64_t>({64, ph_end, sh_end});
  return end < (uint64_t(1) << 30) ? static_cast<std::size_t>(end) : 0;
}

std::string sha256_hex(const void* bytes, std::size_t n) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(static_cast<const unsigned char*>(bytes), n, digest);
  std::string hex;
  char two[3];
  for (unsigned char c : digest) std::snprintf(two, sizeof two, "%02x", c), hex += two;
  return hex;
}

CUcontext current() { return t_depth == 0 ? nullptr : t_contexts[t_depth - 1]; }

} // namespace

extern "C" {

CUresult CUDAAPI cuInit(unsigned int flags) { return flags == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE; }

CUresult CUDAAPI cuDriverGetVersion(int* version) {
  if (!version) return CUDA_ERROR_INVALID_VALUE;
  const char* v = std::getenv("JITBMM_FAKE_CUDA_DRIVER");
  *version = v && *v ? std::atoi(v) : 13000;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGetErrorName(CUresult error, const char** name) {
  if (!name) return CUDA_ERROR_INVALID_VALUE;
  switch (error) {
#define FAKE_NAME(e)                                                                                                   \
  case e:                                                                                                              \
    *name = #e;                                                                                                        \
    return CUDA_SUCCESS;
    FAKE_NAME(CUDA_SUCCESS)
    FAKE_NAME(CUDA_ERROR_INVALID_VALUE)
    FAKE_NAME(CUDA_ERROR_OUT_OF_MEMORY) FAKE_NAME(CUDA_ERROR_INVALID_DEVICE) FAKE_NAME(CUDA_ERROR_INVALID_IMAGE)
        FAKE_NAME(CUDA_ERROR_INVALID_CONTEXT) FAKE_NAME(CUDA_ERROR_INVALID_HANDLE) FAKE_NAME(CUDA_ERROR_LAUNCH_FAILED)
            FAKE_NAME(CUDA_ERROR_NOT_SUPPORTED) FAKE_NAME(CUDA_ERROR_CONTEXT_IS_DESTROYED)
#undef FAKE_NAME
                default : * name = nullptr;
    return CUDA_ERROR_INVALID_VALUE;
  }
}

CUresult CUDAAPI cuGetErrorString(CUresult error, const char** text) {
  const CUresult r = cuGetErrorName(error, text);
  if (r == CUDA_SUCCESS) *text = "reported by jitbmm's fake CUDA driver";
  return r;
}

CUresult CUDAAPI cuDeviceGetCount(int* count) {
  if (!count) return CUDA_ERROR_INVALID_VALUE;
  *count = 1;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGet(CUdevice* device, int ordinal) {
  if (!device || ordinal != 0) return CUDA_ERROR_INVALID_DEVICE;
  *device = 0;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetName(char* name, int len, CUdevice device) {
  if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (device != 0) return CUDA_ERROR_INVALID_DEVICE;
  const char* sm = std::getenv("JITBMM_FAKE_CUDA_SM");
  if (sm && *sm)
    std::snprintf(name, static_cast<std::size_t>(len), "Fake sm_%s", sm);
  else
    std::snprintf(name, static_cast<std::size_t>(len), "%s", "Fake H100");
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetAttribute(int* value, CUdevice_attribute attribute, CUdevice device) {
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  if (device != 0) return CUDA_ERROR_INVALID_DEVICE;
  switch (attribute) {
  case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
  case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
    if (fake_sm() == 0) return CUDA_ERROR_INVALID_VALUE;
    *value = attribute == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR ? fake_sm() / 10 : fake_sm() % 10;
    break;
  case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
    *value = kSmCount;
    break;
  case CU_DEVICE_ATTRIBUTE_CLOCK_RATE:
    *value = 1980000;
    break; // kHz
  case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
    *value = kMaxThreadsPerBlock;
    break;
  case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR:
    *value = 2048;
    break;
  case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK:
    *value = kSharedPerBlock;
    break;
  case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN:
    *value = kSharedPerBlockOptin;
    break;
  case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR:
    *value = kSharedPerSm;
    break;
  case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK:
    *value = 65536;
    break;
  case CU_DEVICE_ATTRIBUTE_WARP_SIZE:
    *value = 32;
    break;
  case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE:
    *value = 50 << 20;
    break;
  case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X:
    *value = INT32_MAX;
    break;
  case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y:
    *value = 65535;
    break;
  case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z:
    *value = 65535;
    break;
  case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X:
    *value = 1024;
    break;
  case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y:
    *value = 1024;
    break;
  case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z:
    *value = 64;
    break;
  default:
    return CUDA_ERROR_INVALID_VALUE; // not modelled: fail loudly, never a made-up 0
  }
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext* ctx, CUdevice device) {
  if (!ctx) return CUDA_ERROR_INVALID_VALUE;
  if (device != 0) return CUDA_ERROR_INVALID_DEVICE;
  *ctx = &g_primary;
  return CUDA_SUCCESS;
}

// The primary context made anew: a new id at the same address, the functions of its modules dead.
CUresult CUDAAPI cuDevicePrimaryCtxReset(CUdevice device) {
  if (device != 0) return CUDA_ERROR_INVALID_DEVICE;
  static std::atomic<unsigned long long> next{2};
  g_primary.id.store(next.fetch_add(1));
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetId(CUcontext ctx, unsigned long long* id) {
  if (!id) return CUDA_ERROR_INVALID_VALUE;
  if (!ctx) ctx = current();
  if (!ctx) return CUDA_ERROR_INVALID_CONTEXT;
  *id = ctx->id.load();
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetCurrent(CUcontext* ctx) {
  if (!ctx) return CUDA_ERROR_INVALID_VALUE;
  *ctx = current();
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx) {
  if (t_depth == 0) t_depth = 1;
  t_contexts[t_depth - 1] = ctx;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxPushCurrent(CUcontext ctx) {
  if (!ctx) return CUDA_ERROR_INVALID_CONTEXT;
  if (t_depth == kContextDepth) return CUDA_ERROR_OUT_OF_MEMORY;
  t_contexts[t_depth++] = ctx;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxPopCurrent(CUcontext* ctx) {
  if (t_depth == 0) return CUDA_ERROR_INVALID_CONTEXT;
  if (ctx) *ctx = t_contexts[t_depth - 1];
  --t_depth;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetDevice(CUdevice* device) {
  if (!device) return CUDA_ERROR_INVALID_VALUE;
  if (!current()) return CUDA_ERROR_INVALID_CONTEXT;
  *device = current()->device;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxSynchronize(void) {
  if (capturing()) log_line("capture-broken"); // CUDA refuses it while a stream of the context is captured
  return current() ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

long jitbmm_fake_cuda_modules_loaded() { return g_modules_loaded.load(); }
long jitbmm_fake_cuda_live_streams() { return g_live_streams.load(); }

CUresult CUDAAPI cuModuleLoadData(CUmodule* module, const void* image) {
  if (!module || !image) return CUDA_ERROR_INVALID_VALUE;
  if (!current()) return CUDA_ERROR_INVALID_CONTEXT;
  const std::size_t bytes = elf_image_bytes(image);
  if (bytes == 0) return CUDA_ERROR_INVALID_IMAGE;
  log_line("load " + sha256_hex(image, bytes) + " " + std::to_string(bytes));
  if (capturing() && t_capture_mode == CU_STREAM_CAPTURE_MODE_GLOBAL) log_line("capture-broken");
  g_modules_loaded.fetch_add(1);
  *module = new CUmod_st;
  (*module)->context = current();
  (*module)->context_id = current()->id.load();
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuModuleUnload(CUmodule module) {
  if (!module) return CUDA_ERROR_INVALID_HANDLE;
  delete module;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuModuleGetFunction(CUfunction* function, CUmodule module, const char* name) {
  if (!function || !module || !name) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g_mutex);
  auto& slot = module->functions[name];
  if (!slot) slot = std::make_unique<CUfunc_st>(CUfunc_st{name, module->context, module->context_id});
  *function = slot.get();
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuFuncGetAttribute(int* value, CUfunction_attribute attribute, CUfunction function) {
  if (!value || !function) return CUDA_ERROR_INVALID_VALUE;
  switch (attribute) {
  case CU_FUNC_ATTRIBUTE_NUM_REGS:
    *value = 64;
    break;
  case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
    *value = kMaxThreadsPerBlock;
    break;
  case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES:
  case CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES:
  case CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES:
    *value = 0;
    break;
  default:
    return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuFuncSetAttribute(CUfunction function, CUfunction_attribute attribute, int value) {
  if (!function) return CUDA_ERROR_INVALID_HANDLE;
  if (attribute == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES && (value < 0 || value > kSharedPerBlockOptin))
    return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                                unsigned int by, unsigned int bz, unsigned int shared_bytes, CUstream, void** params,
                                void** extra) {
  if (!f) return CUDA_ERROR_INVALID_HANDLE;
  if (!current()) return CUDA_ERROR_INVALID_CONTEXT;
  if (f->context && f->context->id.load() != f->context_id) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  const uint64_t threads = uint64_t(bx) * by * bz;
  if (gx == 0 || gy == 0 || gz == 0 || gx > INT32_MAX || gy > 65535 || gz > 65535 || threads == 0 ||
      threads > kMaxThreadsPerBlock || bz > 64 || shared_bytes > unsigned(kSharedPerBlockOptin) || (!params && !extra))
    return CUDA_ERROR_INVALID_VALUE;
  const char* fail = std::getenv("JITBMM_FAKE_CUDA_FAIL_LAUNCH");
  const bool failing = fail && std::strcmp(fail, "1") == 0;
  log_line(std::string(failing ? "launch-failed " : "launch ") + f->name + " grid=" + std::to_string(gx) + "," +
           std::to_string(gy) + "," + std::to_string(gz) + " block=" + std::to_string(bx) + "," + std::to_string(by) +
           "," + std::to_string(bz) + (g_programmatic_launch ? " programmatic" : "") +
           (g_launch_cluster ? " cluster=" + std::to_string(g_launch_cluster) : ""));
  return failing ? CUDA_ERROR_LAUNCH_FAILED : CUDA_SUCCESS;
}

// A cluster of `dim` blocks as the driver takes one for a grid of gx blocks: from sm_90 on, at most 8 blocks (a
// portable cluster) dividing the grid.
static bool cluster_fits(const CUlaunchAttributeValue& dim, unsigned gx, unsigned gy, unsigned gz) {
  const unsigned n = dim.clusterDim.x * dim.clusterDim.y * dim.clusterDim.z;
  return fake_sm() >= 90 && n >= 1 && n <= 8 && dim.clusterDim.y == 1 && dim.clusterDim.z == 1 && gy == 1 && gz == 1 &&
         gx % dim.clusterDim.x == 0;
}

// A launch through cuLaunchKernelEx is checked and logged as cuLaunchKernel's, its line ending in " programmatic"
// where an attribute lets it overlap the previous kernel and " cluster=n" where its blocks are clusters of n; any
// other attribute, or a cluster the driver would refuse, is CUDA_ERROR_INVALID_VALUE.
CUresult CUDAAPI cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** params, void** extra) {
  if (!config || (config->numAttrs && !config->attrs)) return CUDA_ERROR_INVALID_VALUE;
  bool programmatic = false;
  unsigned cluster = 0;
  for (unsigned i = 0; i < config->numAttrs; ++i) {
    const CUlaunchAttribute& a = config->attrs[i];
    if (a.id == CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION) {
      programmatic = a.value.programmaticStreamSerializationAllowed != 0;
    } else if (a.id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) {
      if (!cluster_fits(a.value, config->gridDimX, config->gridDimY, config->gridDimZ)) return CUDA_ERROR_INVALID_VALUE;
      cluster = a.value.clusterDim.x;
    } else {
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  g_programmatic_launch = programmatic;
  g_launch_cluster = cluster;
  const CUresult r = cuLaunchKernel(f, config->gridDimX, config->gridDimY, config->gridDimZ, config->blockDimX,
                                    config->blockDimY, config->blockDimZ, config->sharedMemBytes, config->hStream,
                                    params, extra);
  g_programmatic_launch = false;
  g_launch_cluster = 0;
  return r;
}

// A cooperative launch is logged as any other; its grid may not exceed what the device holds at once (the fake
// occupancy query's one block an SM).
CUresult CUDAAPI cuLaunchCooperativeKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                           unsigned int bx, unsigned int by, unsigned int bz, unsigned int shared_bytes,
                                           CUstream stream, void** params) {
  if (uint64_t(gx) * gy * gz > uint64_t(kSmCount)) return CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE;
  return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shared_bytes, stream, params, nullptr);
}

CUresult CUDAAPI cuMemAlloc(CUdeviceptr* ptr, size_t bytes) { return allocate(ptr, bytes); }
CUresult CUDAAPI cuMemFree(CUdeviceptr ptr) { return release(ptr); }
CUresult CUDAAPI cuDeviceTotalMem(size_t* bytes, CUdevice device) {
  if (!bytes) return CUDA_ERROR_INVALID_VALUE;
  if (device != 0) return CUDA_ERROR_INVALID_DEVICE;
  *bytes = memory_cap();
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  if (!free_bytes || !total_bytes) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g_mutex);
  *total_bytes = memory_cap();
  *free_bytes = *total_bytes - std::min(g_allocated, *total_bytes);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuMemFreeAsync(CUdeviceptr ptr, CUstream) {
  std::lock_guard<std::mutex> lock(g_pool_mutex);
  auto it = g_pool_allocations.find(ptr);
  if (it != g_pool_allocations.end()) {
    g_pool_in_use -= it->second;
    g_pool_allocations.erase(it);
  }
  return release(ptr);
}

// Memory pools: one kind of pool, whose reserved size is the most its allocations ever held at once (a real pool
// with an unlimited release threshold keeps that much mapped) until cuMemPoolTrimTo brings it down to what is in use.
CUresult CUDAAPI cuMemPoolCreate(CUmemoryPool* pool, const CUmemPoolProps* props) {
  if (!pool || !props || props->location.type != CU_MEM_LOCATION_TYPE_DEVICE || props->location.id != 0)
    return CUDA_ERROR_INVALID_VALUE;
  *pool = new CUmemPoolHandle_st;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attribute, void* value) {
  if (!pool || !value || attribute != CU_MEMPOOL_ATTR_RELEASE_THRESHOLD) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attribute, void* value) {
  if (!pool || !value || attribute != CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g_pool_mutex);
  *static_cast<cuuint64_t*>(value) = pool->reserved;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemPoolTrimTo(CUmemoryPool pool, size_t keep) {
  if (!pool) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g_pool_mutex);
  pool->reserved = std::max<std::size_t>(std::min(pool->reserved, keep), g_pool_in_use);
  log_line("pool-trim " + std::to_string(keep));
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemAllocFromPoolAsync(CUdeviceptr* ptr, size_t bytes, CUmemoryPool pool, CUstream) {
  if (!pool) return CUDA_ERROR_INVALID_VALUE;
  const CUresult r = allocate(ptr, bytes);
  if (r != CUDA_SUCCESS) return r;
  std::lock_guard<std::mutex> lock(g_pool_mutex);
  g_pool_allocations[*ptr] = bytes;
  g_pool_in_use += bytes;
  pool->reserved = std::max(pool->reserved, g_pool_in_use);
  log_line("pool-alloc " + std::to_string(bytes));
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemcpyHtoD(CUdeviceptr dst, const void* src, size_t bytes) {
  if ((bytes && !src) || !in_allocation(dst, bytes)) return CUDA_ERROR_INVALID_VALUE;
  if (bytes) std::memcpy(reinterpret_cast<void*>(dst), src, bytes);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemcpyDtoH(void* dst, CUdeviceptr src, size_t bytes) {
  if ((bytes && !dst) || !in_allocation(src, bytes)) return CUDA_ERROR_INVALID_VALUE;
  if (bytes) std::memcpy(dst, reinterpret_cast<const void*>(src), bytes);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemcpyDtoHAsync(void* dst, CUdeviceptr src, size_t bytes, CUstream) {
  return cuMemcpyDtoH(dst, src, bytes);
}
CUresult CUDAAPI cuMemAllocHost(void** ptr, size_t bytes) {
  if (!ptr) return CUDA_ERROR_INVALID_VALUE;
  *ptr = std::calloc(1, bytes ? bytes : 1);
  return *ptr ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}
CUresult CUDAAPI cuMemFreeHost(void* ptr) {
  std::free(ptr);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemsetD32(CUdeviceptr dst, unsigned int value, size_t count) { return fill(dst, &value, 4, count); }
CUresult CUDAAPI cuMemsetD8(CUdeviceptr dst, unsigned char value, size_t count) { return fill(dst, &value, 1, count); }
CUresult CUDAAPI cuMemsetD8Async(CUdeviceptr dst, unsigned char value, size_t count, CUstream) {
  return fill(dst, &value, 1, count);
}
CUresult CUDAAPI cuMemsetD2D8Async(CUdeviceptr dst, size_t pitch, unsigned char value, size_t width, size_t height,
                                   CUstream) {
  if (height > 1 && pitch < width) return CUDA_ERROR_INVALID_VALUE;
  for (size_t row = 0; row < height; ++row)
    if (const CUresult r = fill(dst + row * pitch, &value, 1, width); r != CUDA_SUCCESS) return r;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamSynchronize(CUstream) { return CUDA_SUCCESS; }
CUresult CUDAAPI cuStreamIsCapturing(CUstream, CUstreamCaptureStatus* status) {
  if (!status) return CUDA_ERROR_INVALID_VALUE;
  *status = capturing() ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode* mode) {
  if (!mode) return CUDA_ERROR_INVALID_VALUE;
  std::swap(*mode, t_capture_mode);
  log_line("capture-mode " + std::to_string(int(t_capture_mode)));
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuStreamGetCtx(CUstream, CUcontext* ctx) {
  if (!ctx) return CUDA_ERROR_INVALID_VALUE;
  *ctx = &g_primary; // the fake has one device and one context
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuStreamCreate(CUstream* stream, unsigned int) {
  if (!stream) return CUDA_ERROR_INVALID_VALUE;
  *stream = new CUstream_st;
  g_live_streams.fetch_add(1);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuStreamDestroy(CUstream stream) {
  if (!stream) return CUDA_ERROR_INVALID_HANDLE;
  delete stream;
  g_live_streams.fetch_sub(1);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventCreate(CUevent* event, unsigned int) {
  if (!event) return CUDA_ERROR_INVALID_VALUE;
  *event = new CUevent_st;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuEventDestroy(CUevent event) {
  if (!event) return CUDA_ERROR_INVALID_HANDLE;
  delete event;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuEventRecord(CUevent event, CUstream) { return event ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE; }
CUresult CUDAAPI cuStreamWaitEvent(CUstream, CUevent event, unsigned int) {
  return event ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}
CUresult CUDAAPI cuEventSynchronize(CUevent event) { return event ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE; }
CUresult CUDAAPI cuEventQuery(CUevent event) { return event ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE; }
CUresult CUDAAPI cuEventElapsedTime(float* ms, CUevent start, CUevent stop) {
  if (!ms) return CUDA_ERROR_INVALID_VALUE;
  if (!start || !stop) return CUDA_ERROR_INVALID_HANDLE;
  *ms = kEventMs;
  return CUDA_SUCCESS;
}

// Blocks an SM of a function: two of the fused form's entries compiled for two (jitbmm's "_paired" units), else one.
static int blocks_per_sm(CUfunction function) { return function->name.find("_paired") != std::string::npos ? 2 : 1; }

CUresult CUDAAPI cuOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, CUfunction function, int block_size, size_t) {
  if (!blocks || !function || block_size <= 0 || block_size > kMaxThreadsPerBlock) return CUDA_ERROR_INVALID_VALUE;
  *blocks = blocks_per_sm(function);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuOccupancyMaxActiveClusters(int* clusters, CUfunction function, const CUlaunchConfig* config) {
  if (!clusters || !function || !config || config->numAttrs != 1 || !config->attrs ||
      config->attrs[0].id != CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION || config->blockDimX == 0 ||
      config->blockDimX > unsigned(kMaxThreadsPerBlock))
    return CUDA_ERROR_INVALID_VALUE;
  const CUlaunchAttributeValue& dim = config->attrs[0].value;
  *clusters =
      cluster_fits(dim, config->gridDimX, 1, 1) ? blocks_per_sm(function) * kSmCount / int(dim.clusterDim.x) : 0;
  return CUDA_SUCCESS;
}

} // extern "C"
