// Strategy "tiled" (forward): GEMM-style register tiling. A block computes a tile_m × tile_n tile of outputs, K is
// staged through shared memory tile_k at a time, each thread keeps thread_m × thread_n outputs in registers
// (templates/tiled/tiled.cuh; the log semiring in f32 accumulators: templates/tiled/log.cuh). The default for many
// outputs.
#include "generator/strategies/common.hpp"

namespace jitbmm::strategies {
namespace {

int rank(const Problem& p) {
  const Shape& s = p.shape;
  const int64_t outputs = outputs_of(p);
  if (s.K == 0 || outputs == 0 || s.M < 16 || s.N < 16) return -1;
  if (outputs >= (int64_t(1) << 16) && (s.M + 127) / 128 <= kMaxGridYZ) return 50; // many outputs
  return (s.M + 31) / 32 <= kMaxGridYZ ? 20 : -1; // after split-K and warp
}

// The fast kernels' tiles at 3 blocks an SM (85 registers a thread): with 32-bit indices only (64-bit ones spill
// 40–144 bytes); 128 × 128 for packed pairs only, which spill 16 bytes there on sm_90 (f32 accumulators 168). On the
// H100, 128 × 64 at 3 blocks beats 2 blocks for f32 and the half pairs (more warps hide the slices' loads), and
// 128 × 128 at 3 is the fastest tile for the pairs at 64×512³.
std::vector<TileChoice> three_block_tiles(const KernelSpec& s) {
  if (!fast_tiles(s) || s.index64) return {};
  std::vector<TileChoice> tiles = {{128, 64, 16, 8, 4, 3}, {64, 128, 16, 4, 8, 3}};
  if (packed_tiles(s)) tiles.push_back({128, 128, 16, 8, 8, 3});
  return tiles;
}

void defaults(KernelSpec& spec, const Problem& p) {
  default_tiles(spec, p);
  KernelSpec indexed = spec;
  indexed.index64 = needs_index64(spec, p);
  if (spec.tile_m == 128 && spec.tile_n == 64 && !three_block_tiles(indexed).empty()) spec.min_blocks = 3;
}

void check(const KernelSpec& spec, const Problem& p) { check_tiles(spec, p, tiled_shared_bytes(spec)); }

std::vector<KernelSpec> candidates(const KernelSpec& base, const Problem& p) {
  std::vector<KernelSpec> out;
  if (p.shape.M >= 8 && p.shape.N >= 8) {
    add_tiles(out, base, forward_tiles(dtype_info(p.dtype).wide_acc()));
    add_tiles(out, base, three_block_tiles(base));
  }
  return out;
}

Rendering render(const KernelSpec& s) { return {{tiled_header(s)}, "BmmParams", {main_entry(s, tiled_call(s))}}; }

const RegisterStrategy registered{{Strategy::tiled, "tiled", false, kTileFields, rank, defaults, check, needs_index64,
                                   candidates, render, forward_tile_launches, tiled_shared_bytes}};

} // namespace
} // namespace jitbmm::strategies
