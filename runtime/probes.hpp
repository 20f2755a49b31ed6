// Ceilings measured on the device itself, so reports give the share of what this GPU can do.
#pragma once

#include "runtime/device.hpp"

namespace jitbmm {

// exp2 operations per second of the special-function unit (ex2.approx, fp32), median of timed runs.
double measure_exp_per_second(const DeviceInfo& device);
// Fused multiply-adds per second of the FP32 pipe (fma.rn.f32), median of timed runs.
double measure_fma_per_second(const DeviceInfo& device);

} // namespace jitbmm
