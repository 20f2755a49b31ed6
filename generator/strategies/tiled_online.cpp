// Strategy "tiled_online" (log only, f32 accumulators): the tiled kernel with each output's scale kept online
// (templates/tiled/online.cuh), exact on any data in one pass where `tiled` recomputes outputs whose terms spread
// widely. Never the default; a tuning candidate, and the kind of variant a plan moves to on wide-range data.
#include "generator/strategies/common.hpp"

namespace jitbmm::strategies {
namespace {

int rank(const Problem&) { return -1; }

// The tiles, and each line's slice maximum and running maximum.
int shared_bytes(const KernelSpec& s) { return tiled_shared_bytes(s) + 2 * (s.tile_m + s.tile_n) * 4; }

void defaults(KernelSpec& spec, const Problem& p) {
  const Shape& s = p.shape;
  // Three arrays a thread (sums, scales, the slice's sums) leave room for 4×4 outputs at two blocks an SM; with
  // 64-bit indices at one (at two, ptxas spills).
  if (s.M >= 64 && s.N >= 64)
    spec.tile_m = spec.tile_n = 64, spec.thread_m = spec.thread_n = 4, spec.min_blocks = 2;
  else
    spec.tile_m = spec.tile_n = 32, spec.thread_m = spec.thread_n = 2, spec.min_blocks = 1;
  spec.tile_k = 16;
  if (needs_index64(spec, p)) spec.min_blocks = 1;
}

void check(const KernelSpec& spec, const Problem& p) {
  if (spec.semiring != Semiring::log) reject("strategy", "tiled_online is the log semiring's online tiled form");
  if (dtype_info(p.dtype).wide_acc())
    reject("strategy", "tiled_online accumulates in f32; f64 log is exact on any data in `tiled` already");
  check_tiles(spec, p, shared_bytes(spec));
}

std::vector<KernelSpec> candidates(const KernelSpec& base, const Problem& p) {
  std::vector<KernelSpec> out;
  if (p.semiring != Semiring::log || dtype_info(p.dtype).wide_acc() || p.shape.M < 8 || p.shape.N < 8) return out;
  // None spills on sm_80 or sm_90 (jitbmm inspect --emit resources); with 64-bit indices, at one block an SM.
  add_tiles(out, base,
            {{64, 64, 16, 4, 4, 2},
             {64, 64, 32, 4, 4, 1},
             {128, 64, 16, 8, 4, 1},
             {64, 128, 16, 4, 8, 1},
             {32, 64, 16, 2, 4, 2},
             {32, 32, 16, 2, 2, 2}});
  if (base.index64)
    for (KernelSpec& c : out) c.min_blocks = 1;
  return out;
}

Rendering render(const KernelSpec& s) {
  return {
      {"tiled/online.cuh"}, "BmmParams", {main_entry(s, "jb::tiled_online_kernel<" + io_types(s) + ", " + tile_args(s) + ">")}};
}

const RegisterStrategy registered{{Strategy::tiled_online, "tiled_online", false, kTileFields, rank, defaults, check,
                                   needs_index64, candidates, render, forward_tile_launches, shared_bytes}};

} // namespace
} // namespace jitbmm::strategies
