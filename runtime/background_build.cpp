// Builds in the background (background_build.hpp).
#include "runtime/background_build.hpp"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <stdexcept>
#include <vector>

#include "runtime/driver_api.hpp"
#include "support/env_words.hpp"

namespace jitbmm {

namespace {

thread_local bool t_background = false;

// Where cores are few, the stand-in's compiles (and then the caller's own work) go first, and the build takes what is
// left. Threads it starts (the CPU pool's) inherit the lower priority. Nothing to do where the system refuses.
void lower_this_thread_priority() {
  const long tid = ::syscall(SYS_gettid);
  ::setpriority(PRIO_PROCESS, static_cast<id_t>(tid), 10);
}

struct Waiters {
  std::mutex mutex;
  std::vector<std::function<void()>> all;
};
Waiters& waiters() {
  static auto* w = new Waiters(); // never destroyed: read at the process's end
  return *w;
}

void wait_for_all() {
  std::vector<std::function<void()>> all;
  {
    std::lock_guard<std::mutex> lock(waiters().mutex);
    all.swap(waiters().all);
  }
  for (const auto& wait : all) wait();
}

} // namespace

bool stand_in_enabled() {
  const char* v = std::getenv("JITBMM_STAND_IN");
  return !v || !*v || parse_env_switch(v, "JITBMM_STAND_IN");
}

bool in_background_build() { return t_background; }

namespace detail {

BackgroundThread::BackgroundThread(const DeviceInfo& device) : context_(device.context) {
  lower_this_thread_priority();
  t_background = true;
  // A build allocates and synchronises (a brought-in decision's check, module loads), which CUDA forbids on every
  // thread while another captures a graph in the global mode (PyTorch's default), breaking that capture. Nothing a
  // build does touches a capturing stream, so its thread is relaxed.
  CUstreamCaptureMode relaxed = CU_STREAM_CAPTURE_MODE_RELAXED;
  check(driver().cuThreadExchangeStreamCaptureMode(&relaxed), "cuThreadExchangeStreamCaptureMode");
}

BackgroundThread::~BackgroundThread() { t_background = false; }

void wait_at_exit(std::function<void()> wait) {
  {
    std::lock_guard<std::mutex> lock(waiters().mutex);
    waiters().all.push_back(std::move(wait));
  }
  wait_for_builds_at_exit();
}

} // namespace detail

void wait_for_builds_at_exit() { std::atexit(wait_for_all); }

void wait_for_background_builds() {
  if (t_background)
    throw std::logic_error("jitbmm::wait_for_builds: called by a background build, which would wait for itself");
  // The waits stay registered (waiting on an ended build returns at once), so that a caller on another thread never
  // finds the list empty while builds it holds are still running; builds started meanwhile are waited for too.
  for (std::size_t waited = 0;;) {
    std::vector<std::function<void()>> more;
    {
      std::lock_guard<std::mutex> lock(waiters().mutex);
      if (waiters().all.size() <= waited) return;
      more.assign(waiters().all.begin() + static_cast<std::ptrdiff_t>(waited), waiters().all.end());
    }
    for (const auto& wait : more) wait();
    waited += more.size();
  }
}

} // namespace jitbmm
