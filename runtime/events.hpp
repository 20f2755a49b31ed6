// CUDA events as owned objects, and the order they give between two streams.
#pragma once

#include "runtime/driver_api.hpp"

namespace jitbmm {

class Event {
public:
  explicit Event(unsigned flags = CU_EVENT_DEFAULT);
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  CUevent get() const { return event_; }

private:
  CUevent event_ = nullptr;
};

// Makes `waiting` wait, on the device, for everything enqueued on `stream` so far (the host does not wait).
void wait_for(CUstream waiting, CUstream stream);

} // namespace jitbmm
