// Strategy "linear": one thread per output, one pass over K with the semiring's online state (templates/direct/linear.cuh).
// The default for problems without outputs or terms, and for those no other strategy suits.
#include "generator/strategies/common.hpp"

namespace jitbmm::strategies {
namespace {

int rank(const Problem& p) {
  const Shape& s = p.shape;
  if ((s.N + 31) / 32 > kMaxGridX) return -1; // its grid's x holds every column block: warp loops instead
  return s.K == 0 || outputs_of(p) == 0 ? 100 : 10;
}

void defaults(KernelSpec& spec, const Problem&) { spec.block_x = 32, spec.block_y = 8; }

void check(const KernelSpec& spec, const Problem& p) {
  if ((p.shape.N + spec.block_x - 1) / spec.block_x > kMaxGridX)
    throw std::invalid_argument("shape.N: more than 2^31 - 1 column blocks for the linear strategy; use warp");
}

std::vector<KernelSpec> candidates(const KernelSpec& base, const Problem&) {
  KernelSpec wide = base;
  wide.block_x = 64, wide.block_y = 4;
  return {base, wide};
}

Rendering render(const KernelSpec& s) {
  return {{"direct/linear.cuh"}, "BmmParams", {main_entry(s, "jb::linear_kernel<" + semiring_type(s) + ", " + io_types(s) + ">")}};
}

// The rows' loop steps by the whole grid's rows (up to 65535 · block_y): a 32-bit index must hold M and that step.
bool index64(const KernelSpec& spec, const Problem& p) {
  const int64_t step = std::min<int64_t>(p.shape.M + spec.block_y, int64_t(kMaxGridYZ) * spec.block_y);
  return needs_index64(spec, p) || p.shape.M + step >= kIndex32Limit;
}

LaunchPlan launches(const KernelSpec& spec, const Problem& p) {
  const Shape& s = p.shape;
  Launch l;
  l.block[0] = spec.block_x, l.block[1] = spec.block_y;
  l.grid[0] = static_cast<unsigned>((s.N + spec.block_x - 1) / spec.block_x);
  l.grid[1] = clamp_grid((s.M + spec.block_y - 1) / spec.block_y, kMaxGridYZ);
  l.grid[2] = clamp_grid(s.B, kMaxGridYZ);
  return {{l}};
}

const RegisterStrategy registered{{Strategy::linear, "linear", false, kBlockFields, rank, defaults, check,
                                   index64, candidates, render, launches, nullptr}};

} // namespace
} // namespace jitbmm::strategies
