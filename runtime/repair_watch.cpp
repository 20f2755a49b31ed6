#include "runtime/repair_watch.hpp"

#include <cstdlib>
#include <stdexcept>
#include <string>

#include "runtime/background_build.hpp"
#include "support/env_words.hpp"
#include "support/log.hpp"

namespace jitbmm {

bool repair_watch_enabled() {
  const char* v = std::getenv("JITBMM_REPAIR_WATCH");
  return !v || !*v || parse_env_switch(v, "JITBMM_REPAIR_WATCH");
}

namespace {
thread_local bool t_unwatched = false;
} // namespace

UnwatchedCalls::UnwatchedCalls() : previous_(t_unwatched) { t_unwatched = true; }
UnwatchedCalls::~UnwatchedCalls() { t_unwatched = previous_; }
bool UnwatchedCalls::active() { return t_unwatched; }

RepairWatch::RepairWatch(const DeviceInfo& device, int64_t outputs, std::size_t counter_offset)
    : context_(device.context), outputs_(outputs), counter_offset_(counter_offset) {}

RepairWatch::~RepairWatch() {
  if (!pinned_ && !event_) return;
  try {
    const DriverApi& d = driver();
    ScopedContext scope(context_);
    if (pending_) d.cuEventSynchronize(event_); // the copy still lands in pinned_
    if (event_) d.cuEventDestroy(event_);
    if (pinned_) d.cuMemFreeHost(pinned_);
  } catch (const std::exception&) { // the context is gone (process exit): so is what it held
  }
}

std::optional<double> RepairWatch::landed(CUstream stream) {
  std::unique_lock<std::mutex> lock(mutex_, std::try_to_lock);
  if (!lock.owns_lock() || !pending_ || stream_is_capturing(stream)) return std::nullopt;
  const CUresult r = driver().cuEventQuery(event_);
  if (r == CUDA_ERROR_NOT_READY) return std::nullopt;
  check(r, "cuEventQuery (the repair counter's copy)");
  pending_ = false;
  return outputs_ > 0 ? static_cast<double>(*pinned_) / static_cast<double>(outputs_) : 0.0;
}

void RepairWatch::observe(const void* workspace, CUstream stream) {
  std::unique_lock<std::mutex> lock(mutex_, std::try_to_lock);
  if (!lock.owns_lock() || pending_ || broken_) return;
  const long call = calls_++;
  if (observations_ >= kEarlyObservations && call % kLaterEvery != 0) return;
  if (stream_is_capturing(stream)) return;
  const DriverApi& d = driver();
  if (!event_) { // the first observed call, outside any capture (the caller's context is current)
    // Relaxed, as a build's work is: another thread may be capturing a graph in the global mode, which an
    // allocation on this one would break.
    const BuildCaptureMode relaxed(true);
    void* host = nullptr;
    CUresult r = d.cuMemAllocHost(&host, sizeof(uint64_t));
    if (r == CUDA_SUCCESS) {
      pinned_ = static_cast<uint64_t*>(host);
      *pinned_ = 0;
      r = d.cuEventCreate(&event_, CU_EVENT_DISABLE_TIMING);
    }
    if (r != CUDA_SUCCESS) {
      broken_ = true;
      log_message(LogLevel::warn, "not watching exp_matmul's repairs: the pinned buffer or event for the counter's "
                                  "copy could not be made (CUresult " + std::to_string(int(r)) + ")");
      return;
    }
  }
  const auto counter = reinterpret_cast<CUdeviceptr>(static_cast<const unsigned char*>(workspace) + counter_offset_);
  check(d.cuMemcpyDtoHAsync(pinned_, counter, sizeof(uint64_t), stream), "cuMemcpyDtoHAsync (the repair counter)");
  check(d.cuEventRecord(event_, stream), "cuEventRecord (the repair counter's copy)");
  pending_ = true;
  ++observations_;
}

} // namespace jitbmm
