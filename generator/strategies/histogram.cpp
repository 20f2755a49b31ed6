// Strategy "histogram" (a gradient pass of the selecting semirings: max_plus, min_plus, max_times): scatter's sums
// gathered per gradient line in shared-memory bins, without atomics, workspace or store pass, deterministic
// (templates/grad/histogram.cuh). The selecting semirings' default where K fits in a few chunks of bins.
#include "generator/strategies/common.hpp"

#include <algorithm>

#include "support/checked_size.hpp"
#include "templates/core/limits.cuh"

namespace jitbmm::strategies {
namespace {

// Each block's bins: at most the dynamic shared memory any GPU gives without opting in.
constexpr int64_t kBinBytes = jb::kMaxStaticSharedBytes;
// Past this many chunks of K (each reads the gradient's lines again) the default is scatter.
constexpr int64_t kDefaultChunks = 4;

// Bin lines a warp holds: a gradient row (grad_a), or 8 columns (grad_b).
int lines_per_warp(const KernelSpec& s) { return s.pass == Pass::grad_a ? 1 : 8; }
int64_t bin_bytes(const KernelSpec& s) { return dtype_info(s.dtype).acc_bytes; }

// The k a line's bins cover at once (the chunk), for a problem's K.
int64_t chunk_k(const KernelSpec& s, const Problem& p) {
  return std::min<int64_t>(p.shape.K, kBinBytes / (s.threads() / 32 * lines_per_warp(s) * bin_bytes(s)));
}

// Two warps a block: the best or within 5% of it for both passes at 64×512³, 512×128³ and 4×2048³ on the H100.
// Their bins hold 6144 k of a row (f32) for grad_a, 768 k of 8 columns for grad_b.
void defaults(KernelSpec& spec, const Problem&) { spec.block_x = 64, spec.block_y = 1; }

int64_t default_chunks(const Problem& p, Pass pass) {
  KernelSpec s;
  s.dtype = p.dtype, s.pass = pass;
  defaults(s, p);
  return (p.shape.K + chunk_k(s, p) - 1) / std::max<int64_t>(chunk_k(s, p), 1);
}

// Ranked above scatter (0) when both passes take K in at most kDefaultChunks.
int rank(const Problem& p) {
  if (semiring_info(p.semiring).backward != BackwardKind::argmax_scatter) return -1;
  return default_chunks(p, Pass::grad_a) <= kDefaultChunks && default_chunks(p, Pass::grad_b) <= kDefaultChunks ? 1
                                                                                                                : -1;
}

void check(const KernelSpec& spec, const Problem&) {
  if (spec.block_y != 1) reject("block", "histogram needs block_y = 1");
  // At 1024 threads a thread gets 64 registers, and the loads a warp keeps in flight spill (f64 grad_b).
  if (spec.block_x > 512) reject("block", "histogram takes at most 512 threads a block");
}

std::vector<KernelSpec> candidates(const KernelSpec& base, const Problem&) {
  std::vector<KernelSpec> out;
  KernelSpec s = base;
  for (int threads : {32, 64, 128, 256}) {
    s.block_x = threads;
    out.push_back(s);
  }
  return out;
}

Rendering render(const KernelSpec& s) {
  return {{"grad/histogram.cuh"},
          "GradParams",
          {main_entry(s, std::string(s.pass == Pass::grad_a ? "jb::grad_rows_kernel<" : "jb::grad_cols_kernel<") +
                             io_types(s) + ", " + (semiring_info(s.semiring).scatter_times ? "true" : "false") + ">")}};
}

// The lines (rows of grad_a, groups of 8 columns of grad_b) over every slice of the accumulator.
int64_t lines_of(const KernelSpec& spec, const Problem& p) {
  return grad_accumulator(p, spec).slices * (spec.pass == Pass::grad_a ? p.shape.M : (p.shape.N + 7) / 8);
}

// The grid covers every line and every chunk of k in one pass, so each loop's index steps by about its whole count:
// a 32-bit index must hold twice the lines and twice K, not only the operands' offsets.
bool index64(const KernelSpec& spec, const Problem& p) {
  if (needs_index64(spec, p)) return true;
  const int64_t warps = spec.threads() / 32, kc = std::max<int64_t>(chunk_k(spec, p), 1);
  const auto lines = try_product({lines_of(spec, p), 2});
  return !lines || *lines + warps >= kIndex32Limit || 2 * p.shape.K + kc >= kIndex32Limit;
}

LaunchPlan launches(const KernelSpec& spec, const Problem& p) {
  const Shape& s = p.shape;
  const bool ga = spec.pass == Pass::grad_a;
  if (s.B == 0 || s.K == 0 || (ga ? s.M : s.N) == 0) return {};
  const int64_t warps = spec.threads() / 32, kc = chunk_k(spec, p);
  const int64_t lines = lines_of(spec, p);
  Launch main;
  main.block[0] = static_cast<unsigned>(spec.threads());
  main.grid[0] = clamp_grid((lines + warps - 1) / warps, kMaxGridX);
  main.grid[1] = clamp_grid((s.K + kc - 1) / kc, kMaxGridYZ);
  main.dynamic_shared = static_cast<unsigned>(warps * lines_per_warp(spec) * kc * bin_bytes(spec));
  return {{main}};
}

const RegisterStrategy registered{{Strategy::histogram, "histogram", true, kBlockFields, rank, defaults, check,
                                   index64, candidates, render, launches, nullptr}};

} // namespace
} // namespace jitbmm::strategies
