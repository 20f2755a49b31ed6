#include "runtime/device.hpp"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <map>
#include <mutex>
#include <stdexcept>
#include <vector>

#include "jitbmm/errors.hpp"
#include "runtime/nvrtc_compiler.hpp"
#include "support/parse_number.hpp"

namespace jitbmm {

namespace {

int attribute(CUdevice dev, CUdevice_attribute attr, const char* what) {
  int value = 0;
  check(driver().cuDeviceGetAttribute(&value, attr, dev), what);
  return value;
}

std::shared_ptr<DeviceInfo> describe_device(CUdevice dev, CUcontext ctx, unsigned long long ctx_id) {
  const DriverApi& d = driver();
  auto info = std::make_shared<DeviceInfo>();
  info->device = dev;
  info->ordinal = dev;
  info->context = ctx;
  info->context_id = ctx_id;
  char name[256] = {0};
  check(d.cuDeviceGetName(name, sizeof name - 1, dev), "cuDeviceGetName");
  info->name = name;
  info->cc_major = attribute(dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, "compute capability");
  info->cc_minor = attribute(dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, "compute capability");
  info->sm_count = attribute(dev, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, "multiprocessor count");
  info->clock_khz = attribute(dev, CU_DEVICE_ATTRIBUTE_CLOCK_RATE, "clock rate");
  info->max_threads_per_block = attribute(dev, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, "max threads per block");
  info->max_shared_per_block_optin =
      attribute(dev, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, "max shared memory per block");
  info->max_shared_per_sm =
      attribute(dev, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, "max shared memory per multiprocessor");
  check(d.cuDriverGetVersion(&info->driver_version), "cuDriverGetVersion");
  check(d.cuDeviceTotalMem(&info->total_memory, dev), "cuDeviceTotalMem");
  info->features = features_in_use(info->sm());
  return info;
}

// JITBMM_DEVICE: a whole decimal integer in [0, INT_MAX] (never wrapped: 4294967296 is an error, not device 0).
int requested_ordinal() {
  return static_cast<int>(env_integer("JITBMM_DEVICE", 0, std::numeric_limits<int>::max()).value_or(0));
}

} // namespace

ArchFeatures features_in_use(int sm) {
  const char* level = std::getenv("JITBMM_FEATURES");
  if (!level || !*level) return arch_features(sm);
  const int l = parse_sm(level, "JITBMM_FEATURES");
  if (l > sm)
    throw std::invalid_argument("JITBMM_FEATURES: level " + sm_name(l) + " is above this GPU's architecture, " +
                                sm_name(sm) + "; a level can only take features away");
  if (l < kOldestSm)
    throw std::invalid_argument("JITBMM_FEATURES: " + sm_name(l) + " is below jitbmm's floor, " +
                                sm_name(kOldestSm));
  return capped_features(sm, l);
}

namespace {

// The floor with the process's NVRTC (loaded once, like the NVRTC itself): every plan and kernel load checks it.
int nvrtc_floor_sm() {
  static const int floor = floor_sm(nvrtc_supported_archs());
  return floor;
}

} // namespace

std::string supported_architectures() {
  const int floor = nvrtc_floor_sm();
  return sm_name(floor) + " or later with NVRTC " + nvrtc_version() +
         (floor > kOldestSm ? " (" + sm_name(kOldestSm) + " with an NVRTC that still targets it: 12.x)" : "");
}

void check_supported(const DeviceInfo& device) {
  const std::string which = "device " + std::to_string(device.ordinal) + " (" + device.name + ") is " + device.arch();
  if (device.sm() < nvrtc_floor_sm())
    throw UnsupportedDeviceError(which + "; jitbmm needs " + supported_architectures());
  // A GPU newer than the NVRTC: it would refuse the architecture at every compile.
  // never destroyed: a background build may still use it as the process exits
  static const std::vector<int>& archs = *new std::vector<int>(nvrtc_supported_archs());
  if (std::find(archs.begin(), archs.end(), device.sm()) == archs.end())
    throw UnsupportedDeviceError(which + ", which NVRTC " + nvrtc_version() + " does not compile for (it targets " +
                                 sm_name(*std::min_element(archs.begin(), archs.end())) + " to " +
                                 sm_name(*std::max_element(archs.begin(), archs.end())) +
                                 "): install a newer NVRTC (pip install -U nvidia-cuda-nvrtc), or set "
                                 "JITBMM_NVRTC_LIBRARY to one");
}

unsigned long long context_id(CUcontext ctx) {
  unsigned long long id = 0;
  check(driver().cuCtxGetId(ctx, &id), "cuCtxGetId");
  return id;
}

std::shared_ptr<const DeviceInfo> current_device() {
  static std::mutex mutex;
  // By context id (DeviceInfo::context_id); lives for the process.
  static auto* by_context = new std::map<unsigned long long, std::shared_ptr<const DeviceInfo>>();
  const DriverApi& d = driver();
  CUcontext ctx = nullptr;
  check(d.cuCtxGetCurrent(&ctx), "cuCtxGetCurrent");
  CUdevice dev = 0;
  if (ctx) {
    check(d.cuCtxGetDevice(&dev), "cuCtxGetDevice");
  } else {
    int count = 0;
    check(d.cuDeviceGetCount(&count), "cuDeviceGetCount");
    const int ordinal = requested_ordinal();
    if (ordinal >= count)
      throw std::invalid_argument("JITBMM_DEVICE: device " + std::to_string(ordinal) + " requested, but " +
                                  std::to_string(count) + " device(s) present");
    check(d.cuDeviceGet(&dev, ordinal), "cuDeviceGet");
    check(d.cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
    // As the CUDA runtime does: a thread with no context gets the primary one, so device memory the caller
    // allocates afterwards (runtime API or driver API) lives where the plan's kernels run.
    check(d.cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  }
  const unsigned long long id = context_id(ctx);
  std::lock_guard<std::mutex> lock(mutex);
  auto& slot = (*by_context)[id];
  if (!slot) slot = describe_device(dev, ctx, id);
  return slot;
}

bool stream_is_capturing(CUstream stream) {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  const CUresult r = driver().cuStreamIsCapturing(stream, &status);
  if (r == CUDA_ERROR_STREAM_CAPTURE_IMPLICIT) return true;
  check(r, "cuStreamIsCapturing");
  return status != CU_STREAM_CAPTURE_STATUS_NONE; // active, or invalidated (still capturing until it ends)
}

ScopedContext::ScopedContext(CUcontext ctx) {
  CUcontext current = nullptr;
  check(driver().cuCtxGetCurrent(&current), "cuCtxGetCurrent");
  if (current != ctx) {
    check(driver().cuCtxPushCurrent(ctx), "cuCtxPushCurrent");
    pushed_ = true;
  }
}

ScopedContext::~ScopedContext() {
  if (pushed_) {
    CUcontext popped = nullptr;
    driver().cuCtxPopCurrent(&popped);
  }
}

} // namespace jitbmm
