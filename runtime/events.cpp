#include "runtime/events.hpp"

namespace jitbmm {

Event::Event(unsigned flags) { check(driver().cuEventCreate(&event_, flags), "cuEventCreate"); }

Event::~Event() { driver().cuEventDestroy(event_); }

void wait_for(CUstream waiting, CUstream stream) {
  // The wait holds the event's state as recorded: destroying it at once leaves the wait in place.
  const Event done(CU_EVENT_DISABLE_TIMING);
  check(driver().cuEventRecord(done.get(), stream), "cuEventRecord");
  check(driver().cuStreamWaitEvent(waiting, done.get(), 0), "cuStreamWaitEvent");
}

} // namespace jitbmm
