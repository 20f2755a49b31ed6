// The grids generated kernels are launched with. Their kernels loop over whatever a grid does not cover, so a
// grid is capped, never sized to fail a launch.
#pragma once

#include <algorithm>
#include <cstdint>

namespace jitbmm {

// The largest grid x (y and z: kMaxGridYZ) CUDA launches.
constexpr int64_t kMaxGridX = INT32_MAX;
constexpr int64_t kMaxGridYZ = 65535;
// A grid-strided launch (a block per item, or per few items, the rest strided over): at most kMaxGridStrideBlocks
// blocks, enough to fill any GPU many times over, and a step of at most kMaxGridStrideStep items a pass, the room
// 32-bit index variants keep below 2^31 (kIndex32Limit) so that an index plus one step still fits in int.
constexpr int64_t kMaxGridStrideBlocks = int64_t(1) << 20;
constexpr int64_t kMaxGridStrideStep = int64_t(1) << 22;

inline unsigned clamp_grid(int64_t blocks, int64_t limit) { return static_cast<unsigned>(std::min(blocks, limit)); }

// The blocks of a grid-strided launch over `items`, `per_block` items a block a pass: one pass where the caps allow,
// at least one block.
inline unsigned grid_stride_blocks(int64_t items, int64_t per_block) {
  const int64_t cap = std::min(kMaxGridStrideBlocks, kMaxGridStrideStep / per_block);
  return static_cast<unsigned>(std::clamp<int64_t>((items + per_block - 1) / per_block, 1, cap));
}

} // namespace jitbmm
