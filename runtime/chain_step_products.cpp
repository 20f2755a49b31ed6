#include "runtime/chain_step_products.hpp"

#include <optional>
#include <stdexcept>

#include "generator/arch_features.hpp"
#include "runtime/tuner/choose.hpp"

namespace jitbmm {

namespace {

KernelSpec tiles(KernelSpec s, int m, int n, int k, int tm, int tn, int min_blocks) {
  s.tile_m = m, s.tile_n = n, s.tile_k = k, s.thread_m = tm, s.thread_n = tn, s.min_blocks = min_blocks;
  return s;
}

// Measured on an H200 (jitbmm tune of each shape): log at [512 × 512] · [512 × 512] ran 0.042 ms in exp_matmul's
// 64 × 64 tiles or the warpgroup form's 128 × 64 (128 × 128 left 116 of 132 SMs idle: 0.082 ms; the direct kernels
// 0.08–0.3 ms), and from there on the warpgroup form's 128 × 64 tiles led (0.069 ms at C = 1024, 0.135 at 2048,
// 0.29 at B = 64, C = 4096, where 64 × 64 took 0.38); the transitions' gradient's product, 512² outputs of a sum
// over 1024 positions in 16 batches, took 0.20 ms in 128 × 128 and 0.40 in 64 × 64;
// max_plus with its argmax took the direct tiled kernel's 32 × 32 tiles at C = 512 (0.054 ms against 0.108 in 64 ×
// 64) and tiled_refine's 64 × 64 at 1024. One product per sequence (M = 1) reads its table once: the warp kernel
// (0.29 ms at B = 512, C = 512, against 0.66 for linear). The transitions' gradient's product over every (b, t)
// is wide: the warpgroup form's 128 × 128 tiles.
std::optional<KernelSpec> rule(const Problem& q, const DeviceInfo& device) {
  const Shape& s = q.shape;
  const bool wide_acc = dtype_info(q.dtype).wide_acc();
  if (s.M == 1) {
    KernelSpec w = default_spec(q, Strategy::warp);
    w.block_x = 4, w.block_y = 64;
    return w;
  }
  if (q.semiring == Semiring::max_plus) {
    if (s.M * s.N <= 512 * 512) return tiles(default_spec(q, Strategy::tiled), 32, 32, 16, 2, 2, 1);
    return tiles(default_spec(q, Strategy::tiled_refine), 64, 64, 16, 4, 4, 1);
  }
  if (q.semiring != Semiring::log || wide_acc) return std::nullopt;
  KernelSpec e = default_spec(q, Strategy::exp_matmul);
  const bool large = s.M * s.N >= 512 * 512;
  if (device.features.has(kWgmma) && large) {
    const bool edges = s.K > 4 * s.N; // the gradient's product: few outputs, a long sum
    e = edges ? tiles(e, 128, 128, 32, 2, 32, 1) : tiles(e, 128, 64, 32, 2, 16, 1);
    e.math = Math::wgmma_tf32x3;
    return e;
  }
  e = tiles(e, 64, 64, 16, 4, 4, 2);
  e.math = device.features.has(kMmaTf32Bf16) ? Math::tf32x3 : Math::fma;
  return e;
}

} // namespace

SemiringBMM step_product_plan(const Problem& problem, const DeviceInfo& device, bool tune, Stream stream) {
  if (tune) return SemiringBMM::get(problem, stream);
  const Choice stored = choose(problem, device, TunePolicy::never);
  if (stored.source.rfind("default", 0) != 0) return SemiringBMM::get(problem, stored.spec);
  std::optional<KernelSpec> spec;
  try {
    spec = rule(problem, device);
    if (spec) check_spec_fits(*spec, problem);
  } catch (const std::invalid_argument&) {
    spec.reset(); // a problem the rule's variant cannot take (a size beyond its index math): the default
  }
  return spec ? SemiringBMM::get(problem, *spec) : SemiringBMM::get(problem, stream);
}

} // namespace jitbmm
