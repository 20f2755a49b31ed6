// Strategy "exp_matmul" for a gradient pass (log only): the gradient as a dense product of exponentiated operands on
// tensor cores (math tf32x3; tf32 at precision fast and for f16 and bf16 gradients; on sm_90 also wgmma_tf32x3 and
// wgmma_tf32), exact by a guard and the direct backward on what it gives up.
// Five launches: stats, H, the product, the direct pass, and the store of a broadcast gradient
// (templates/exp_matmul_grad*.cuh). A tuning candidate beside the direct backward; never the default.
#include "generator/strategies/common.hpp"

#include <algorithm>

#include "templates/exp_matmul/bounds.cuh"
#include "templates/exp_matmul/grad_bounds.cuh"
#include "support/checked_size.hpp"

namespace jitbmm::strategies {
namespace {

int rank(const Problem&) { return -1; } // a tuning candidate only

bool ga(const KernelSpec& s) { return s.pass == Pass::grad_a; }
bool wide(const Problem& p) { return dtype_info(p.dtype).wide_acc(); }

jb::EgDims dims(const KernelSpec& s, const Problem& p) {
  const Shape& sh = p.shape;
  return jb::eg_dims(sh.B, sh.M, sh.N, sh.K, p.a().batch, p.b().batch, ga(s));
}

// The direct pass's tiles: the tiled backward's default for f32 accumulators (grad_tiled.cpp).
constexpr int kRepairM = 32, kRepairN = 64, kRepairK = 16, kRepairTM = 2, kRepairTN = 4;
// The direct pass's grid: at least this many blocks where the shape has them (several waves of them on any GPU).
constexpr int64_t kRepairBlocks = 2048;

void defaults(KernelSpec& spec, const Problem& p) {
  spec.math = Math::tf32x3;
  const jb::EgDims d = dims(spec, p);
  // 128×128 takes more than 128 registers a thread with its epilogue: one block an SM, or it spills.
  if (d.Mx >= 128 && d.Kx >= 128)
    spec.tile_m = spec.tile_n = 128, spec.tile_k = 16, spec.thread_m = spec.thread_n = 8, spec.min_blocks = 1;
  else
    spec.tile_m = spec.tile_n = 64, spec.tile_k = 16, spec.thread_m = 4, spec.thread_n = 4, spec.min_blocks = 2;
}

// Every workspace piece within 2^60 bytes (eg_workspace sums them without checks).
void check_workspace(const KernelSpec& spec, const Problem& p) {
  const jb::EgDims d = dims(spec, p);
  const int64_t limit = int64_t(1) << 60, B = p.shape.B;
  const int64_t Mxp = jb::em_round_up(d.Mx, 128), Kxp = jb::em_round_up(d.Kx, 128), Nxp = jb::em_round_up(d.Nx, 32);
  for (const auto& part : {try_product({B, Mxp, Nxp, 4}), try_product({d.y_batches, Kxp, Nxp, 4}),
                           try_product({d.Mx, d.Kx, 4}), try_product({B, d.Mx, Nxp / 32, 4})})
    if (!part || *part > limit)
      throw std::invalid_argument("shape: the exp_matmul backward's workspace for " + to_string(p.shape) +
                                  " exceeds 2^60 bytes; use tiled");
}

// The padded operands ([B][Mxp][Nxp], [y_batches][Kxp][Nxp]) must fit 32-bit index math too.
bool fits_index32(const KernelSpec& spec, const Problem& p) {
  const jb::EgDims d = dims(spec, p);
  const auto h = try_product({p.shape.B, jb::em_round_up(d.Mx, 128), jb::em_round_up(d.Nx, 32)});
  const auto v = try_product({d.y_batches, jb::em_round_up(d.Kx, 128), jb::em_round_up(d.Nx, 32)});
  return h && v && *h < kIndex32Limit && *v < kIndex32Limit;
}

int shared_bytes(const KernelSpec& s) {
  return uses_wgmma(s.math) ? wgmma_static_shared_bytes(s) : 2 * (s.tile_m + s.tile_n) * (s.tile_k + 4) * 4;
}

void check(const KernelSpec& spec, const Problem& p) {
  if (spec.semiring != Semiring::log) reject("strategy", "the exp_matmul backward computes the log semiring only");
  if (spec.math == Math::fma)
    reject("math", "the exp_matmul backward runs on tensor cores (tf32x3, or tf32 where allowed; wgmma_* on "
                   "sm_90); its FMA form (and so f64) is not built: use tiled, or tf32x3");
  if (bf16_factors(spec.math))
    reject("math", "the exp_matmul backward has no " + std::string(math_name(spec.math)) + " form: use tf32x3");
  check_exp_matmul_tiles(spec, p);
  const jb::EgDims d = dims(spec, p);
  if (d.Nx == 0) reject("strategy", "the exp_matmul backward needs outputs to reduce over; use tiled");
  if (!jb::eg_fits(d.Kx, d.Nx, wide(p)))
    reject("strategy", "the exp_matmul backward's exponent range does not fit K = " + std::to_string(p.shape.K) +
                           " with a reduction of " + std::to_string(d.Nx) + "; use tiled");
  check_workspace(spec, p);
  if (!spec.index64 && !fits_index32(spec, p))
    reject("index64", "the exp_matmul backward's padded operands overflow 32-bit index math; use a 64-bit index variant");
  if ((d.Mx + kRepairM - 1) / kRepairM > 65535) // the canonical rows: grad_a's M, grad_b's N
    throw std::invalid_argument(std::string(spec.pass == Pass::grad_a ? "shape.M" : "shape.N") +
                                ": more than 65535 row tiles for the exp_matmul backward's direct pass; use tiled");
  // Its main launch tiles the canonical rows × columns: grad_a's M × K, grad_b's N × K.
  check_tiles(spec, {d.Mx, spec.pass == Pass::grad_a ? "shape.M" : "shape.N", d.Kx, "shape.K"}, shared_bytes(spec));
}

bool index64(const KernelSpec& spec, const Problem& p) { return needs_index64(spec, p) || !fits_index32(spec, p); }

std::vector<KernelSpec> candidates(const KernelSpec& first, const Problem& p) {
  std::vector<KernelSpec> out;
  const jb::EgDims d = dims(first, p);
  if (d.Mx < 16 || d.Kx < 16 || d.Nx < 16) return out;
  KernelSpec base = first;
  const bool single = single_tf32_allowed(first, p); // f16 and bf16 gradients too: they have no BF16 form
  for (Math m : {Math::tf32x3, Math::tf32}) {
    if (m == Math::tf32 && !single) continue;
    base.math = m;
    add_tiles(out, base, {{128, 128, 16, 8, 8, 1}, {128, 64, 16, 8, 4, 1}, {64, 64, 16, 4, 4, 2}});
  }
  add_wgmma_tiles(out, base, single); // Hopper only (the tuner drops them elsewhere: DeviceLimits::wgmma)
  return out;
}

Rendering render(const KernelSpec& s) {
  Rendering r{{"exp_matmul/grad.cuh"}, "GradParams", {}};
  const std::string io = io_types(s), pass = ga(s) ? "true" : "false";
  const std::string form = std::to_string(em_form(s)); // how _stats and _h write H and V for the product
  const std::string in = dtype_info(s.dtype).device_type;
  if (uses_wgmma(s.math)) {
    r.headers.push_back("exp_matmul/grad_wgmma.cuh");
    r.entries.push_back(
        main_entry(s, "jb::eg_product_wgmma_kernel<" + io + ", " + wgmma_tile_args(s) + ", " + pass + ">"));
  } else {
    r.entries.push_back(main_entry(s, "jb::eg_product_kernel<" + io + ", " + tile_args(s) + ", " +
                                          (s.math == Math::tf32x3 ? "true" : "false") + ", " + pass + ">"));
  }
  // The launch waits on its loads: as many blocks an SM as its registers allow without spills keep the most in
  // flight (32 registers a thread do with 32-bit indices; 64-bit ones need 40).
  const int stats_blocks = s.index64 ? 6 : 8;
  for (const bool second : {false, true})
    r.entries.push_back({second ? "_stats_second" : "_stats", 256, stats_blocks,
                         "jb::eg_stats_kernel<" + io + ", " + pass + ", " + form + ", " + (second ? "true" : "false") +
                             ">"});
  r.entries.push_back({"_h", 256, 4, "jb::eg_h_kernel<" + io + ", " + pass + ", " + form + ">"});
  const int repair_threads = (kRepairM / kRepairTM) * (kRepairN / kRepairTN);
  // 3 blocks an SM where that fits without spills; bf16, and f16 with 64-bit indices, spill at 3 (4 bytes).
  const int repair_blocks = s.dtype == DType::bf16 || (s.dtype == DType::f16 && s.index64) ? 1 : 3;
  r.entries.push_back({"_repair", repair_threads, repair_blocks,
                       "jb::eg_repair_kernel<" + io + ", " + std::to_string(kRepairM) + ", " + std::to_string(kRepairN) +
                           ", " + std::to_string(kRepairK) + ", " + std::to_string(kRepairTM) + ", " +
                           std::to_string(kRepairTN) + ", " + pass + ">"});
  r.entries.push_back({"_store", 256, 1, "jb::eg_store_kernel<" + in + ", " + index_type(s) + ", " + pass + ">"});
  return r;
}

// second: the pass runs after the other pass of the same backward call in the same workspace, and takes its line
// maxima and G maximum (eg_stats_kernel's SECOND).
LaunchPlan plan_for(const KernelSpec& spec, const Problem& p, bool second) {
  const Shape& s = p.shape;
  const jb::EgDims d = dims(spec, p);
  if (s.B == 0 || d.Mx == 0 || d.Kx == 0) return {}; // an empty gradient
  const jb::EgWorkspace w = jb::eg_workspace(s.B, d, wide(p));
  LaunchPlan plan;
  plan.workspace_bytes = static_cast<std::size_t>(w.bytes);
  plan.zero_bytes = static_cast<std::size_t>(second ? w.pass_zeroed : w.zeroed);
  const jb::EgStatsGrid g = jb::eg_stats_grid(s.B, d, w);
  Launch stats, h, main, repair, store;
  stats.entry = second ? "_stats_second" : "_stats";
  stats.block[0] = 256;
  stats.grid[0] = static_cast<unsigned>(second ? g.col_blocks : g.row_blocks + g.col_blocks + g.g_blocks);
  h.entry = "_h";
  h.block[0] = 256;
  h.grid[0] = grid_stride_blocks(jb::eg_h_tiles(s.B, w), 1);
  tile_grid(main, spec, d.Mx, d.Kx, s.B);
  main.dynamic_shared = static_cast<unsigned>(wgmma_dynamic_shared_bytes(spec));
  repair.entry = "_repair";
  repair.block[0] = static_cast<unsigned>((kRepairM / kRepairTM) * (kRepairN / kRepairTN));
  repair.grid[0] = clamp_grid((d.Kx + kRepairN - 1) / kRepairN, kMaxGridX);
  repair.grid[1] = static_cast<unsigned>((d.Mx + kRepairM - 1) / kRepairM); // ≤ 65535: check
  // The batches beyond kRepairBlocks' worth loop in each block: most launches repair nothing, and then every block
  // only votes on its rows' flags, so a block a tile and batch would cost the launch more than it checks.
  const int64_t tiles = int64_t(repair.grid[0]) * repair.grid[1];
  repair.grid[2] = clamp_grid(std::clamp<int64_t>(kRepairBlocks / tiles, 1, s.B), kMaxGridYZ);
  plan.launches = {stats, h, main, repair};
  if (d.broadcast) {
    store.entry = "_store";
    store.block[0] = 256;
    store.grid[0] = grid_stride_blocks(d.Mx * d.Kx, 256);
    plan.launches.push_back(store);
  }
  return plan;
}
LaunchPlan launches(const KernelSpec& spec, const Problem& p) { return plan_for(spec, p, false); }
LaunchPlan second_pass_launches(const KernelSpec& spec, const Problem& p) { return plan_for(spec, p, true); }

const RegisterStrategy registered{{Strategy::exp_matmul, "exp_matmul", true, kTileFields | kMathField, rank, defaults,
                                   check, index64, candidates, render, launches, shared_bytes,
                                   wgmma_dynamic_shared_bytes, nullptr, second_pass_launches, true}};

} // namespace
} // namespace jitbmm::strategies
