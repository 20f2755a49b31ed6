// Strategy "tiled_refine" (forward, max_plus, min_plus and max_times with argmax, f32 accumulators): the product with
// the fast policy of the one without argmax, noting for each output the group of 16 k that holds its value, then a
// second pass that finds the argmax within that group (templates/tiled/refine.cuh). The tile fields are the
// product's.
#include "generator/strategies/common.hpp"

namespace jitbmm::strategies {
namespace {

// The k of a group (the refinement scans one a output) and the most groups, which bound K to 16384. The
// refinement's block: a 128 × 64 tile of outputs, 256 threads (4 × 256 ≥ the groups its scan sums), 3 blocks an SM
// (registers for 85 a thread: no spills), or 2 with 64-bit indices (at 3 they spill 8 bytes on sm_80). Against
// 64 × 64 tiles it stages 3/4 of the operands an output, and its 3 blocks an SM beat 2 blocks of 512 threads and 4
// of 64 × 64 (measured on the H100).
constexpr int64_t kGroupK = 16, kMaxGroups = 1024;
constexpr int kRefineTileM = 128, kRefineTileN = 64, kRefineThreads = 256, kRefineBlocks = 3;

bool computes(const Problem& p) {
  const SemiringInfo& info = semiring_info(p.semiring);
  return p.with_argmax && info.select_op && info.fast_term && !dtype_info(p.dtype).wide_acc();
}

// Before tiled (50) for inputs of any dtype it computes with many outputs and K ≥ 512, where the product's two
// instructions a term and a second pass over 16 k an output cost less than tiled's per-term argmax. At K = 128 the
// second pass's fixed cost per output is more than it saves; the tuner times it.
int rank(const Problem& p) {
  const Shape& s = p.shape;
  if (!computes(p) || s.K < 512 || s.K > kGroupK * kMaxGroups || s.M < 16 || s.N < 16) return -1;
  if ((s.M + kRefineTileM - 1) / kRefineTileM > kMaxGridYZ) return -1;
  return outputs_of(p) >= (int64_t(1) << 16) ? 55 : -1;
}

// Where the shared default is 128 × 64 t8×4 at 2 blocks an SM, 64 × 64 t4×4 instead: at 3 blocks for f32 inputs with
// 32-bit indices (its 4 spilled bytes lie outside the k loop), at 2 with 64-bit ones, where 128 × 64 spills 112–116
// bytes in the product. Half inputs with 32-bit indices keep 128 × 64, where 64 × 64 is no faster. Each choice is
// the faster of the two on the H100 at 64×512³ (bench/RESULTS.md, "Viterbi and argmax").
void defaults(KernelSpec& spec, const Problem& p) {
  default_tiles(spec, p);
  if (spec.tile_m != 128 || spec.tile_n != 64) return;
  const bool index64 = needs_index64(spec, p);
  if (!index64 && p.dtype != DType::f32) return;
  spec.tile_m = spec.tile_n = 64, spec.thread_m = spec.thread_n = 4, spec.min_blocks = index64 ? 2 : 3;
  fit_row_tiles(spec, p.shape.M);
}

void check(const KernelSpec& spec, const Problem& p) {
  const Shape& s = p.shape;
  if (!computes(p))
    reject("strategy", "tiled_refine computes max_plus, min_plus and max_times with argmax in f32 accumulators");
  if (s.K > kGroupK * kMaxGroups)
    throw std::invalid_argument("shape.K: tiled_refine takes K up to " + std::to_string(kGroupK * kMaxGroups) +
                                " (its groups of k); use tiled");
  if ((s.M + kRefineTileM - 1) / kRefineTileM > kMaxGridYZ)
    throw std::invalid_argument("shape.M: more than 65535 row tiles of " + std::to_string(kRefineTileM) +
                                " for tiled_refine's second pass; use tiled");
  if (spec.tile_k <= 0 || kGroupK % spec.tile_k)
    reject("tile", "tiled_refine needs tile_k dividing " + std::to_string(kGroupK) + " (its groups of k)");
  check_tiles(spec, p, tiled_shared_bytes(spec));
}

// The forward tiles, and 64 × 64 t4×4 at 3 blocks an SM with 32-bit indices: 80 registers (f32 inputs spill 4 bytes,
// outside the k loop), a little faster than at 1 or 2 blocks for f32 at 64×512³ on the H100. Not 128 × 64 t8×4 at
// 3 blocks: it spills in its k loop (152 bytes) and runs slower.
std::vector<KernelSpec> candidates(const KernelSpec& base, const Problem&) {
  std::vector<KernelSpec> out;
  add_tiles(out, base, forward_tiles(false));
  if (!base.index64) add_tiles(out, base, {{64, 64, 16, 4, 4, 3}});
  return out;
}

Rendering render(const KernelSpec& s) {
  const SemiringInfo& info = semiring_info(s.semiring);
  const std::string refine = std::string("jb::refine_argmax_kernel<") + info.fast_term + ", " + info.select_op +
                             "<float>, " + dtype_info(s.dtype).device_type + ", " + index_type(s) + ", " +
                             std::to_string(kRefineTileM) + ", " + std::to_string(kRefineTileN) + ", " +
                             std::to_string(kRefineThreads) + ", " + std::to_string(kGroupK) + ", " +
                             std::to_string(kMaxGroups) + ">";
  return {{"tiled/refine.cuh"},
          "BmmParams",
          {main_entry(s, std::string("jb::tiled_groups_kernel<") + info.fast_term + ", " + semiring_type(s) + ", " +
                             io_types(s) + ", " + tile_args(s) + ", " + std::to_string(kGroupK) + ">"),
           {"_refine", kRefineThreads, s.index64 ? 2 : kRefineBlocks, refine}}};
}

LaunchPlan launches(const KernelSpec& s, const Problem& p) {
  LaunchPlan plan = forward_tile_launches(s, p);
  if (p.shape.K == 0) return plan; // no terms: the product writes argmax −1
  Launch refine;
  refine.entry = "_refine";
  refine.block[0] = kRefineThreads;
  refine.grid[0] = clamp_grid((p.shape.N + kRefineTileN - 1) / kRefineTileN, kMaxGridX);
  refine.grid[1] = static_cast<unsigned>((p.shape.M + kRefineTileM - 1) / kRefineTileM); // ≤ 65535: check
  refine.grid[2] = clamp_grid(p.shape.B, kMaxGridYZ);
  plan.launches.push_back(refine);
  return plan;
}

const RegisterStrategy registered{{Strategy::tiled_refine, "tiled_refine", false, kTileFields, rank, defaults, check,
                                   needs_index64, candidates, render, launches, tiled_shared_bytes}};

} // namespace
} // namespace jitbmm::strategies
