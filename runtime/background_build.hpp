// Builds in the background: what a plan chose, built on a thread of its own while a stand-in of quick builds serves
// its calls (runtime/chain_stand_in.hpp for chains, runtime/product_stand_in.hpp for products;
// docs/caching-and-tuning.md, "First calls"). A build runs below the process's other work on the CPU, with its device's
// context current, and the process waits for it at its end, before what it uses is destroyed. That wait is an exit
// handler, so it runs after the destructors of the function-local statics made after it was registered: a static
// that a build may reach (a table, a set of warnings said, a library's entry points) is therefore never destroyed
// (`static T& x = *new T(...)`).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "runtime/device.hpp"
#include "support/log.hpp"

namespace jitbmm {

// Whether $JITBMM_STAND_IN lets plans take a stand-in: on (the default) or off; another value is
// std::invalid_argument naming it. Read at every call (the tests turn it on and off).
bool stand_in_enabled();

// How long a plan waits for its chosen build before it takes a stand-in: one whose kernels are all in the caches is
// built in a few milliseconds, so a process that finds them starts on the chosen; one that compiles takes seconds.
constexpr auto kChosenWait = std::chrono::milliseconds(50);

// Whether this thread is a background build's: a plan made there takes no stand-in of its own (what it builds is
// what the stand-in waits for).
bool in_background_build();

namespace detail {
// Sets up the thread of a background build (priority, the flag above) for as long as it lives.
class BackgroundThread {
public:
  explicit BackgroundThread(const DeviceInfo& device);
  ~BackgroundThread();
  BackgroundThread(const BackgroundThread&) = delete;
  BackgroundThread& operator=(const BackgroundThread&) = delete;

private:
  ScopedContext context_;
};
// Counts a build as started, for the waits below (the process's end among them: wait_for_builds_at_exit), until
// the token it returns is dropped. The token holds nothing the build makes, so what a build made is freed once its
// callers drop it, as any plan is.
std::shared_ptr<void> build_started();
} // namespace detail

// A background build's capture mode (relaxed: BackgroundThread) on a thread that does a build's work beside it (the
// CPU pool's, building ahead), for as long as it lives, where `relax`; else nothing.
class BuildCaptureMode {
public:
  explicit BuildCaptureMode(bool relax);
  ~BuildCaptureMode();
  BuildCaptureMode(const BuildCaptureMode&) = delete;
  BuildCaptureMode& operator=(const BuildCaptureMode&) = delete;

private:
  bool relaxed_ = false;
  CUstreamCaptureMode previous_ = CU_STREAM_CAPTURE_MODE_RELAXED;
};

// Has the process, when it ends, wait for every background build before what was set up until now is torn down
// (functions registered with std::atexit and static objects go in reverse order together: what a library sets up
// after this call, its exit handler included, goes first). start_background_build calls it; a stand-in calls it
// again once made, after its own kernels were loaded (a driver's or a library's first use among them), since the
// build still uses those.
void wait_for_builds_at_exit();

// Waits for every background build started until it returns, those started meanwhile included (the public
// jitbmm::wait_for_builds()); std::logic_error on a background build's own thread, which would wait for itself.
void wait_for_background_builds();

// Starts `build` on a thread of its own with `device`'s context current (see above).
template <class T>
std::shared_future<T> start_background_build(const std::shared_ptr<const DeviceInfo>& device,
                                             std::function<T()> build) {
  auto promise = std::make_shared<std::promise<T>>();
  std::shared_future<T> done = promise->get_future().share();
  // A thread of its own, not std::async's, whose last future would wait for it when dropped.
  std::thread([device = device, build = std::move(build), promise, running = detail::build_started()]() mutable {
    try {
      const detail::BackgroundThread thread(*device);
      promise->set_value(build());
    } catch (...) {
      promise->set_exception(std::current_exception());
    }
    // What the build holds goes before it counts as ended: a wait that returns (the process's end) finds the
    // result set and nothing of the build's left to destroy.
    build = nullptr;
    promise.reset();
    device.reset();
    running.reset();
  }).detach();
  return done;
}

// What a background build makes, once it is made: null before, and for good after the build failed (warned once
// with `what`, the problem's name, and what the calls run instead).
template <class T> class PendingBuild {
public:
  PendingBuild(std::shared_future<std::shared_ptr<const T>> future, std::string what)
      : future_(std::move(future)), what_(std::move(what)) {}

  // The thing built, else null; with `wait`, waits for the build first.
  const T* get(bool wait) const {
    if (const T* t = built_.load(std::memory_order_acquire)) return t;
    if (failed_.load(std::memory_order_acquire)) return nullptr;
    if (!wait && future_.wait_for(std::chrono::seconds(0)) != std::future_status::ready) return nullptr;
    std::lock_guard<std::mutex> lock(mutex_);
    if (const T* t = built_.load(std::memory_order_acquire)) return t;
    if (failed_) return nullptr;
    try {
      const T* t = future_.get().get();
      built_.store(t, std::memory_order_release);
      if (log_enabled(LogLevel::debug))
        log_message(LogLevel::debug, what_ + ": its chosen kernels are built; its calls run them from now on");
      return t;
    } catch (const std::exception& e) {
      failed_ = true;
      log_message(LogLevel::warn, what_ + ": its chosen kernels failed to build (" + e.what() +
                                      "); its calls keep running its stand-in");
      return nullptr;
    }
  }
  // Whether the build has ended: built, or failed.
  bool ended() const { return get(false) || failed_.load(std::memory_order_acquire); }
  void wait() const { future_.wait(); }
  const std::shared_future<std::shared_ptr<const T>>& future() const { return future_; }

private:
  std::shared_future<std::shared_ptr<const T>> future_;
  std::string what_;
  mutable std::mutex mutex_;
  mutable std::atomic<const T*> built_{nullptr};
  mutable std::atomic<bool> failed_{false};
};

} // namespace jitbmm
