// Device-time measurement with CUDA events: warm-up first, then the median of individually timed runs.
#pragma once

#include <functional>
#include <vector>

#include "jitbmm/types.hpp"

namespace jitbmm {

struct Timing {
  double median_ms = 0, min_ms = 0, max_ms = 0;
  int runs = 0;
};

// Runs `launch(stream)` `warmup` times, then times `runs` launches one by one (events around each).
Timing time_launches(const std::function<void(Stream)>& launch, int warmup, int runs, Stream stream = nullptr);

} // namespace jitbmm
