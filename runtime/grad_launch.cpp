// Gradient launches (grad_launch.hpp).
#include "runtime/grad_launch.hpp"

#include "runtime/launch.hpp"

namespace jitbmm {

Problem grad_problem(const Problem& problem) {
  Problem p = problem;
  p.with_argmax = false;
  return p;
}

std::size_t grad_workspace_bytes(const Problem& p, const KernelSpec& spec) {
  return strategy_def(spec).launches(spec, p).workspace_bytes;
}

void launch_grad(const Problem& p, const KernelSpec& spec, const LoadedKernel& kernel, const GradArgs& args,
                 CUstream stream) {
  launch_grad(p, spec, strategy_def(spec).launches(spec, p), kernel, args, stream);
}

void launch_grad(const Problem& p, const KernelSpec& spec, const LaunchPlan& plan, const LoadedKernel& kernel,
                 const GradArgs& args, CUstream stream) {
  if (plan.launches.empty()) return; // an empty gradient
  jb::GradParams q = grad_params(p, spec);
  q.a = args.a, q.b = args.b, q.out = args.out, q.grad_out = args.grad_out, q.argmax = args.argmax, q.grad = args.grad;
  run_launches(kernel, plan, q, args.workspace, stream);
}

} // namespace jitbmm
