// The tuner's search space: per strategy, the variations of its default spec worth timing (one small function
// each, run in a fixed order), then what fits the problem and the device, once each.
#include "runtime/tuner/search_space.hpp"

#include <algorithm>
#include <iterator>
#include <stdexcept>

#include "runtime/backward.hpp"
#include "runtime/checked_size.hpp"

namespace jitbmm {

namespace {

// A tile set: block tile (m, n, k), outputs per thread (tm, tn), blocks per SM.
struct TileChoice {
  int m, n, k, tm, tn, mb;
};

template <std::size_t N>
void add_tiles(std::vector<KernelSpec>& out, const KernelSpec& base, const TileChoice (&tiles)[N]) {
  for (const TileChoice& t : tiles) {
    KernelSpec s = base;
    s.tile_m = t.m, s.tile_n = t.n, s.tile_k = t.k, s.thread_m = t.tm, s.thread_n = t.tn, s.min_blocks = t.mb;
    out.push_back(s);
  }
}

// Forward tiles; f64 (8-byte accumulators) gets smaller ones.
constexpr TileChoice kNarrowTiles[] = {{128, 64, 16, 8, 4, 2}, {128, 128, 16, 8, 8, 1}, {128, 128, 16, 8, 8, 2},
                                       {64, 128, 16, 4, 8, 2}, {64, 64, 16, 4, 4, 1},   {64, 64, 16, 4, 4, 2},
                                       {32, 32, 16, 2, 2, 1},  {128, 64, 24, 8, 4, 2}};
constexpr TileChoice kWideTiles[] = {{64, 64, 8, 4, 4, 1}, {64, 32, 8, 4, 2, 1}, {32, 32, 8, 2, 2, 1}};
// exp_matmul: f64 FMA tiles, f32-accumulating FMA tiles, tensor-core (mma) tiles.
constexpr TileChoice kExpMatmulWideTiles[] = {{64, 64, 8, 4, 4, 1}, {64, 32, 8, 4, 2, 1}, {32, 32, 8, 2, 2, 2}};
constexpr TileChoice kExpMatmulFmaTiles[] = {{128, 128, 8, 8, 8, 1}, {128, 64, 16, 8, 4, 2}, {64, 64, 16, 4, 4, 2}};
constexpr TileChoice kExpMatmulMmaTiles[] = {
    {128, 128, 16, 8, 8, 1}, {128, 128, 16, 8, 8, 2}, {128, 64, 16, 8, 4, 2}, {64, 64, 16, 4, 4, 2}};
// Backward tiles: at most 16 outputs per thread, since the per-output constants double the registers per output.
constexpr TileChoice kGradNarrowTiles[] = {{64, 64, 16, 4, 4, 2}, {64, 64, 8, 4, 4, 2},  {64, 32, 16, 4, 2, 3},
                                           {32, 64, 16, 2, 4, 3}, {64, 32, 32, 4, 2, 3}, {32, 64, 32, 2, 4, 3},
                                           {32, 32, 16, 2, 2, 3}, {128, 32, 16, 4, 4, 2}};

// One forward strategy's candidates: whether it is worth timing for the problem, and its variations of the
// strategy's default spec (`base`).
struct StrategyCandidates {
  Strategy strategy;
  bool (*applies)(const Problem& p);
  void (*add)(std::vector<KernelSpec>& out, const Problem& p, KernelSpec base);
};

bool always(const Problem&) { return true; }

void add_linear(std::vector<KernelSpec>& out, const Problem&, KernelSpec base) {
  out.push_back(base);
  base.block_x = 64, base.block_y = 4;
  out.push_back(base);
}

bool is_log(const Problem& p) { return p.semiring == Semiring::log; }
void add_linear_two_pass(std::vector<KernelSpec>& out, const Problem&, KernelSpec base) { out.push_back(base); }

bool warp_applies(const Problem& p) { return p.shape.K >= 16; }
void add_warp(std::vector<KernelSpec>& out, const Problem& p, KernelSpec base) {
  for (int lanes : {4, 8, 16, 32}) {
    if (p.shape.K < lanes / 2) break; // lanes > 2K, without forming 2K
    base.block_x = lanes, base.block_y = 256 / lanes;
    out.push_back(base);
  }
}

bool block_tree_applies(const Problem& p) {
  const Shape& s = p.shape;
  return s.K >= 256 && checked_product({s.B, s.M, s.N}, "shape: B*M*N") <= (int64_t(1) << 15);
}
void add_block_tree(std::vector<KernelSpec>& out, const Problem&, KernelSpec base) {
  for (int threads : {64, 256}) {
    base.block_x = threads, base.block_y = 1;
    out.push_back(base);
  }
}

bool tiled_applies(const Problem& p) { return p.shape.M >= 8 && p.shape.N >= 8; }
void add_tiled(std::vector<KernelSpec>& out, const Problem& p, KernelSpec base) {
  if (p.dtype == DType::f64)
    add_tiles(out, base, kWideTiles);
  else
    add_tiles(out, base, kNarrowTiles);
}

// FMA tiles for every dtype; tensor cores (3xTF32, and 1xTF32 at Precision::fast) for f32-accumulating dtypes.
bool exp_matmul_applies(const Problem& p) {
  return p.semiring == Semiring::log && p.shape.M >= 16 && p.shape.N >= 16 && p.shape.K >= 16;
}
void add_exp_matmul(std::vector<KernelSpec>& out, const Problem& p, KernelSpec base) {
  base.math = Math::fma;
  if (p.dtype == DType::f64) {
    add_tiles(out, base, kExpMatmulWideTiles);
    return;
  }
  add_tiles(out, base, kExpMatmulFmaTiles);
  for (Math m : {Math::tf32x3, Math::tf32}) {
    if (m == Math::tf32 && p.precision != Precision::fast) continue;
    base.math = m;
    add_tiles(out, base, kExpMatmulMmaTiles);
  }
}

bool split_k_applies(const Problem& p) { return p.shape.M >= 8 && p.shape.N >= 8 && p.shape.K >= 1024; }
void add_split_k(std::vector<KernelSpec>& out, const Problem& p, KernelSpec base) {
  const int64_t K = p.shape.K;
  for (int64_t chunks : {8, 32, 128}) {
    KernelSpec sk = base;
    const int64_t chunk = std::max<int64_t>(256, (K / chunks + sk.tile_k - 1) / sk.tile_k * sk.tile_k);
    if (chunk >= K) continue;
    sk.k_chunk = static_cast<int>(chunk);
    out.push_back(sk);
    sk.tile_m = sk.tile_n = 32, sk.thread_m = sk.thread_n = 2;
    out.push_back(sk);
  }
}

// In this order: the candidates' order is the order they are compiled, timed and listed.
constexpr StrategyCandidates kForwardStrategies[] = {
    {Strategy::linear, always, add_linear},
    {Strategy::linear_two_pass, is_log, add_linear_two_pass},
    {Strategy::warp, warp_applies, add_warp},
    {Strategy::block_tree, block_tree_applies, add_block_tree},
    {Strategy::tiled, tiled_applies, add_tiled},
    {Strategy::exp_matmul, exp_matmul_applies, add_exp_matmul},
    {Strategy::split_k, split_k_applies, add_split_k},
};

std::vector<KernelSpec> forward_candidates(const Problem& p) {
  std::vector<KernelSpec> raw;
  for (const StrategyCandidates& row : kForwardStrategies) {
    if (!row.applies(p)) continue;
    // A strategy whose default cannot compute this problem (a grid limit: the error names the size) adds nothing.
    KernelSpec base;
    try {
      base = default_spec(p, row.strategy);
    } catch (const std::invalid_argument&) {
      continue;
    }
    row.add(raw, p, base);
  }
  return raw;
}

// Selecting semirings' backward (scatter): block sizes.
std::vector<KernelSpec> scatter_grad_candidates(KernelSpec base) {
  std::vector<KernelSpec> raw;
  for (int threads : {128, 256, 512}) {
    base.block_x = threads;
    raw.push_back(base);
  }
  return raw;
}

// The tiled backward: the default, then the tile set over the gradient's rows × cols.
std::vector<KernelSpec> tiled_grad_candidates(const Problem& p, const KernelSpec& base) {
  std::vector<KernelSpec> raw{base};
  if (p.dtype == DType::f64)
    add_tiles(raw, base, kWideTiles); // the forward's f64 tiles have at most 16 outputs per thread
  else
    add_tiles(raw, base, kGradNarrowTiles);
  return raw;
}

std::vector<KernelSpec> grad_candidates(const Problem& p, Pass pass) {
  const KernelSpec base = default_grad_spec(p, pass);
  return base.strategy == Strategy::scatter ? scatter_grad_candidates(base) : tiled_grad_candidates(p, base);
}

} // namespace

std::optional<KernelSpec> fitting(KernelSpec spec, const Problem& p) {
  try {
    check_spec_fits(spec, p);
    return spec;
  } catch (const std::invalid_argument&) {
  }
  try {
    spec.index64 = true; // a variant that only needs wider indices still fits
    check_spec_fits(spec, p);
    return spec;
  } catch (const std::invalid_argument&) {
    return std::nullopt;
  }
}

std::vector<KernelSpec> tuning_candidates(const Problem& problem, const DeviceLimits& limits, Pass pass) {
  validate(problem);
  const Problem p = pass == Pass::forward ? problem : grad_problem(problem);
  checked_product({p.shape.B, p.shape.M, p.shape.N}, "shape: B*M*N"); // throws, naming it, when it overflows
  const std::vector<KernelSpec> raw = pass == Pass::forward ? forward_candidates(p) : grad_candidates(p, pass);
  // Keep what fits the problem and the device, once each.
  std::vector<KernelSpec> out;
  for (const KernelSpec& candidate : raw) {
    const std::optional<KernelSpec> spec = fitting(candidate, p);
    if (!spec || spec->threads() > limits.max_threads_per_block) continue;
    if (shared_memory_bytes(*spec) > limits.max_static_shared_bytes) continue; // check_spec_fits allows 48 KiB
    if (std::find(out.begin(), out.end(), *spec) == out.end()) out.push_back(*spec);
  }
  return out;
}

} // namespace jitbmm
