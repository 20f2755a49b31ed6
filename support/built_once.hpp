// A value built on first use and kept, one build at a time, with no lock held while it builds: what a plan keeps of
// its own (a pass's kernel, a product's plan), where a build may compile or tune for seconds and another thread may
// meanwhile want something else of the same plan.
#pragma once

#include <exception>
#include <future>
#include <mutex>
#include <optional>
#include <utility>

namespace jitbmm {

template <class T> class BuiltOnce {
public:
  // The value: the first caller builds it with `build()`; a caller that comes while it builds waits for that build
  // alone, and one that comes later gets it at once. A build that throws keeps nothing: its exception goes to the
  // callers that waited for it, and the next caller builds again.
  template <class Build> T get(Build&& build) const {
    std::optional<std::promise<T>> promise; // made only by the caller that builds: a built value costs a lock alone
    std::shared_future<T> pending;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (value_) return *value_;
      if (building_.valid()) {
        pending = building_;
      } else {
        promise.emplace();
        building_ = promise->get_future().share();
      }
    }
    if (pending.valid()) return pending.get();
    try {
      T made = std::forward<Build>(build)();
      {
        std::lock_guard<std::mutex> lock(mutex_);
        value_ = made;
        building_ = {};
      }
      promise->set_value(made);
      return made;
    } catch (...) {
      promise->set_exception(std::current_exception());
      std::lock_guard<std::mutex> lock(mutex_);
      building_ = {};
      throw;
    }
  }

  // Whether the value is built (a build in progress is not).
  bool built() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return value_.has_value();
  }

private:
  mutable std::mutex mutex_; // guards the two below; never held across a build
  mutable std::optional<T> value_;
  mutable std::shared_future<T> building_;
};

} // namespace jitbmm
