// One run of a job per key in this process. The tuner keeps one tuning per key this way before it takes the
// machine-wide lock (cache/key_lock.hpp): threads of one process would otherwise wait on that lock as if on another
// process, and one that waited on a tuning that failed would find nothing stored and tune again.
#pragma once

#include <chrono>
#include <exception>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <string>

namespace jitbmm {

template <class T> class OncePerKey {
public:
  // The outcome of `job` for `key`: the first caller runs it; a caller that comes while it runs waits for it (calling
  // `on_wait` first), and one that comes later gets it at once; neither runs `job`. A job that throws has that
  // exception as its outcome, thrown again to every caller of the key.
  T get(const std::string& key, const std::function<T()>& job, const std::function<void()>& on_wait = {}) {
    std::promise<T> promise;
    std::shared_future<T> outcome;
    bool mine = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto [at, inserted] = outcomes_.try_emplace(key);
      if (inserted) at->second = promise.get_future().share();
      outcome = at->second;
      mine = inserted;
    }
    if (!mine) {
      if (on_wait && outcome.wait_for(std::chrono::seconds(0)) != std::future_status::ready) on_wait();
      return outcome.get();
    }
    try {
      promise.set_value(job());
    } catch (...) {
      promise.set_exception(std::current_exception());
    }
    return outcome.get();
  }

  // Drops every outcome (a run in progress still gives its own to the callers waiting for it): the next caller of a
  // key runs its job again.
  void forget() {
    std::lock_guard<std::mutex> lock(mutex_);
    outcomes_.clear();
  }

private:
  std::mutex mutex_;
  std::map<std::string, std::shared_future<T>> outcomes_;
};

} // namespace jitbmm
