#include "generator/needed_features.hpp"

#include "generator/arch_features.hpp"
#include "generator/strategies/common.hpp"
#include "generator/strategy.hpp"

namespace jitbmm {

unsigned needed_features(const KernelSpec& spec) {
  // The packed kernel's 128 × 128 tile at 3 blocks an SM: without half pairs it is the f32 kernel
  // (templates/tiled/packed.cuh), whose 64 accumulators a thread do not fit those blocks' registers.
  if (strategies::packed_tiles(spec) && spec.tile_m * spec.tile_n > 128 * 64 && spec.min_blocks >= 3)
    return kHalfPairs;
  if (!(strategy_def(spec).fields & kMathField) || spec.math == Math::fma) return 0;
  // The wgmma forms copy their operands with the bulk copies (and wgmma_bf16_fused with cp.async's zero fill).
  if (uses_wgmma(spec.math)) return kWgmma | kBulkCopy | kAsyncCopy;
  return kMmaTf32Bf16;
}

} // namespace jitbmm
