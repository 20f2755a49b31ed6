// Device-time measurement with CUDA events: warm-up first, then the median of individually timed runs, each
// optionally preceded by a hook outside the timed span (an L2 flush, so that no run finds its data in cache).
#pragma once

#include <functional>
#include <vector>

#include "jitbmm/types.hpp"
#include "runtime/device_memory.hpp"

namespace jitbmm {

struct Timing {
  double median_ms = 0, min_ms = 0, max_ms = 0;
  int runs = 0;
};

// Called before each timed run (run = 0, 1, …), before its start event is recorded.
using BeforeRun = std::function<void(int run)>;

// Runs `launch(stream)` `warmup` times, then times `runs` launches one by one (events around each), calling
// `before_run` before each when given. The events are released however the measurement ends.
Timing time_launches(const std::function<void(Stream)>& launch, int warmup, int runs, Stream stream = nullptr,
                     const BeforeRun& before_run = {});

// A device buffer larger than any L2 (256 MiB, in the current context), rewritten before each timed run so that
// a kernel cannot find the previous run's data in L2. Pass it as `before_run`: std::ref(flush).
class L2Flush {
public:
  L2Flush();
  void operator()(int run) const; // fills the buffer with the byte `run` on the default stream

private:
  DeviceBuffer buffer_;
};

} // namespace jitbmm
