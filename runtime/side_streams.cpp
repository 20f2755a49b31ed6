#include "runtime/side_streams.hpp"

#include "runtime/device.hpp"
#include "runtime/events.hpp"

namespace jitbmm {

SideStreams::~SideStreams() {
  if (sides_.empty()) return;
  // Work still queued on them completes first: the driver releases the streams then. A plan may live until the
  // process ends (a stand-in's, runtime/chain_stand_in.hpp): a driver already gone leaves nothing to release.
  try {
    ScopedContext scope(context_);
    for (const auto& entry : sides_) driver().cuStreamDestroy(entry.second);
  } catch (...) {
  }
}

CUstream SideStreams::of(CUstream caller) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (const auto it = sides_.find(caller); it != sides_.end()) return it->second;
  if (sides_.size() >= kMax) return nullptr;
  CUstream side = nullptr;
  check(driver().cuStreamCreate(&side, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  sides_.emplace(caller, side);
  return side;
}

JoinOnExit::~JoinOnExit() {
  try {
    wait_for(stream, side);
  } catch (...) {
  }
}

} // namespace jitbmm
