// Strategy "warp": block_x lanes of a warp per output (a power of two in 2..32), block_y outputs per block, the
// lanes' partial states combined with warp shuffles (templates/direct/reductions.cuh). The default for few outputs with
// moderate K, and where linear's grid cannot hold the columns.
#include "generator/strategies/common.hpp"

namespace jitbmm::strategies {
namespace {

int rank(const Problem& p) {
  const int64_t outputs = outputs_of(p);
  const bool empty = p.shape.K == 0 || outputs == 0;
  return !empty && p.shape.K >= 32 && outputs < (int64_t(1) << 18) ? 30 : 5; // few outputs: parallel K
}

void defaults(KernelSpec& spec, const Problem& p) {
  const int64_t K = p.shape.K;
  spec.block_x = K >= 512 ? 32 : K >= 64 ? 8 : 4, spec.block_y = 256 / spec.block_x;
}

void check(const KernelSpec& spec, const Problem&) {
  if (!power_of_two(spec.block_x) || spec.block_x < 2 || spec.block_x > 32)
    reject("block", "warp lanes per output (block_x) must be a power of two in 2..32");
}

std::vector<KernelSpec> candidates(const KernelSpec& base, const Problem& p) {
  std::vector<KernelSpec> out;
  if (p.shape.K < 16) return out;
  KernelSpec w = base;
  for (int lanes : {4, 8, 16, 32}) {
    if (p.shape.K < lanes / 2) break; // lanes > 2K, without forming 2K
    w.block_x = lanes, w.block_y = 256 / lanes;
    out.push_back(w);
  }
  return out;
}

Rendering render(const KernelSpec& s) {
  return {{"direct/reductions.cuh"},
          "BmmParams",
          {main_entry(s, "jb::warp_kernel<" + semiring_type(s) + ", " + io_types(s) + ", " +
                             std::to_string(s.block_x) + ">")}};
}

LaunchPlan launches(const KernelSpec& spec, const Problem& p) {
  Launch l;
  l.block[0] = spec.block_x, l.block[1] = spec.block_y;
  l.grid[0] = grid_stride_blocks(outputs_of(p), spec.block_y);
  return {{l}};
}

const RegisterStrategy registered{{Strategy::warp, "warp", false, kBlockFields, rank, defaults, check,
                                   needs_index64, candidates, render, launches, nullptr}};

} // namespace
} // namespace jitbmm::strategies
