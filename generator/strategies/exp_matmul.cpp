// Strategy "exp_matmul" (log only, forward): exponentiated operands through a dense matrix product, exact by a guard
// and a repair pass. Three launches: prepare (row and column maxima, the exponentiated and padded operands), the
// product with its guard (FMA, or tensor cores: math tf32x3, tf32 at precision fast), and the direct kernel on the
// tiles the guard flagged (templates/exp_matmul/*.cuh). A tuning candidate; never the default.
#include "generator/strategies/common.hpp"

#include <algorithm>

#include "templates/exp_matmul/bounds.cuh"
#include "support/checked_size.hpp"

namespace jitbmm::strategies {
namespace {

int rank(const Problem&) { return -1; }

// The repair kernel's blocks an SM: its launch bounds, and the most its grid launches a multiprocessor. One for
// f64 accumulators: at two (128 registers) its tile loop spilled 20–28 bytes.
int repair_blocks(const KernelSpec& s) { return dtype_info(s.dtype).wide_acc() ? 1 : 2; }

int64_t a_batches(const Problem& p) { return p.a().batch == 0 ? 1 : p.shape.B; }
int64_t b_batches(const Problem& p) { return p.b().batch == 0 ? 1 : p.shape.B; }
bool wide(const KernelSpec& s) { return dtype_info(s.dtype).wide_acc(); }

int factor_bytes(const KernelSpec& spec) { return jb::em_factor_bytes(em_form(spec), wide(spec)); }

jb::EmWorkspace workspace(const KernelSpec& spec, const Problem& p) {
  const Shape& s = p.shape;
  return jb::em_workspace(s.B, s.M, s.N, s.K, a_batches(p), b_batches(p), wide(spec), factor_bytes(spec),
                          jb::em_stores_factors(em_form(spec)));
}

// K as the workspace pads it (em_workspace).
int64_t padded_k(const KernelSpec& spec, const Problem& p) {
  return jb::em_round_up(p.shape.K, jb::em_k_align(factor_bytes(spec)));
}

// The padded operand copies ([Mp][Kp] and [Kp][Np] per batch) must fit 32-bit index math too.
bool fits_index32(const KernelSpec& spec, const Problem& p) {
  const Shape& s = p.shape;
  const auto ea = try_product({a_batches(p), jb::em_round_up(s.M, 128), padded_k(spec, p)});
  const auto eb = try_product({b_batches(p), jb::em_round_up(s.N, 128), padded_k(spec, p)});
  return ea && eb && *ea < kIndex32Limit && *eb < kIndex32Limit;
}

void defaults(KernelSpec& spec, const Problem& p) {
  if (wide(spec)) { // FP64 FMA
    spec.tile_m = spec.tile_n = 64, spec.tile_k = 8, spec.thread_m = spec.thread_n = 4;
  } else if (p.shape.M >= 128 && p.shape.N >= 128) { // tensor cores, fp32-level: warps of 64×32 outputs;
    spec.math = Math::tf32x3;                        // matches or beats FP32 FMA at these sizes
    spec.tile_m = spec.tile_n = 128, spec.tile_k = 16, spec.thread_m = spec.thread_n = 8, spec.min_blocks = 2;
  } else {
    spec.math = Math::tf32x3;
    spec.tile_m = spec.tile_n = 64, spec.tile_k = 16, spec.thread_m = 4, spec.thread_n = 4, spec.min_blocks = 2;
  }
}

// The workspace (jb::em_workspace sums these without checks): each padded operand copy and the repair flags within
// 2^60 bytes, so the sum fits too.
void check_workspace(const KernelSpec& spec, const Problem& p) {
  const Shape& s = p.shape;
  const int64_t acc = factor_bytes(spec), rt = jb::em_repair_tile(s.B, s.M, s.N), limit = int64_t(1) << 60;
  const auto ea = try_product({a_batches(p), jb::em_round_up(s.M, 128), padded_k(spec, p), acc});
  const auto eb = try_product({b_batches(p), jb::em_round_up(s.N, 128), padded_k(spec, p), acc});
  const auto flags = try_product({s.B, (s.M + rt - 1) / rt, (s.N + rt - 1) / rt, 4});
  if (!ea || !eb || !flags || *ea > limit || *eb > limit || *flags > limit)
    throw std::invalid_argument("shape: exp_matmul's padded workspace for " + to_string(s) +
                                " exceeds 2^60 bytes; use tiled");
}

int shared_bytes(const KernelSpec& s) {
  const int acc = dtype_info(s.dtype).acc_bytes;
  const int lines = (s.tile_m + s.tile_n) * (acc + 16); // the row and column maxima and masks
  // wgmma_bf16_fused's producer: the line shifts of em_made_lead + 1 tiles (templates/exp_matmul/fused.cuh).
  const int shifts =
      s.math == Math::wgmma_bf16_fused ? (jb::em_made_lead(wgmma_stages(s)) + 1) * (s.tile_m + s.tile_n) * 4 : 0;
  if (uses_wgmma(s.math)) return lines + shifts + wgmma_static_shared_bytes(s);
  // The a and b slices (mma rows are k-major, padded by 16 bytes).
  const int fb = factor_bytes(s);
  const int slices = s.math == Math::fma ? 2 * s.tile_k * (s.tile_m + 4 + s.tile_n + 4) * acc
                                         : 2 * (s.tile_m + s.tile_n) * (s.tile_k * fb + 16);
  return slices + lines;
}

void check(const KernelSpec& spec, const Problem& p) {
  if (spec.semiring != Semiring::log) reject("strategy", "exp_matmul computes the log semiring only");
  check_exp_matmul_tiles(spec, p);
  check_workspace(spec, p);
  if (!spec.index64 && !fits_index32(spec, p))
    reject("index64", "exp_matmul's padded operand copies overflow 32-bit index math; use a 64-bit index variant");
  // The wgmma forms walk a list of their tiles from a grid along x that loops (launches()): no grid bound on M or N.
  if (uses_wgmma(spec.math))
    check_tiles(spec, TileGrid{1, "shape.M", 1, "shape.N"}, shared_bytes(spec));
  else
    check_tiles(spec, p, shared_bytes(spec));
}

bool index64(const KernelSpec& spec, const Problem& p) { return needs_index64(spec, p) || !fits_index32(spec, p); }

// FMA tiles for every dtype; tensor cores (3xTF32, and 1xTF32 at Precision::fast) for f32-accumulating dtypes,
// through mma.sync on every GPU and through wgmma on sm_90 (the tuner drops those elsewhere: DeviceLimits::wgmma).
std::vector<KernelSpec> candidates(const KernelSpec& first, const Problem& p) {
  std::vector<KernelSpec> out;
  const Shape& s = p.shape;
  if (s.M < 16 || s.N < 16 || s.K < 16) return out;
  KernelSpec base = first;
  base.math = Math::fma;
  if (dtype_info(p.dtype).wide_acc()) {
    add_tiles(out, base, {{64, 64, 8, 4, 4, 1}, {64, 32, 8, 4, 2, 1}, {32, 32, 8, 2, 2, 2}});
    return out;
  }
  add_tiles(out, base, {{128, 128, 8, 8, 8, 1}, {128, 64, 16, 8, 4, 2}, {64, 64, 16, 4, 4, 2}});
  for (Math m : {Math::tf32x3, Math::tf32}) {
    if (m == Math::tf32 && p.precision != Precision::fast) continue;
    base.math = m;
    add_tiles(out, base,
              {{128, 128, 16, 8, 8, 1}, {128, 128, 16, 8, 8, 2}, {128, 64, 16, 8, 4, 2}, {64, 64, 16, 4, 4, 2}});
  }
  // One TF32 product only at precision fast: half outputs, where it would be allowed too, have the faster BF16
  // forms below.
  add_wgmma_tiles(out, base, p.precision == Precision::fast);
  if (dtype_info(p.output_dtype()).half) { // BF16 factors: inside their contract
    // Not the split TF32 form's 128 × 128 warpgroup tile: its half-pair epilogue spills a word (ptxas, sm_90), and
    // the BF16 forms below take a quarter of its time for half outputs (tuning/shipped).
    out.erase(std::remove_if(out.begin(), out.end(),
                             [](const KernelSpec& s) { return s.math == Math::wgmma_tf32x3 && s.tile_n == 128; }),
              out.end());
    base.math = Math::bf16;
    add_tiles(out, base,
              {{128, 128, 32, 8, 8, 1}, {128, 128, 32, 8, 8, 2}, {128, 64, 32, 8, 4, 2}, {64, 64, 32, 4, 4, 2}});
    base.math = Math::wgmma_bf16; // Hopper only, as add_wgmma_tiles
    add_tiles(out, base, {{128, 256, 64, 2, 64, 1}, {128, 128, 64, 2, 32, 1}, {128, 64, 64, 2, 16, 1}});
    // Not wgmma_bf16_fused: its producer warpgroup alone makes the factors while the consumers wait, so it is slower
    // than wgmma_bf16 at every shape but the smallest. Named in a spec, it runs.
  }
  return out;
}

Rendering render(const KernelSpec& s) {
  Rendering r{{"exp_matmul/prepare.cuh", "exp_matmul/repair.cuh"}, "BmmParams", {}};
  const std::string io = io_types(s);
  if (uses_wgmma(s.math)) {
    r.headers.push_back("exp_matmul/wgmma.cuh");
    r.entries.push_back(main_entry(s, "jb::exp_matmul_wgmma_kernel<" + io + ", " + wgmma_tile_args(s) + ">"));
  } else {
    r.headers.push_back(s.math == Math::bf16 ? "exp_matmul/bf16.cuh" : "exp_matmul/product.cuh");
    const std::string product = s.math == Math::bf16     ? "jb::EmBf16Product"
                                : s.math == Math::tf32x3 ? "jb::EmTf32Product<true>"
                                                         : "jb::EmTf32Product<false>";
    r.entries.push_back(main_entry(s, s.math == Math::fma ? "jb::exp_matmul_fma_kernel<" + io + ", " + tile_args(s) + ">"
                                                          : "jb::exp_matmul_mma_kernel<" + io + ", " + tile_args(s) +
                                                                ", " + product + ">"));
  }
  // The prepare pass waits on memory, so it runs as many blocks an SM as fit without spilling (exp_matmul/prepare.cuh:
  // em_prepare_lines): 3 (80 registers), 2 for f64 inputs. At 4 (64 registers) ptxas spilled for sm_80 and with
  // 64-bit indices, and f32 inputs ran slower at 4 (their second sweep misses L2 more often); half inputs with 32-bit
  // indices on the sm_90 (wgmma) forms run 4 without spilling, where the extra warps hide the pass's memory latency.
  // Its FORM: how the product reads the operands.
  const DTypeInfo& in = dtype_info(s.dtype);
  const int prepare_blocks = in.wide_acc() ? 2 : in.half && uses_wgmma(s.math) && !s.index64 ? 4 : 3;
  r.entries.push_back({"_prepare", 256, prepare_blocks,
                       "jb::em_prepare_kernel<" + std::string(dtype_info(s.dtype).device_type) + ", " + index_type(s) +
                           ", " + acc_type(s) + ", " + std::to_string(em_form(s)) + ">"});
  // The exact repair at either tile em_repair_tile may name (launches picks one by the shape).
  const bool dbl = in.wide_acc();
  r.entries.push_back({"_repair64", 256, repair_blocks(s),
                       "jb::em_repair_kernel<" + io + ", " + (dbl ? "64, 64, 8, 4, 4" : "64, 64, 16, 4, 4") + ">"});
  r.entries.push_back({"_repair32", 256, repair_blocks(s),
                       "jb::em_repair_kernel<" + io + ", " + (dbl ? "32, 32, 8, 2, 2" : "32, 32, 16, 2, 2") + ">"});
  return r;
}

LaunchPlan launches(const KernelSpec& spec, const Problem& p) {
  const Shape& s = p.shape;
  const jb::EmWorkspace w = workspace(spec, p);
  const jb::EmStatsGrid g = jb::em_stats_grid(s.M, s.N, a_batches(p), b_batches(p));
  LaunchPlan plan;
  Launch prepare, main, repair;
  prepare.entry = "_prepare";
  prepare.block[0] = 256;
  prepare.grid[0] = static_cast<unsigned>(g.row_blocks + g.col_blocks);
  prepare.grid_same_b = static_cast<unsigned>(g.row_blocks); // blocks [0, row_blocks) prepare a (em_prepare_kernel)
  tile_grid(main, spec, s.M, s.N, s.B);
  if (uses_wgmma(spec.math)) {
    // The wgmma kernel numbers its tiles along grid[0] (templates/exp_matmul/wgmma.cuh). Persistent, a block an SM
    // (its stages fill shared memory) looping over the tiles, so that its producer fetches a tile's first slices while
    // the consumers finish the tile before it: faster for BF16 and TF32 factors. Not for the split form (tf32x3),
    // which ran slower persistent (its producer's split of a tile's first slice waits behind the last): a block a tile.
    const int64_t tiles = s.B * ((s.M + spec.tile_m - 1) / spec.tile_m) * ((s.N + spec.tile_n - 1) / spec.tile_n);
    main.grid[0] = clamp_grid(tiles, kMaxGridX);
    main.grid[1] = main.grid[2] = 1;
    main.blocks_per_sm = split_wgmma(spec) ? 0 : 1;
  }
  main.dynamic_shared = static_cast<unsigned>(wgmma_dynamic_shared_bytes(spec));
  // The repair walks the list of its tiles (templates/exp_matmul/repair.cuh), repair_blocks an SM at most.
  const int64_t rt = jb::em_repair_tile(s.B, s.M, s.N);
  repair.entry = rt == 64 ? "_repair64" : "_repair32";
  repair.block[0] = 256;
  repair.grid[0] = clamp_grid(s.B * ((s.M + rt - 1) / rt) * ((s.N + rt - 1) / rt), kMaxGridX);
  repair.blocks_per_sm = static_cast<unsigned>(repair_blocks(spec));
  repair.repair_flags_at = static_cast<std::size_t>(w.flags);
  plan.launches = {prepare, main, repair};
  plan.workspace_bytes = static_cast<std::size_t>(w.bytes);
  return plan;
}

RepairCounts repair_counts(const KernelSpec& spec, const Problem& p) {
  const jb::EmWorkspace w = workspace(spec, p);
  return {static_cast<std::size_t>(w.repaired), static_cast<std::size_t>(w.flags), w.tiles};
}

const RegisterStrategy registered{{Strategy::exp_matmul, "exp_matmul", false, kTileFields | kMathField, rank, defaults,
                                   check, index64, candidates, render, launches, shared_bytes,
                                   wgmma_dynamic_shared_bytes, repair_counts, nullptr, true}};

} // namespace
} // namespace jitbmm::strategies
