// Streams a plan runs work on beside its callers' streams, and the join that makes a caller's stream wait for it.
#pragma once

#include <cstddef>
#include <map>
#include <mutex>

#include "runtime/driver_api.hpp"

namespace jitbmm {

// One stream of its own for each caller stream (made on first use), so that calls on different streams never wait
// for each other's work; none past kMax caller streams, whose calls then run all their work on their own stream.
class SideStreams {
public:
  static constexpr std::size_t kMax = 8;
  // Streams of `context`, released with it.
  explicit SideStreams(CUcontext context) : context_(context) {}
  ~SideStreams();
  SideStreams(const SideStreams&) = delete;
  SideStreams& operator=(const SideStreams&) = delete;
  // The side stream of `caller`; null past kMax caller streams.
  CUstream of(CUstream caller) const;

private:
  CUcontext context_;
  mutable std::mutex mutex_;
  mutable std::map<CUstream, CUstream> sides_; // by caller stream
};

// Makes `stream` wait for `side` when it leaves scope, however it leaves: scratch that work on `side` uses, given
// back on `stream`, is then free only once that work is done. A failed wait leaves the error of the call that failed
// first to its caller.
struct JoinOnExit {
  CUstream stream, side;
  ~JoinOnExit();
};

} // namespace jitbmm
