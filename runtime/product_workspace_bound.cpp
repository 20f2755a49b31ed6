// The bound on a product plan's scratch (product_workspace_bound.hpp).
#include "runtime/product_workspace_bound.hpp"

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "generator/strategy.hpp"
#include "runtime/autotune.hpp"
#include "runtime/chain_step_products.hpp"
#include "runtime/grad_launch.hpp"
#include "runtime/product_stand_in.hpp"
#include "runtime/scratch.hpp"
#include "runtime/tuner/choose.hpp"

namespace jitbmm {

namespace {

// The largest workspace of `specs` for `problem` (a spec that does not fit it counts none: no plan runs it).
std::size_t largest(const std::vector<KernelSpec>& specs, const Problem& problem) {
  std::size_t bytes = 0;
  for (const KernelSpec& spec : specs) {
    try {
      bytes = std::max(bytes, strategy_def(spec).launches(spec, problem).workspace_bytes);
    } catch (const std::invalid_argument&) {
    }
  }
  return bytes;
}

// Every variant a plan of `problem` may run for `pass`.
std::vector<KernelSpec> variants(const Problem& problem, const DeviceInfo& device, Pass pass) {
  const bool forward = pass == Pass::forward;
  std::vector<KernelSpec> specs = device_candidates(forward ? problem : grad_problem(problem), device, pass);
  for (const TunePolicy policy : {TunePolicy::never, tune_policy_from_env()})
    for (const KernelSpec& spec : kernels_ahead(problem, device, policy, pass)) specs.push_back(spec);
  if (forward) {
    specs.push_back(default_spec(problem));
    specs.push_back(quick_product_spec(problem));
    for (const KernelSpec& spec : step_product_kernels(problem, device, false)) specs.push_back(spec);
  } else {
    specs.push_back(quick_grad_spec(problem, pass));
  }
  return specs;
}

} // namespace

std::size_t product_workspace_bound(const Problem& problem, const DeviceInfo& device) {
  return largest(variants(problem, device, Pass::forward), problem);
}

std::size_t product_backward_workspace_bound(const Problem& problem, const DeviceInfo& device) {
  const Problem grad = grad_problem(problem);
  const std::size_t pass = std::max(largest(variants(problem, device, Pass::grad_a), grad),
                                    largest(variants(problem, device, Pass::grad_b), grad));
  // A stand-in's backward leaves room for its chosen plan's passes beside its own.
  return ScratchSize().add(pass, "backward workspace").add(pass, "backward workspace").bytes();
}

} // namespace jitbmm
