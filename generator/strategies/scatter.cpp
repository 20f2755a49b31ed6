// Strategy "scatter" (a gradient pass of the selecting semirings: max_plus, min_plus, max_times): each output's G
// goes to the term its forward argmax chose, accumulated atomically into the workspace, then stored into the
// operand's layout (templates/grad/scatter.cuh).
#include "generator/strategies/common.hpp"

#include <algorithm>

namespace jitbmm::strategies {
namespace {

// The selecting semirings' default backward where histogram's rank (1) does not take the problem.
int rank(const Problem& p) { return semiring_info(p.semiring).backward == BackwardKind::argmax_scatter ? 0 : -1; }

void defaults(KernelSpec& spec, const Problem&) { spec.block_x = 256, spec.block_y = 1; }

void check(const KernelSpec& spec, const Problem&) {
  if (spec.block_y != 1) reject("block", "scatter needs block_y = 1");
}

std::vector<KernelSpec> candidates(const KernelSpec& base, const Problem&) {
  std::vector<KernelSpec> out;
  KernelSpec s = base;
  for (int threads : {128, 256, 512}) {
    s.block_x = threads;
    out.push_back(s);
  }
  return out;
}

Rendering render(const KernelSpec& s) {
  return {{"grad/scatter.cuh"},
          "GradParams",
          {main_entry(s, "jb::grad_scatter_kernel<" + io_types(s) + ", " + (s.pass == Pass::grad_a ? "true" : "false") +
                             ", " + (semiring_info(s.semiring).scatter_times ? "true" : "false") + ">"),
           grad_store_entry(s)}};
}

LaunchPlan launches(const KernelSpec& spec, const Problem& p) {
  const Shape& s = p.shape;
  const bool ga = spec.pass == Pass::grad_a;
  if (s.B == 0 || (ga ? s.M : s.K) == 0 || (ga ? s.K : s.N) == 0) return {};
  const int64_t outputs = outputs_of(p);
  Launch main;
  main.block[0] = static_cast<unsigned>(spec.threads());
  main.grid[0] = grid_stride_blocks(outputs, spec.threads());
  LaunchPlan plan = grad_plan(spec, p, main);
  if (outputs == 0) plan.launches.erase(plan.launches.begin()); // nothing to send: the zeroed gradient is stored
  return plan;
}

const RegisterStrategy registered{{Strategy::scatter, "scatter", true, kBlockFields, rank, defaults, check,
                                   needs_index64, candidates, render, launches, nullptr}};

} // namespace
} // namespace jitbmm::strategies
