// The pieces several strategies share (common.hpp).
#include "generator/strategies/common.hpp"

#include <algorithm>
#include <stdexcept>

#include "templates/exp_matmul/bounds.cuh"
#include "support/checked_size.hpp"
#include "templates/core/limits.cuh"
#include "support/layout.hpp"

namespace jitbmm::strategies {

void reject(const std::string& field, const std::string& why) {
  throw std::invalid_argument("spec." + field + ": " + why);
}

bool power_of_two(int v) { return v > 0 && (v & (v - 1)) == 0; }

std::string acc_type(const KernelSpec& s) { return dtype_info(s.dtype).acc_type; }
std::string semiring_type(const KernelSpec& s) {
  return std::string(semiring_info(s.semiring).device_type) + "<" + acc_type(s) + ">";
}
std::string index_type(const KernelSpec& s) { return s.index64 ? "long long" : "int"; }
std::string io_types(const KernelSpec& s) {
  return std::string(dtype_info(s.dtype).device_type) + ", " + dtype_info(s.out_dtype).device_type + ", " +
         index_type(s);
}
std::string tile_args(const KernelSpec& s) {
  return std::to_string(s.tile_m) + ", " + std::to_string(s.tile_n) + ", " + std::to_string(s.tile_k) + ", " +
         std::to_string(s.thread_m) + ", " + std::to_string(s.thread_n);
}

EntryPoint main_entry(const KernelSpec& s, std::string call) {
  // Min-blocks 1 for the others: with the bare bound ptxas aims at full occupancy and caps registers low enough to
  // spill.
  return {"", s.threads(), (strategy_def(s).fields & kTileFields) ? s.min_blocks : 1, std::move(call)};
}

bool fits_index32(const Problem& p, int64_t chunks, bool backward) {
  const Shape& s = p.shape;
  for (int64_t v : {s.B, s.M, s.N, s.K})
    if (v >= kIndex32Limit) return false;
  const auto outputs = try_product({s.B, s.M, s.N, chunks});
  if (!outputs) return false;
  // Backward workspaces are [B][M][K] and [B][K][N].
  if (backward) {
    const auto grads_a = try_product({s.B, s.M, s.K}), grads_b = try_product({s.B, s.K, s.N});
    if (!grads_a || !grads_b || *grads_a >= kIndex32Limit || *grads_b >= kIndex32Limit) return false;
  }
  return *outputs < kIndex32Limit && max_offset("a_strides", s.B, s.M, s.K, p.a()) < kIndex32Limit &&
         max_offset("b_strides", s.B, s.K, s.N, p.b()) < kIndex32Limit &&
         max_offset("out_strides", s.B, s.M, s.N, p.out()) < kIndex32Limit;
}

bool needs_index64(const KernelSpec& s, const Problem& p) { return !fits_index32(p, 1, s.pass != Pass::forward); }

int64_t outputs_of(const Problem& p) {
  return checked_product({p.shape.B, p.shape.M, p.shape.N}, "shape: B*M*N");
}

void default_tiles(KernelSpec& spec, const Problem& p) {
  const Shape& s = p.shape;
  const bool wide = dtype_info(p.dtype).wide_acc();
  if (s.M >= 128 && s.N >= 64 && !wide) { // the tuner's usual choice on the H100
    spec.tile_m = 128, spec.tile_n = 64, spec.thread_m = 8, spec.thread_n = 4, spec.min_blocks = 2;
  } else if (s.M >= 64 && s.N >= 64) {
    spec.tile_m = spec.tile_n = 64, spec.thread_m = spec.thread_n = 4;
  } else {
    spec.tile_m = spec.tile_n = 32, spec.thread_m = spec.thread_n = 2;
  }
  spec.tile_k = wide ? 8 : 16;
  fit_row_tiles(spec, s.M);
}

void fit_row_tiles(KernelSpec& s, int64_t rows) {
  // Each thread takes twice the rows, its block's threads as many; and no blocks-per-SM bound, whose register cap
  // would make a thread of more outputs spill (more threads a block cap them lower still).
  while ((rows + s.tile_m - 1) / s.tile_m > kMaxGridYZ && s.tile_m < 128)
    s.tile_m *= 2, s.thread_m *= 2, s.min_blocks = 1;
}

int tiled_shared_bytes(const KernelSpec& s) {
  const int acc = dtype_info(s.dtype).acc_bytes;
  // Forward: a and b slices. Backward: grad_out and out on the G side (rows for grad_a), the operand on the other.
  const int g_side = s.pass == Pass::grad_a ? s.tile_m : s.tile_n;
  // The log kernel (tiled_call's) keeps each row's and column's slice statistics too: 16 bytes a line
  // (templates/tiled/log.cuh, LogLineStats).
  const bool log_lines = s.pass == Pass::forward && (s.strategy == Strategy::tiled || s.strategy == Strategy::split_k) &&
                         s.semiring == Semiring::log && !dtype_info(s.dtype).wide_acc();
  // Backward, also each G line's scale (its exponent, an int, and its factor) and the block's flag (an int).
  return s.pass == Pass::forward ? 2 * s.tile_k * (s.tile_m + 4 + s.tile_n + 4) * acc +
                                       (log_lines ? 16 * (s.tile_m + s.tile_n) : 0)
                                 : 2 * s.tile_k * (2 * (g_side + 4) + (s.tile_m + s.tile_n - g_side + 4)) * acc +
                                       g_side * (4 + acc) + 4;
}

void check_tiles(const KernelSpec& spec, const Problem& p, int shared_bytes) {
  const Shape& s = p.shape;
  const bool ga = spec.pass == Pass::grad_a, gb = spec.pass == Pass::grad_b;
  check_tiles(spec, {gb ? s.K : s.M, gb ? "shape.K" : "shape.M", ga ? s.K : s.N, ga ? "shape.K" : "shape.N"},
              shared_bytes);
}

void check_tiles(const KernelSpec& spec, const TileGrid& grid, int shared_bytes) {
  if (spec.thread_m <= 0 || spec.thread_n <= 0 || spec.tile_m % spec.thread_m || spec.tile_n % spec.thread_n)
    reject("thread", "thread tile must divide the block tile");
  // (The wgmma forms hold up to 128 accumulators a thread: check_exp_matmul_tiles bounds them.)
  if (packed_tiles(spec) && spec.thread_n % 2)
    reject("thread", "thread_n must be even: the half kernel holds pairs of columns");
  if (spec.thread_m * spec.thread_n > 64 && !uses_wgmma(spec.math))
    reject("thread", "at most 64 outputs per thread (registers)");
  if (spec.tile_k < 1 || spec.tile_k > (arch_specific(spec) && bf16_factors(spec.math) ? 64 : 32))
    reject("tile", "tile_k must be in 1..32 (64 for the wgmma BF16 forms)");
  if (shared_bytes > jb::kMaxStaticSharedBytes)
    reject("tile", std::to_string(shared_bytes) + " bytes of shared memory; at most " +
                       std::to_string(jb::kMaxStaticSharedBytes / 1024) + " KiB");
  if ((grid.rows + spec.tile_m - 1) / spec.tile_m > kMaxGridYZ)
    throw std::invalid_argument(std::string(grid.rows_name) +
                                ": more than 65535 row tiles for the tiled strategy; use linear or warp");
  // The grid's x holds one block per tile_n columns, unlooped.
  if ((grid.cols + spec.tile_n - 1) / spec.tile_n > kMaxGridX)
    throw std::invalid_argument(std::string(grid.cols_name) +
                                ": more than 2^31 - 1 column tiles for the tiled kernels; choose a wider tile");
  if (spec.min_blocks < 1 || spec.min_blocks * spec.threads() > 2048)
    reject("min_blocks", "must be in 1..2048/threads");
}

bool fast_tiles(const KernelSpec& s) { // packed_tiles implies it: half inputs accumulate in f32
  return !dtype_info(s.dtype).wide_acc() && semiring_info(s.semiring).fast_term && !s.with_argmax;
}

namespace {
// The per-term policy of the generic tiled kernel, for f32 accumulators: the fast NaN-propagating max/min without
// argmax, the (value, k) pair with it. The semiring's own online state otherwise.
std::string tiled_policy(const KernelSpec& s) {
  const SemiringInfo& info = semiring_info(s.semiring);
  if (fast_tiles(s)) return info.fast_term;
  if (!dtype_info(s.dtype).wide_acc() && info.select_op && s.with_argmax)
    return std::string("jb::SelectTerm<") + info.select_op + "<float>>";
  return "jb::GenericTerm<" + semiring_type(s) + ", " + acc_type(s) + ">";
}
} // namespace

bool packed_tiles(const KernelSpec& s) {
  return dtype_info(s.dtype).half && s.out_dtype == s.dtype && !s.with_argmax &&
         semiring_info(s.semiring).packed_term;
}

namespace {
// Whether the generic tiled kernel stores a thread's rows of f32 outputs whole (16-byte pieces) rather than value by
// value: for strategy tiled without argmax (split-K writes its workspace; the argmax kernels spill with the path
// compiled in). Whole stores are faster for every tile (fewer store instructions, whole sectors) but t8×4 at 3 blocks
// an SM, whose k loop then spills and runs slower, so that one keeps the element stores.
bool whole_row_stores(const KernelSpec& s) {
  return s.strategy == Strategy::tiled && !s.with_argmax && !dtype_info(s.dtype).wide_acc() &&
         s.out_dtype == DType::f32 && !(s.thread_m == 8 && s.thread_n == 4 && s.min_blocks >= 3);
}
} // namespace

const char* tiled_header(const KernelSpec& s) {
  if (s.semiring == Semiring::log && !dtype_info(s.dtype).wide_acc()) return "tiled/log.cuh";
  return packed_tiles(s) ? "tiled/packed.cuh" : "tiled/tiled.cuh";
}

std::string tiled_call(const KernelSpec& s) {
  if (s.semiring == Semiring::log && !dtype_info(s.dtype).wide_acc())
    return "jb::tiled_log_kernel<" + io_types(s) + ", " + tile_args(s) + ">";
  if (packed_tiles(s))
    return std::string("jb::packed_tiled_kernel<") + semiring_info(s.semiring).packed_term + "<" +
           dtype_info(s.dtype).device_type + ">, " + semiring_type(s) + ", " + io_types(s) + ", " + tile_args(s) + ">";
  return "jb::tiled_kernel<" + tiled_policy(s) + ", " + semiring_type(s) + ", " + io_types(s) + ", " + tile_args(s) +
         (whole_row_stores(s) ? ", true>" : ", false>");
}

void tile_grid(Launch& l, const KernelSpec& s, int64_t rows, int64_t cols, int64_t z) {
  l.block[0] = static_cast<unsigned>(s.threads());
  l.grid[0] = clamp_grid((cols + s.tile_n - 1) / s.tile_n, kMaxGridX);
  l.grid[1] = static_cast<unsigned>((rows + s.tile_m - 1) / s.tile_m); // ≤ 65535: check_tiles
  l.grid[2] = clamp_grid(z, kMaxGridYZ);
}

LaunchPlan forward_tile_launches(const KernelSpec& s, const Problem& p) {
  Launch l;
  tile_grid(l, s, p.shape.M, p.shape.N, p.shape.B);
  return {{l}};
}

void add_tiles(std::vector<KernelSpec>& out, const KernelSpec& base, const std::vector<TileChoice>& tiles) {
  for (const TileChoice& t : tiles) {
    KernelSpec s = base;
    s.tile_m = t.m, s.tile_n = t.n, s.tile_k = t.k, s.thread_m = t.tm, s.thread_n = t.tn, s.min_blocks = t.mb;
    out.push_back(s);
  }
}

const std::vector<TileChoice>& forward_tiles(bool wide) {
  // never destroyed: a background build may still use it as the process exits
  static const std::vector<TileChoice>& narrow = *new std::vector<TileChoice>{
      {128, 64, 16, 8, 4, 2}, {128, 128, 16, 8, 8, 1}, {128, 128, 16, 8, 8, 2}, {64, 128, 16, 4, 8, 2},
      {64, 64, 16, 4, 4, 1}, {64, 64, 16, 4, 4, 2}, {32, 32, 16, 2, 2, 1}, {128, 64, 24, 8, 4, 2}};
  static const std::vector<TileChoice>& wide_tiles =
      *new std::vector<TileChoice>{{64, 64, 8, 4, 4, 1}, {64, 32, 8, 4, 2, 1}, {32, 32, 8, 2, 2, 1}};
  return wide ? wide_tiles : narrow;
}

GradAccumulator grad_accumulator(const Problem& p, const KernelSpec& spec) {
  const Shape& s = p.shape;
  const bool ga = spec.pass == Pass::grad_a;
  const int64_t rows = ga ? s.M : s.K, cols = ga ? s.K : s.N;
  const bool broadcast = (ga ? p.a().batch : p.b().batch) == 0 && s.B > 1;
  GradAccumulator acc;
  acc.slices = broadcast ? 1 : s.B;
  acc.items = checked_product({acc.slices, rows, cols}, "backward workspace");
  // scatter sends every term atomically; histogram sums even a broadcast gradient in its bins.
  acc.needed =
      acc.items > 0 && (spec.strategy == Strategy::scatter || (broadcast && spec.strategy != Strategy::histogram));
  return acc;
}

LaunchPlan grad_plan(const KernelSpec& spec, const Problem& p, const Launch& main) {
  LaunchPlan plan;
  const GradAccumulator acc = grad_accumulator(p, spec);
  plan.launches.push_back(main);
  if (!acc.needed) return plan;
  plan.workspace_bytes = static_cast<std::size_t>(
      checked_mul(acc.items, dtype_info(p.dtype).acc_bytes, "backward workspace"));
  plan.zero_bytes = plan.workspace_bytes;
  Launch store;
  store.entry = "_store";
  store.block[0] = 256;
  store.grid[0] = grid_stride_blocks(acc.items, 256);
  plan.launches.push_back(store);
  return plan;
}

bool split_wgmma(const KernelSpec& s) { return s.math == Math::wgmma_tf32x3; }
int wgmma_stages(const KernelSpec& s) {
  return jb::em_wg_stages(jb::em_wg_stage_bytes(s.tile_m, s.tile_n, split_wgmma(s)));
}
// From the first 1024-byte boundary (the swizzle's period): the extra KiB.
int wgmma_dynamic_shared_bytes(const KernelSpec& s) {
  return uses_wgmma(s.math) ? wgmma_stages(s) * jb::em_wg_stage_bytes(s.tile_m, s.tile_n, split_wgmma(s)) + 1024 : 0;
}
int wgmma_static_shared_bytes(const KernelSpec& s) { return 3 * 8 * wgmma_stages(s); }
void add_wgmma_tiles(std::vector<KernelSpec>& out, KernelSpec base, bool single) {
  base.math = Math::wgmma_tf32x3;
  add_tiles(out, base, {{128, 128, 32, 2, 32, 1}, {128, 64, 32, 2, 16, 1}});
  if (!single) return;
  base.math = Math::wgmma_tf32;
  add_tiles(out, base, {{128, 256, 32, 2, 64, 1}, {128, 128, 32, 2, 32, 1}});
}
std::string wgmma_tile_args(const KernelSpec& s) {
  return std::to_string(s.tile_m) + ", " + std::to_string(s.tile_n) + ", " + std::to_string(wgmma_stages(s)) + ", " +
         (split_wgmma(s) ? "true" : "false") +
         (s.math == Math::wgmma_bf16         ? ", jb::WgBf16"
          : s.math == Math::wgmma_bf16_fused ? ", jb::WgBf16, true"
                                             : "");
}
int em_form(const KernelSpec& s) {
  switch (s.math) {
  case Math::fma: return 0;
  case Math::tf32: return 1;
  case Math::tf32x3: return 2;
  case Math::wgmma_tf32x3: return 3;
  case Math::wgmma_tf32: return 4;
  case Math::bf16: return 5;
  case Math::wgmma_bf16: return 6;
  case Math::wgmma_bf16_fused: return 7;
  }
  return 0;
}

bool single_tf32_allowed(const KernelSpec& spec, const Problem& p) {
  const DType result = spec.pass == Pass::forward ? p.output_dtype() : p.dtype;
  return p.precision == Precision::fast || dtype_info(result).half;
}

void check_exp_matmul_tiles(const KernelSpec& spec, const Problem& p) {
  const int tm = spec.thread_m, tn = spec.thread_n, vec = 16 / dtype_info(spec.dtype).acc_bytes;
  if (spec.math != Math::fma && dtype_info(p.dtype).wide_acc())
    reject("math", std::string(math_name(spec.math)) + " has f32 accumulators; f64 uses fma");
  if (bf16_factors(spec.math) && !dtype_info(p.output_dtype()).half)
    reject("math", std::string(math_name(spec.math)) +
                       " rounds the factors to 8 bits: only for f16 and bf16 outputs (their 1e-2 contract)");
  // Their f32 sums chain over K in the tensor cores, which truncate each add (about 2^-22 relative, all one way):
  // K/16 adds stay inside the bound's slack (templates/exp_matmul/bf16.cuh) up to K = 65536.
  if (bf16_factors(spec.math) && p.shape.K > 65536)
    reject("math",
           std::string(math_name(spec.math)) + " sums K in chained f32 accumulators: K up to 65536; use tf32x3");
  if (single_tf32(spec.math) && !single_tf32_allowed(spec, p))
    reject("math", std::string(math_name(spec.math)) +
                       " (one TF32 product per term, about 1e-4 relative error) needs precision = fast, or an f16 or "
                       "bf16 result");
  if (uses_wgmma(spec.math)) { // templates/exp_matmul/wgmma.cuh: a warpgroup per 64 rows, wgmma's N up to 256
    if (spec.tile_m != 64 && spec.tile_m != 128) reject("tile", "wgmma exp_matmul needs tile_m 64 or 128");
    if (spec.tile_n != 64 && spec.tile_n != 128 && spec.tile_n != 256)
      reject("tile", "wgmma exp_matmul needs tile_n 64, 128 or 256");
    const int line = jb::em_k_align(jb::em_factor_bytes(em_form(spec), false)); // k a 128-byte line of a panel
    if (spec.tile_k != line)
      reject("tile", std::string(math_name(spec.math)) + " needs tile_k " + std::to_string(line) +
                         " (the workspace's panels: a 128-byte line of factors)");
    if (tm != 2 || tn != spec.tile_n / 4)
      reject("thread", "wgmma exp_matmul: a thread holds 2 × tile_n/4 outputs, so thread must be 2x" +
                           std::to_string(spec.tile_n / 4));
    // Registers: the accumulators (tile_n / 2 a thread), and for wgmma_tf32x3 a partial set as large.
    if (spec.math == Math::wgmma_tf32x3 && spec.tile_n > 128)
      reject("tile", "wgmma_tf32x3 needs tile_n ≤ 128 (two accumulator sets of tile_n/2 registers)");
    if (wgmma_stages(spec) < 3)
      reject("tile", "wgmma exp_matmul needs three K-slice stages in 200 KiB of shared memory; use a smaller tile");
    // The consumers raise their registers from what the producer gives up (templates/exp_matmul/pipeline.cuh), a
    // budget that assumes the block's full share of the SM at entry: capped for two blocks an SM, the raise would
    // wait for registers that never come and the kernel would hang.
    if (spec.min_blocks != 1)
      reject("min_blocks", "wgmma exp_matmul runs one block an SM (its warpgroups trade registers within the "
                           "block's share): min_blocks must be 1");
    return;
  }
  // The exponentiated operands are padded to multiples of 128 (rows, columns) and 32 (K) and read 16 bytes at a time.
  if (spec.tile_m <= 0 || spec.tile_n <= 0 || 128 % spec.tile_m || 128 % spec.tile_n || spec.tile_n % vec)
    reject("tile",
           "exp_matmul needs tile_m and tile_n dividing 128 (and tile_n a multiple of " + std::to_string(vec) + ")");
  if (spec.tile_k <= 0 || 32 % spec.tile_k || spec.tile_k % vec)
    reject("tile", "exp_matmul needs tile_k dividing 32, a multiple of " + std::to_string(vec));
  if (spec.math == Math::fma) {
    // A thread's outputs start 32-aligned or lie in one 32×32 block of the repair flags (EmFlagged): powers of two.
    if (!power_of_two(tm) || !power_of_two(tn)) reject("thread", "exp_matmul needs powers of two");
  } else {
    // mma m16n8k8: a warp's (8·thread_m) × (4·thread_n) outputs, 32-aligned or in one 32×32 block (EmFlagged).
    const int wm = 8 * tm, wn = 4 * tn;
    if (tm < 2 || tn < 4 || tm % 2 || tn % 4 || 128 % wm || 128 % wn || spec.tile_m % wm || spec.tile_n % wn)
      reject("thread", "tensor-core exp_matmul needs thread_m even and thread_n a multiple of 4, with 8·thread_m and "
                       "4·thread_n dividing the block tile and 128");
    if (spec.tile_k % (spec.math == Math::bf16 ? 16 : 8))
      reject("tile", std::string("tensor-core exp_matmul needs tile_k a multiple of ") +
                         (spec.math == Math::bf16 ? "16 (bf16)" : "8"));
  }
}

EntryPoint grad_store_entry(const KernelSpec& s) {
  return {"_store", 256, 1,
          "jb::grad_store_kernel<" + std::string(dtype_info(s.dtype).device_type) + ", " + index_type(s) + ", " +
              (s.pass == Pass::grad_a ? "true" : "false") + ">"};
}

} // namespace jitbmm::strategies
