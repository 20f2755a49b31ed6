// Ceilings measured on the device itself, so reports give the share of what this GPU can do.
#pragma once

#include "runtime/device.hpp"

namespace jitbmm {

// exp2 operations per second of the special-function unit (ex2.approx, fp32), median of timed runs.
double measure_exp_per_second(const DeviceInfo& device);

} // namespace jitbmm
