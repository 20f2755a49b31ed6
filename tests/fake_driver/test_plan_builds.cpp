// What a plan builds on first use (a backward pass's kernel, chosen and perhaps tuned; the forward with argmax a
// selecting backward recomputes) builds with no lock of the plan held, on the fake driver (test_with_fake_driver.cpp
// says how it runs): a call that needs another piece of the same plan, one built already, never waits for it.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include "cache/disk_cache.hpp"
#include "jitbmm/plan.hpp"
#include "runtime/backward.hpp"
#include "runtime/device.hpp"
#include "runtime/tuner/policy.hpp"
#include "runtime/tuner/tuning_db.hpp"

using namespace jitbmm;

TEST_CASE("a backward pass chosen (waiting for another process's tuning) holds up no call of the plan's other pass") {
  Problem p;
  p.shape = {4, 128, 64, 128}; // large enough to be tuned under bucket
  set_tune_policy(TunePolicy::never);
  const SemiringBMM plan = SemiringBMM::get(p, default_spec(p));
  const std::size_t grad_b_bytes = plan.backward_workspace_bytes(false, true); // grad_b built now
  // "Another process tunes grad_a's bucket": its machine-wide tuning lock held here, so that grad_a's choice waits.
  const Problem gp = grad_problem(p);
  const TuningDevice td = tuning_device(*current_device());
  const std::string key = tuning_key(gp, td, true, Pass::grad_a);
  DiskCache* process = DiskCache::process_cache();
  REQUIRE(process);
  DiskCache cache(process->dir());
  KeyLock held = cache.lock(key, std::chrono::seconds(1));
  REQUIRE(held.held());
  set_tune_policy(TunePolicy::bucket);
  std::thread grad_a([&] { plan.backward_workspace_bytes(true, false); });
  std::this_thread::sleep_for(std::chrono::milliseconds(500)); // grad_a's choice is waiting for the lock by now
  // The "holder" stores its decision and lets go once the grad_b call has returned, or after 20 s.
  std::mutex m;
  std::condition_variable cv;
  bool returned = false;
  std::atomic<bool> released{false};
  std::thread holder([&] {
    {
      std::unique_lock<std::mutex> lock(m);
      cv.wait_for(lock, std::chrono::seconds(20), [&] { return returned; });
    }
    Decision d;
    d.spec = default_grad_spec(gp, Pass::grad_a);
    d.problem = describe(gp);
    d.family = tuning_family(gp, td, Pass::grad_a);
    d.bucket = true;
    d.shape = shape_bucket(gp.shape);
    CHECK(cache.put(key, "tune", encode_decision(d)));
    released = true;
    held.release();
  });
  CHECK(plan.backward_workspace_bytes(false, true) == grad_b_bytes);
  CHECK_FALSE(released.load()); // returned while grad_a's choice still waited
  {
    std::lock_guard<std::mutex> lock(m);
    returned = true;
  }
  cv.notify_one();
  holder.join();
  grad_a.join();
  set_tune_policy(TunePolicy::never);
}
