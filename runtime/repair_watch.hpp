// Watching an exp_matmul plan's repairs, so that a plan tuned on well-behaved data notices wide-range data.
//
// exp_matmul counts, on the GPU, the outputs its guard sends to the exact repair pass (the prepare pass zeroes the
// counter, the product adds to it). On wide-range inputs most outputs go there and the plan's variant, tuned on
// randn, is no longer the fastest. A plan made by the tuner (SemiringBMM::get) whose strategy's entry says where
// the count is (StrategyDef::repair_counts) watches it: after an observed call it copies the counter to pinned host
// memory and records an event on the caller's stream, both asynchronous; a later call reads the copy only once the
// event has completed (cuEventQuery, never a wait), so the hot path never synchronises. When an observed call
// repaired at least kWideRepairShare of its outputs, the plan asks the tuner for the variant fastest on wide-range
// inputs (choose_wide) and runs that from then on. Nothing is observed while the stream is being captured into a CUDA
// graph. JITBMM_REPAIR_WATCH=off turns watching off.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>

#include "runtime/device.hpp"

namespace jitbmm {

// An observed call repairing this share of its outputs: wide data. Where exp_matmul's repairs start to cost more than
// the direct tiled_online kernel: measured on an H100, exp_matmul still wins with about 15% of its outputs repaired
// and has lost at about 22% (bench/RESULTS.md, "Wide-range data").
constexpr double kWideRepairShare = 0.15;
constexpr int kEarlyObservations = 16;    // the first calls are all observed (a switch within 2-3 calls) ...
constexpr long kLaterEvery = 64;          // ... then one call in this many (data can widen later in training)

// Whether plans watch their repairs ($JITBMM_REPAIR_WATCH: on unless off, 0, false or no in any case; a
// value that is not a switch is an error naming it).
bool repair_watch_enabled();

// While one lives on a thread, the plans' calls there neither read nor count their repairs: they stay on their
// variant and allocate nothing for the watch. An XLA handler's execute stage holds one, since it may only launch.
class UnwatchedCalls {
public:
  UnwatchedCalls();
  ~UnwatchedCalls();
  UnwatchedCalls(const UnwatchedCalls&) = delete;
  UnwatchedCalls& operator=(const UnwatchedCalls&) = delete;
  // Whether one lives on this thread.
  static bool active();

private:
  bool previous_;
};

class RepairWatch {
public:
  // For a plan on `device` with `outputs` outputs whose repair counter (uint64) sits `counter_offset` bytes into the
  // workspace of each call. Allocates nothing: the pinned buffer and the event are made at the first observed call
  // (never inside a capture, where a pinned allocation is not allowed); if they cannot be, watching stops with a
  // warning and the call goes on.
  RepairWatch(const DeviceInfo& device, int64_t outputs, std::size_t counter_offset);
  ~RepairWatch();
  RepairWatch(const RepairWatch&) = delete;
  RepairWatch& operator=(const RepairWatch&) = delete;

  // Before a call on `stream`: the share of outputs the last observed call repaired, once its copy has landed;
  // nothing while none has, or while `stream` is being captured.
  std::optional<double> landed(CUstream stream);
  // After a call's launches on `stream` with its workspace at `workspace`: on an observed call (and none pending),
  // enqueues the copy of the counter and the event.
  void observe(const void* workspace, CUstream stream);

private:
  CUcontext context_;
  int64_t outputs_;
  std::size_t counter_offset_;
  std::mutex mutex_; // calls from several threads: one observes, the others skip (try_lock)
  uint64_t* pinned_ = nullptr;
  CUevent event_ = nullptr;
  bool pending_ = false;
  bool broken_ = false; // the buffer or the event could not be made: nothing is observed
  long calls_ = 0;
  int observations_ = 0;
};

} // namespace jitbmm
