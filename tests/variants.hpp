// The kernel variants every suite covers: each semiring × dtype (with the argmax and f32-output options where they
// apply) × each strategy, with small tiles and chunks so odd test shapes cross every boundary.
#pragma once

#include <algorithm>
#include <vector>

#include "generator/strategy.hpp"

#include "jitbmm/kernel_spec.hpp"

namespace jitbmm::test {

// Semiring × dtype × options, as linear specs.
inline std::vector<KernelSpec> problem_kinds() {
  std::vector<KernelSpec> out;
  for (Semiring s : {Semiring::log, Semiring::max_plus, Semiring::min_plus, Semiring::max_times, Semiring::plus_times})
    for (DType d : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
      KernelSpec spec;
      spec.semiring = s;
      spec.dtype = spec.out_dtype = d;
      out.push_back(spec);
      if (semiring_info(s).has_argmax) {
        spec.with_argmax = true;
        out.push_back(spec);
        spec.with_argmax = false;
      }
      if (dtype_info(d).half) {
        spec.out_dtype = DType::f32;
        out.push_back(spec);
      }
    }
  return out;
}

// Hopper's wgmma forms of an exp_matmul spec (sm_90 only): one consumer warpgroup; two (not for a forward of half
// outputs, which the tuner does not offer: generator/strategies/exp_matmul.cpp); TF32 at 128×256 (two bulk copies
// of b a slice).
inline void add_wgmma_variants(std::vector<KernelSpec>& out, KernelSpec s) {
  s.math = Math::wgmma_tf32x3;
  s.tile_m = s.tile_n = 64, s.tile_k = 32, s.thread_m = 2, s.thread_n = 16, s.min_blocks = 1;
  out.push_back(s);
  s.tile_m = s.tile_n = 128, s.thread_n = 32;
  if (s.pass != Pass::forward || !dtype_info(s.out_dtype).half) out.push_back(s);
  s.math = Math::wgmma_tf32;
  s.tile_n = 256, s.thread_n = 64;
  out.push_back(s);
}

// exp_matmul (log only): FMA tiles small and large, and the tensor-core kernels (f32-accumulating dtypes).
inline std::vector<KernelSpec> exp_matmul_variants(KernelSpec kind) {
  std::vector<KernelSpec> out;
  KernelSpec s = kind;
  s.strategy = Strategy::exp_matmul;
  s.math = Math::fma;
  s.tile_m = s.tile_n = 32, s.tile_k = 8, s.thread_m = 2, s.thread_n = 4;
  out.push_back(s);
  if (kind.dtype == DType::f64) return out;
  s.tile_m = 128, s.tile_n = 64, s.tile_k = 16, s.thread_m = 8, s.thread_n = 4;
  out.push_back(s);
  s.tile_m = s.tile_n = 64, s.tile_k = 16, s.thread_m = s.thread_n = 4;
  for (Math m : {Math::tf32x3, Math::tf32}) {
    s.math = m;
    out.push_back(s);
  }
  s.math = Math::tf32x3;
  s.tile_m = s.tile_n = 128, s.thread_m = s.thread_n = 8;
  out.push_back(s);
  add_wgmma_variants(out, s);
  if (dtype_info(kind.out_dtype).half) { // BF16 factors: half outputs only
    s.math = Math::bf16;
    s.tile_m = s.tile_n = 64, s.tile_k = 16, s.thread_m = s.thread_n = 4, s.min_blocks = 2;
    out.push_back(s);
    s.tile_m = s.tile_n = 128, s.tile_k = 32, s.thread_m = s.thread_n = 8, s.min_blocks = 1;
    out.push_back(s);
    s.math = Math::wgmma_bf16; // Hopper: one consumer warpgroup; two, with two bulk copies of b a slice
    s.tile_m = s.tile_n = 64, s.tile_k = 64, s.thread_m = 2, s.thread_n = 16;
    out.push_back(s);
    s.tile_m = 128, s.tile_n = 256, s.thread_n = 64;
    out.push_back(s);
    s.math = Math::wgmma_bf16_fused; // the factors made in the product: one consumer warpgroup; two
    s.tile_m = s.tile_n = 64, s.thread_n = 16;
    out.push_back(s);
    s.tile_m = 128, s.tile_n = 256, s.thread_n = 64;
    out.push_back(s);
  }
  return out;
}

// The online tiled log kernel of a log kind with f32 accumulators (not f64): a small and a large thread tile, a
// 32-k slice, and 64-bit indices.
inline std::vector<KernelSpec> tiled_online_variants(KernelSpec kind) {
  std::vector<KernelSpec> out;
  if (kind.semiring != Semiring::log || kind.dtype == DType::f64) return out;
  KernelSpec s = kind;
  s.strategy = Strategy::tiled_online;
  for (bool index64 : {false, true}) {
    s.index64 = index64;
    s.tile_m = s.tile_n = 32, s.tile_k = 16, s.thread_m = s.thread_n = 2, s.min_blocks = 2;
    out.push_back(s);
    if (index64) continue;
    s.tile_m = s.tile_n = 64, s.tile_k = 32, s.thread_m = s.thread_n = 4, s.min_blocks = 1;
    out.push_back(s);
    s.tile_m = 128, s.tile_n = 64, s.tile_k = 16, s.thread_m = 8, s.thread_n = 4, s.min_blocks = 1;
    out.push_back(s);
  }
  return out;
}

// The two-pass argmax of a selecting kind with argmax and f32 accumulators (groups of 16 k): two slices a group at
// small tiles (both index widths), one at the default tiles of half inputs and of 64-bit indices.
inline std::vector<KernelSpec> tiled_refine_variants(KernelSpec kind) {
  std::vector<KernelSpec> out;
  if (!kind.with_argmax || !semiring_info(kind.semiring).fast_term || kind.dtype == DType::f64) return out;
  KernelSpec s = kind;
  s.strategy = Strategy::tiled_refine;
  for (bool index64 : {false, true}) {
    s.index64 = index64;
    s.tile_m = s.tile_n = 32, s.tile_k = 8, s.thread_m = s.thread_n = 2, s.min_blocks = 1;
    out.push_back(s);
  }
  s.tile_m = s.tile_n = 64, s.tile_k = 16, s.thread_m = s.thread_n = 4, s.min_blocks = 2;
  out.push_back(s);
  s.index64 = false;
  s.tile_m = 128, s.tile_n = 64, s.tile_k = 16, s.thread_m = 8, s.thread_n = 4, s.min_blocks = 2;
  out.push_back(s);
  return out;
}

// Every strategy (and both index widths) for one problem kind.
inline std::vector<KernelSpec> strategies_for(KernelSpec kind) {
  std::vector<KernelSpec> out;
  for (bool index64 : {false, true}) {
    KernelSpec s = kind;
    s.index64 = index64;
    s.strategy = Strategy::linear;
    out.push_back(s);
    s.strategy = Strategy::tiled;
    s.tile_m = s.tile_n = 32, s.tile_k = 8, s.thread_m = s.thread_n = 2;
    out.push_back(s);
    if (index64) continue;
    if (dtype_info(kind.dtype).half) { // slices of 12 halves: fetched a value a load
      s.tile_k = 12;
      out.push_back(s);
    }
    if (kind.dtype == DType::f32 || kind.dtype == DType::f16) {
      // Two blocks an SM cap registers at 128: the f16 argmax kernel (value and k per output, and the conversions)
      // spills there, so it is compiled for one. The fast kernels (an add and a max a term) run at 3, as tuned.
      const bool fast = semiring_info(kind.semiring).fast_term && !kind.with_argmax;
      s.tile_m = 128, s.tile_n = 64, s.tile_k = 16, s.thread_m = 8, s.thread_n = 4;
      s.min_blocks = kind.with_argmax && kind.dtype == DType::f16 ? 1 : fast ? 3 : 2;
      out.push_back(s);
    }
    s.strategy = Strategy::split_k;
    s.tile_m = s.tile_n = 32, s.tile_k = 8, s.thread_m = 2, s.thread_n = 4, s.k_chunk = 24;
    out.push_back(s);
    s = kind;
    s.strategy = Strategy::warp;
    s.block_x = 8, s.block_y = 32;
    out.push_back(s);
    s.block_x = 32, s.block_y = 4;
    out.push_back(s);
    s.strategy = Strategy::block_tree;
    s.block_x = 64, s.block_y = 1;
    out.push_back(s);
    if (kind.semiring == Semiring::log) {
      s.strategy = Strategy::linear_two_pass;
      s.block_x = 128, s.block_y = 1;
      out.push_back(s);
      for (KernelSpec e : exp_matmul_variants(kind)) out.push_back(e);
    }
  }
  for (const KernelSpec& o : tiled_online_variants(kind)) out.push_back(o);
  for (const KernelSpec& r : tiled_refine_variants(kind)) out.push_back(r);
  // A strategy of the table not listed above (a new one) is covered by its default for a small odd problem.
  for (const StrategyDef* def : strategy_defs()) {
    if (def->backward ||
        std::any_of(out.begin(), out.end(), [&](const KernelSpec& s) { return s.strategy == def->id; }))
      continue;
    Problem p;
    p.semiring = kind.semiring, p.dtype = kind.dtype, p.out_dtype = kind.out_dtype, p.with_argmax = kind.with_argmax;
    p.shape = {2, 33, 47, 65};
    try {
      out.push_back(default_spec(p, def->id));
    } catch (const std::invalid_argument&) { // the strategy does not compute this kind
    }
  }
  return out;
}

inline std::vector<KernelSpec> all_variants() {
  std::vector<KernelSpec> out;
  for (const KernelSpec& kind : problem_kinds())
    for (const KernelSpec& s : strategies_for(kind)) out.push_back(s);
  return out;
}

// The exp_matmul backward of a log kind (not f64): small and large tensor-core tiles, 3xTF32 and (precision fast) TF32,
// both passes, both index widths.
inline std::vector<KernelSpec> exp_matmul_grad_variants(KernelSpec kind) {
  std::vector<KernelSpec> out;
  KernelSpec s = kind;
  s.strategy = Strategy::exp_matmul;
  for (Pass pass : {Pass::grad_a, Pass::grad_b})
    for (bool index64 : {false, true}) {
      s.pass = pass, s.index64 = index64;
      s.tile_m = s.tile_n = 64, s.tile_k = 16, s.thread_m = s.thread_n = 4, s.min_blocks = 2;
      for (Math m : {Math::tf32x3, Math::tf32}) {
        s.math = m;
        out.push_back(s);
      }
      if (index64) continue;
      s.math = Math::tf32x3;
      s.tile_m = s.tile_n = 128, s.thread_m = s.thread_n = 8, s.min_blocks = 1;
      out.push_back(s);
      add_wgmma_variants(out, s);
    }
  return out;
}

// Backward kernels: each problem kind without argmax × pass × (scatter and histogram, or small and large tiles) ×
// index width.
inline std::vector<KernelSpec> grad_variants() {
  std::vector<KernelSpec> out;
  for (KernelSpec kind : problem_kinds()) {
    if (kind.with_argmax) continue;
    const bool select = semiring_info(kind.semiring).backward == BackwardKind::argmax_scatter;
    for (Pass pass : {Pass::grad_a, Pass::grad_b})
      for (bool index64 : {false, true}) {
        KernelSpec s = kind;
        s.pass = pass;
        s.index64 = index64;
        if (select) {
          s.strategy = Strategy::scatter;
          s.block_x = 128, s.block_y = 1;
          out.push_back(s);
          s.strategy = Strategy::histogram; // 2 warps, and 16, whose grad_b bins take K = 70 in two chunks (f64)
          for (int threads : {64, 512}) {
            s.block_x = threads;
            if (threads == 64 || !index64) out.push_back(s);
          }
          continue;
        }
        s.strategy = Strategy::tiled;
        s.tile_m = s.tile_n = 32, s.tile_k = 8, s.thread_m = 2, s.thread_n = 4;
        out.push_back(s);
        if (index64 || (kind.dtype != DType::f32 && kind.dtype != DType::f16)) continue;
        s.tile_m = 32, s.tile_n = 64, s.tile_k = 16, s.thread_m = 2, s.thread_n = 4, s.min_blocks = 3;
        out.push_back(s);
      }
    // The exp_matmul backward (log, tensor cores: f32-accumulating dtypes), exact and fast, both index widths.
    if (kind.semiring == Semiring::log && kind.dtype != DType::f64)
      for (KernelSpec e : exp_matmul_grad_variants(kind)) out.push_back(e);
  }
  return out;
}

} // namespace jitbmm::test
