// Strategy "linear_two_pass" (log only): one thread per output, the maximum over K, then Σ exp(t − max)
// (templates/direct/linear.cuh). Never the default; a tuning candidate.
#include "generator/strategies/common.hpp"

namespace jitbmm::strategies {
namespace {

int rank(const Problem&) { return -1; }

void defaults(KernelSpec& spec, const Problem&) { spec.block_x = 32, spec.block_y = 8; }

void check(const KernelSpec& spec, const Problem&) {
  if (spec.semiring != Semiring::log) reject("strategy", "linear_two_pass is the log semiring's two-pass form");
}

std::vector<KernelSpec> candidates(const KernelSpec& base, const Problem& p) {
  if (p.semiring != Semiring::log) return {};
  return {base};
}

Rendering render(const KernelSpec& s) {
  return {{"direct/reductions.cuh"}, "BmmParams", {main_entry(s, "jb::linear_two_pass_kernel<" + io_types(s) + ">")}};
}

LaunchPlan launches(const KernelSpec& spec, const Problem& p) {
  Launch l;
  l.block[0] = static_cast<unsigned>(spec.threads());
  l.grid[0] = grid_stride_blocks(outputs_of(p), spec.threads());
  return {{l}};
}

const RegisterStrategy registered{{Strategy::linear_two_pass, "linear_two_pass", false, kBlockFields, rank,
                                   defaults, check, needs_index64, candidates, render, launches, nullptr}};

} // namespace
} // namespace jitbmm::strategies
