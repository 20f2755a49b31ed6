#include "runtime/chain_step_products.hpp"

#include <algorithm>
#include <optional>
#include <stdexcept>

#include "generator/arch_features.hpp"
#include "runtime/jit.hpp"
#include "runtime/product_stand_in.hpp"
#include "runtime/tuner/choose.hpp"
#include "templates/chain/params.cuh"

namespace jitbmm {

namespace {

KernelSpec tiles(KernelSpec s, int m, int n, int k, int tm, int tn, int min_blocks) {
  s.tile_m = m, s.tile_n = n, s.tile_k = k, s.thread_m = tm, s.thread_n = tn, s.min_blocks = min_blocks;
  return s;
}

KernelSpec split(const Problem& q, int m, int k_chunk, int min_blocks) {
  KernelSpec s = tiles(default_spec(q, Strategy::split_k), m, m, 16, m / 16, m / 16, min_blocks);
  s.k_chunk = k_chunk;
  return s;
}

// Measured on an H200 (jitbmm tune of each shape [1 × B × C × C], f32): log at [512 × 512] · [512 × 512] ran 0.042 ms
// in exp_matmul's 64 × 64 tiles or the warpgroup form's 128 × 64 (128 × 128 left 116 of 132 SMs idle: 0.082 ms; the
// direct kernels 0.08–0.3 ms), and from there on the warpgroup form's 128 × 64 tiles led (0.069 ms at C = 1024, 0.135
// at 2048, 0.29 at B = 64, C = 4096, where 64 × 64 took 0.38); the transitions' gradient's product, 512² outputs of
// a sum over 1024 positions in 16 batches, took 0.20 ms in 128 × 128, 0.25 in 128 × 64 and 0.40 in 64 × 64, and
// 1024² outputs over 4096 positions in 4 batches 0.56 in 128 × 128 against 0.74 in 128 × 64 (more batches of
// shorter sums, 2 to 64, changed either by less than a tenth).
// max_plus with its argmax took the direct tiled kernel's 32 × 32 tiles at C = 512 (0.054 ms against 0.108 in 64 ×
// 64) and tiled_refine's 64 × 64 at 1024.
// Few sequences of many states give fewer output tiles than the GPU has SMs, each with a long sum: the sum split in
// chunks (split_k) filled them. At C = 1024 max_plus took 0.022–0.038 ms split in chunks of 256 from B = 16 to 128
// against 0.051–0.054 in whole tiles (with its argmax 0.034–0.055 against 0.093), at C = 4096 0.13–0.14 in chunks of
// 512 against 0.21–0.22 (64 × 64 tiles from B = 64); log took 0.043–0.048 ms at C = 1024, B = 16 and 64 against
// 0.068 for exp_matmul, which led again from B = 128 (128 output tiles). At B = 16 the warp kernel's argmax led
// (0.030 against 0.033 split). With C = 512 the sum is short: 32 × 32 tiles stayed fastest from B = 128 on.
// A log step of few output tiles (B = 512 at 1024 and 2048 states, B = 64 at 4096) filled the GPU with its sum over
// the sources split in parts, a batch each: [512 × 1024] · [1024 × 1024] took 0.040 ms in 4 parts of 128 × 128 tiles
// against 0.065 whole (128 × 64), [512 × 2048] · [2048 × 2048] 0.100 in 2 parts against 0.134, and [64 × 4096] ·
// [4096 × 4096] 0.118 in 8 parts of 64 × 128 (0.132 in 4) against 0.245 whole (64 × 64); so the parts give up to a
// tile a SM, two for the one-warpgroup tiles of 64 rows (prepare, product and repair, jitbmm bench, wgmma_tf32x3).
// One product per sequence (M = 1) reads its table once: the warp kernel (0.29 ms at B = 512, C = 512, against 0.66
// for linear). The transitions' gradient's product over every (b, t) is wide: the warpgroup form's 128 × 128 tiles.
bool wgmma_step(DType dtype, const DeviceInfo& device) {
  return device.features.has(kWgmma) && !dtype_info(dtype).wide_acc();
}

// Whether a step's product [rows × states] · [states × states] has few output tiles of 32 × 32 for a long sum, which
// split_k's chunks fill (for log a whole step, not one of its parts).
bool chunked_step(int64_t rows, int64_t states) {
  return states >= 1024 && ((rows + 31) / 32) * ((states + 31) / 32) <= 64;
}

// A part's tile: 64 rows (a warpgroup's) where the step has no more, else 128; 128 columns.
int part_tile_rows(int64_t rows) { return rows <= 64 ? 64 : 128; }

// A step's product split in parts (step_parts): batches of the same rows and of consecutive ranges of the sources,
// of one pass's messages, or of the forward's then the backward's where both passes' steps are one product (each
// row the two passes' messages side by side).
bool parted(const Problem& q) {
  const Shape& s = q.shape;
  if (q.semiring != Semiring::log || s.B < 2 || !q.a_strides || q.a_strides->batch != s.K) return false;
  for (int64_t passes : {1, 2})
    if (s.K * s.B == passes * s.N && q.a_strides->row == passes * s.N) return true;
  return false;
}

std::optional<KernelSpec> rule(const Problem& q, const DeviceInfo& device) {
  const Shape& s = q.shape;
  if (parted(q) && wgmma_step(q.dtype, device)) {
    const int m = part_tile_rows(s.M);
    KernelSpec e = tiles(default_spec(q, Strategy::exp_matmul), m, 128, 32, 2, 32, 1);
    e.math = Math::wgmma_tf32x3;
    return e;
  }
  const bool wide_acc = dtype_info(q.dtype).wide_acc();
  auto warp = [&](int x, int y) {
    KernelSpec w = default_spec(q, Strategy::warp);
    w.block_x = x, w.block_y = y;
    return w;
  };
  if (s.M == 1) return warp(4, 64);
  const int64_t tiles32 = ((s.M + 31) / 32) * ((s.N + 31) / 32);
  const bool long_sum = s.K == s.N && s.K >= 1024; // a step's product [B × C] · [C × C] of many states
  const bool chunked = s.K == s.N && chunked_step(s.M, s.N);
  if (q.semiring == Semiring::max_plus) {
    if (long_sum && q.with_argmax && s.M <= 16) return warp(8, 32);
    if (long_sum && tiles32 <= 128)
      return split(q, s.K >= 4096 && s.M >= 64 ? 64 : 32, s.K >= 4096 ? 512 : 256, s.M >= 128 ? 2 : 1);
    if (s.M * s.N <= 512 * 512) return tiles(default_spec(q, Strategy::tiled), 32, 32, 16, 2, 2, 1);
    return tiles(default_spec(q, Strategy::tiled_refine), 64, 64, 16, 4, 4, 1);
  }
  if (q.semiring != Semiring::log || wide_acc) return std::nullopt;
  if (chunked) return split(q, 32, 256, 1);
  KernelSpec e = default_spec(q, Strategy::exp_matmul);
  const bool large = s.M * s.N >= 512 * 512;
  if (device.features.has(kWgmma) && large) {
    // The transitions' gradient's product (the only one that reads its left operand transposed): few outputs of a
    // long sum.
    const bool edges = q.a_strides && q.a_strides->row == 1 && s.M > 1;
    e = edges ? tiles(e, 128, 128, 32, 2, 32, 1) : tiles(e, 128, 64, 32, 2, 16, 1);
    e.math = Math::wgmma_tf32x3;
    return e;
  }
  e = tiles(e, 64, 64, 16, 4, 4, 2);
  e.math = device.features.has(kMmaTf32Bf16) ? Math::tf32x3 : Math::fma;
  return e;
}

} // namespace

int64_t step_parts(int64_t rows, int64_t states, DType dtype, const DeviceInfo& device, int passes) {
  // Fewer sequences than a warpgroup's rows were not measured: they keep whole sums (one sequence the warp kernel,
  // which reads the table once where the parts' factors would be written and read again).
  if (!wgmma_step(dtype, device) || rows < 64 || chunked_step(rows, states)) return 1;
  const int m = part_tile_rows(rows);
  const int64_t tiles = passes * ((rows + m - 1) / m) * ((states + 127) / 128);
  const int64_t wanted = int64_t(std::max(1, device.sm_count)) * (m == 64 ? 2 : 1);
  int64_t parts = 1;
  // As many parts as keep the tiles of all within one wave, each of at least 128 sources on 32-source boundaries
  // (whole slices of the factors' panels), up to the most the position's kernel adds.
  while (parts < jb::kMaxStepParts && 2 * tiles * parts <= wanted && states % (2 * parts * 32) == 0 &&
         states / (2 * parts) >= 128)
    parts *= 2;
  return parts;
}

namespace {

// The rule's variant where it takes the problem as it is; none where it gives none, or cannot take the problem (a
// size beyond its index math): the default then.
std::optional<KernelSpec> fitting_rule(const Problem& problem, const DeviceInfo& device) {
  try {
    std::optional<KernelSpec> spec = rule(problem, device);
    if (spec) check_spec_fits(*spec, problem);
    return spec;
  } catch (const std::invalid_argument&) {
    return std::nullopt;
  }
}

} // namespace

SemiringBMM step_product_plan(const Problem& problem, const DeviceInfo& device, bool tune, Stream stream,
                              bool quick) {
  if (quick) {
    const QuickBuild scope;
    return SemiringBMM::get(problem, quick_product_spec(problem));
  }
  if (tune) return SemiringBMM::get(problem, stream);
  const Choice stored = choose(problem, device, TunePolicy::never);
  if (stored.source.rfind("default", 0) != 0) return SemiringBMM::get(problem, stored.spec);
  const std::optional<KernelSpec> spec = fitting_rule(problem, device);
  return spec ? SemiringBMM::get(problem, *spec) : SemiringBMM::get(problem, stream);
}

std::vector<KernelSpec> step_product_kernels(const Problem& problem, const DeviceInfo& device, bool tune,
                                             bool quick) {
  if (quick) return {quick_product_spec(problem)};
  if (tune) return kernels_ahead(problem, device, tune_policy_from_env());
  const std::vector<KernelSpec> stored = kernels_ahead(problem, device, TunePolicy::never);
  if (!stored.empty() && !(stored.front() == default_spec(problem))) return stored;
  if (const std::optional<KernelSpec> spec = fitting_rule(problem, device)) return {*spec};
  return stored;
}

} // namespace jitbmm
