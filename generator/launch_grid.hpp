// The grids generated kernels are launched with. Their kernels loop over whatever a grid does not cover, so a
// grid is capped, never sized to fail a launch.
#pragma once

#include <algorithm>
#include <cstdint>

namespace jitbmm {

// The largest grid x (y and z: kMaxGridYZ) CUDA launches.
constexpr int64_t kMaxGridX = INT32_MAX;
constexpr int64_t kMaxGridYZ = 65535;
// The blocks of a grid-strided launch (a block per item, or per few items, the rest strided over): enough to fill
// any GPU many times over, few enough that a launch stays cheap to schedule.
constexpr int64_t kMaxGridStrideBlocks = int64_t(1) << 20;

inline unsigned clamp_grid(int64_t blocks, int64_t limit) { return static_cast<unsigned>(std::min(blocks, limit)); }

} // namespace jitbmm
