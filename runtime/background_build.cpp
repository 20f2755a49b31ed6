// Builds in the background (background_build.hpp).
#include "runtime/background_build.hpp"

#include <pthread.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <stdexcept>

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

// How many builds were started and how many have ended: the waits below wait until they are as many.
struct Waiters {
  std::mutex mutex;
  std::condition_variable changed;
  std::size_t started = 0, ended = 0;
};
Waiters*& waiters() {
  static Waiters* w = new Waiters(); // never destroyed: read at the process's end
  return w;
}

// A child forked while builds ran has none of their threads: it starts on counts of its own (the parent's, which
// count builds whose threads do not exist there, and whose mutex another thread may have held at the fork, are left
// alone, never destroyed).
void forget_builds_in_child() { waiters() = new Waiters(); }

// Waits for every build started, those started meanwhile included.
void wait_for_registered() {
  Waiters& w = *waiters();
  std::unique_lock<std::mutex> lock(w.mutex);
  w.changed.wait(lock, [&] { return w.ended == w.started; });
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

} // namespace detail

BuildCaptureMode::BuildCaptureMode(bool relax) {
  if (!relax) return;
  check(driver().cuThreadExchangeStreamCaptureMode(&previous_), "cuThreadExchangeStreamCaptureMode");
  relaxed_ = true;
}

BuildCaptureMode::~BuildCaptureMode() {
  if (relaxed_) driver().cuThreadExchangeStreamCaptureMode(&previous_);
}

namespace detail {

std::shared_ptr<void> build_started() {
  static std::once_flag fork_handler;
  std::call_once(fork_handler, [] { ::pthread_atfork(nullptr, nullptr, forget_builds_in_child); });
  // Made before the build is counted, so that a failure to make it leaves the counts even; it counts the build's end
  // as it goes.
  struct Token {
    explicit Token(Waiters* waiters) : w(waiters) {}
    Token(const Token&) = delete;
    Token& operator=(const Token&) = delete;
    Waiters* w;
    ~Token() {
      {
        std::lock_guard<std::mutex> lock(w->mutex);
        ++w->ended;
      }
      w->changed.notify_all();
    }
  };
  Waiters* w = waiters();
  auto token = std::make_shared<Token>(w);
  {
    std::lock_guard<std::mutex> lock(w->mutex);
    ++w->started;
  }
  wait_for_builds_at_exit();
  return token;
}

} // namespace detail

void wait_for_builds_at_exit() { std::atexit(wait_for_registered); }

void wait_for_background_builds() {
  if (t_background)
    throw std::logic_error("jitbmm::wait_for_builds: called by a background build, which would wait for itself");
  wait_for_registered();
}

} // namespace jitbmm
