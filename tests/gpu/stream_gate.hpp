// Holds a stream until the test lets it go, to prove that work was queued on that stream: a host function enqueued
// on the stream waits on a semaphore that only release() posts, so nothing queued behind it can start, however
// slow or fast the machine. A watchdog releases it after `limit` so that a library call that waits on the held
// stream (a hidden synchronisation) fails the test instead of hanging it.
#pragma once

#include <dlfcn.h>
#include <semaphore.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "runtime/driver_api.hpp"

namespace jitbmm::test {

class StreamGate {
public:
  explicit StreamGate(CUstream stream, std::chrono::seconds limit = std::chrono::seconds(60)) : stream_(stream) {
    // Not in jitbmm's driver table (the library never needs it): resolved from the same libcuda.
    using LaunchHostFunc = CUresult (*)(CUstream, void (*)(void*), void*); // the host function's type: CUhostFn
    const auto launch_host_func = reinterpret_cast<LaunchHostFunc>(dlsym(driver().handle, "cuLaunchHostFunc"));
    if (!launch_host_func) throw std::runtime_error("libcuda lacks cuLaunchHostFunc");
    if (::sem_init(&sem_, 0, 0) != 0) throw std::runtime_error("sem_init failed");
    check(launch_host_func(stream_, &StreamGate::wait, &sem_), "cuLaunchHostFunc");
    watchdog_ = std::thread([this, limit] {
      std::unique_lock<std::mutex> lock(mutex_);
      if (!cv_.wait_for(lock, limit, [this] { return released_; })) {
        timed_out_ = true;
        released_ = true;
        ::sem_post(&sem_);
      }
    });
  }
  ~StreamGate() {
    release();
    watchdog_.join();
    driver().cuStreamSynchronize(stream_); // the host function has returned: the semaphore is no longer used
    ::sem_destroy(&sem_);
  }
  StreamGate(const StreamGate&) = delete;
  StreamGate& operator=(const StreamGate&) = delete;

  void release() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (released_) return;
      released_ = true;
      ::sem_post(&sem_);
    }
    cv_.notify_all();
  }
  // Whether the watchdog had to release the stream (someone waited on it while it was held).
  bool timed_out() const { return timed_out_.load(); }

private:
  static void wait(void* sem) { // CUDA_CB is empty on Linux
    while (::sem_wait(static_cast<sem_t*>(sem)) != 0 && errno == EINTR) {
    }
  }
  CUstream stream_;
  sem_t sem_{};
  std::mutex mutex_;
  std::condition_variable cv_;
  bool released_ = false;
  std::atomic<bool> timed_out_{false};
  std::thread watchdog_;
};

// A stream of its own (CU_STREAM_NON_BLOCKING: it never waits for, nor holds up, the legacy default stream, which
// the tests' synchronous copies use), destroyed at scope exit.
class TestStream {
public:
  TestStream() { check(driver().cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING), "cuStreamCreate"); }
  ~TestStream() { driver().cuStreamDestroy(stream_); }
  TestStream(const TestStream&) = delete;
  TestStream& operator=(const TestStream&) = delete;
  CUstream get() const { return stream_; }
  // CUDA_SUCCESS when everything queued has finished, CUDA_ERROR_NOT_READY while work is pending.
  CUresult query() const {
    using StreamQuery = CUresult (*)(CUstream);
    static const auto stream_query = reinterpret_cast<StreamQuery>(dlsym(driver().handle, "cuStreamQuery"));
    if (!stream_query) throw std::runtime_error("libcuda lacks cuStreamQuery");
    return stream_query(stream_);
  }

private:
  CUstream stream_ = nullptr;
};

} // namespace jitbmm::test
