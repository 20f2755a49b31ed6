// Strategy "block_tree": a block per output (block_x threads, a power of two ≥ 64), a shared-memory tree then a
// warp shuffle (templates/direct/reductions.cuh). Never the default; a tuning candidate for few outputs with long K.
#include "generator/strategies/common.hpp"

namespace jitbmm::strategies {
namespace {

int rank(const Problem&) { return -1; }

void defaults(KernelSpec& spec, const Problem& p) { spec.block_x = p.shape.K >= 4096 ? 256 : 64, spec.block_y = 1; }

void check(const KernelSpec& spec, const Problem&) {
  if (!power_of_two(spec.block_x) || spec.block_x < 64 || spec.block_y != 1)
    reject("block", "block_tree needs block_x a power of two in 64..1024 and block_y = 1");
}

std::vector<KernelSpec> candidates(const KernelSpec& base, const Problem& p) {
  std::vector<KernelSpec> out;
  if (p.shape.K < 256 || outputs_of(p) > (int64_t(1) << 15)) return out;
  KernelSpec t = base;
  for (int threads : {64, 256}) {
    t.block_x = threads, t.block_y = 1;
    out.push_back(t);
  }
  return out;
}

Rendering render(const KernelSpec& s) {
  return {{"direct/reductions.cuh"},
          "BmmParams",
          {main_entry(s, "jb::block_tree_kernel<" + semiring_type(s) + ", " + io_types(s) + ", " +
                             std::to_string(s.block_x) + ">")}};
}

LaunchPlan launches(const KernelSpec& spec, const Problem& p) {
  Launch l;
  l.block[0] = spec.block_x;
  l.grid[0] = grid_stride_blocks(outputs_of(p), 1);
  return {{l}};
}

const RegisterStrategy registered{{Strategy::block_tree, "block_tree", false, kBlockFields, rank, defaults, check,
                                   needs_index64, candidates, render, launches, nullptr}};

} // namespace
} // namespace jitbmm::strategies
