// The device a plan runs on: its context and the facts about it that kernels and keys depend on.
#pragma once

#include <memory>
#include <string>

#include "generator/arch_features.hpp"
#include "runtime/driver_api.hpp"

namespace jitbmm {

struct DeviceInfo {
  int ordinal = 0;
  CUdevice device = 0;
  CUcontext context = nullptr;
  // The context's id (cuCtxGetId), unique for the process's life where the address is not: what every cache of
  // things living in a context (modules, plans, choices) is keyed by, so that a context made anew at a freed one's
  // address (a reset primary context, cuCtxDestroy then cuCtxCreate) is never served the dead one's modules.
  unsigned long long context_id = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;
  int sm_count = 0;
  int clock_khz = 0;
  int max_threads_per_block = 0;
  int max_shared_per_block_optin = 0;
  int max_shared_per_sm = 0; // what an SM's resident blocks share
  int driver_version = 0; // e.g. 13000
  std::size_t total_memory = 0; // bytes of device memory (cuDeviceTotalMem)
  // What its kernels may use: the architecture's features, or those of the older level $JITBMM_FEATURES names.
  ArchFeatures features;
  int sm() const { return cc_major * 10 + cc_minor; }
  std::string arch() const { return sm_name(sm()); }
  // The architecture, and the feature level where it is below it: "sm_90", "sm_90@sm_75". Tuning decisions are
  // kept per this text, since a level offers other variants.
  std::string arch_and_level() const { return features.sm == sm() ? arch() : arch() + "@" + sm_name(features.sm); }
};

// The features a device of architecture `sm` uses: its own, or those of the level in $JITBMM_FEATURES ("sm_75"),
// which must not be above it. std::invalid_argument naming JITBMM_FEATURES otherwise.
ArchFeatures features_in_use(int sm);

// The architectures jitbmm supports with this process's NVRTC (generator/arch_features.hpp: floor_sm): "sm_75 or
// later with NVRTC 13.0 (sm_70 with an NVRTC that still targets it: 12.x)". Throws NoNvrtcError without NVRTC.
std::string supported_architectures();
// Throws UnsupportedDeviceError naming the device, its architecture and supported_architectures() when the device is
// older than the floor: every plan checks it before it compiles.
void check_supported(const DeviceInfo& device);

// The id of `ctx` (cuCtxGetId): DeviceInfo::context_id. Throws CudaError for a context that is not alive.
unsigned long long context_id(CUcontext ctx);

// The device of the context current on this thread (so jitbmm follows PyTorch or any cudart program), or, when
// none is current, the primary context of device $JITBMM_DEVICE (default 0), retained for the process lifetime
// and made current on this thread (as the CUDA runtime would).
// Throws NoDriverError without a driver and CudaError when the device cannot be used.
std::shared_ptr<const DeviceInfo> current_device();

// Whether work enqueued on `stream` would be captured into a CUDA graph rather than run: the stream is capturing, or
// it is the legacy default stream while another stream of its context captures (which makes it unusable as well).
// The tuner must not run then (it allocates, launches and synchronises; runtime/tuner/policy.hpp).
bool stream_is_capturing(CUstream stream);

// Makes `ctx` current for this scope if it is not already (RAII push/pop).
class ScopedContext {
public:
  explicit ScopedContext(CUcontext ctx);
  ~ScopedContext();
  ScopedContext(const ScopedContext&) = delete;
  ScopedContext& operator=(const ScopedContext&) = delete;

private:
  bool pushed_ = false;
};

} // namespace jitbmm
