// The bound on a product plan's scratch (product_workspace_bound.hpp).
#include "runtime/product_workspace_bound.hpp"

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "generator/strategy.hpp"
#include "runtime/grad_launch.hpp"
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

// The variants a plan of `problem` made while tuning is held may run for `pass`.
std::vector<KernelSpec> variants(const Problem& problem, const DeviceInfo& device, Pass pass) {
  std::vector<KernelSpec> specs;
  for (const TunePolicy policy : {TunePolicy::never, tune_policy_from_env()}) // choices are kept by policy
    for (const KernelSpec& spec : kernels_ahead(problem, device, policy, pass)) specs.push_back(spec);
  specs.push_back(pass == Pass::forward ? default_spec(problem) : default_grad_spec(problem, pass));
  return specs;
}

} // namespace

std::size_t product_workspace_bound(const Problem& problem, const DeviceInfo& device,
                                    const std::vector<KernelSpec>& also) {
  std::vector<KernelSpec> specs = variants(problem, device, Pass::forward);
  specs.insert(specs.end(), also.begin(), also.end());
  return largest(specs, problem);
}

std::size_t product_backward_workspace_bound(const Problem& problem, const DeviceInfo& device) {
  const Problem grad = grad_problem(problem);
  const std::size_t pass = std::max(largest(variants(problem, device, Pass::grad_a), grad),
                                    largest(variants(problem, device, Pass::grad_b), grad));
  return ScratchSize().add(pass, "backward workspace").bytes(); // as the backward counts it
}

} // namespace jitbmm
