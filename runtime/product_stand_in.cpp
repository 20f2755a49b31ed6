// A product plan's stand-in (product_stand_in.hpp).
#include "runtime/product_stand_in.hpp"

#include <algorithm>
#include <map>
#include <utility>
#include <vector>

#include "generator/strategy.hpp"
#include "runtime/autotune.hpp"
#include "runtime/grad_launch.hpp"
#include "runtime/jit.hpp"
#include "runtime/tuner/choose.hpp"

namespace jitbmm {

namespace {

// The stand-in plans of the process, one a problem and context (by its id, DeviceInfo::context_id). Never destroyed, as
// the modules they hold are not (runtime/jit.hpp).
struct Registry {
  std::mutex mutex;
  std::map<std::pair<unsigned long long, std::string>, PlanImpl> plans;
};

Registry& registry() {
  static auto* r = new Registry();
  return *r;
}

// The variant choose() takes for a pass without tuning now (none where it would tune).
std::optional<KernelSpec> expected_spec(const Problem& problem, const DeviceInfo& device, Pass pass) {
  const std::vector<KernelSpec> ahead = kernels_ahead(problem, device, tune_policy_from_env(), pass);
  if (ahead.empty()) return std::nullopt;
  return ahead.front();
}

bool compiles_long(const std::optional<KernelSpec>& spec, const DeviceInfo& device) {
  return spec && strategy_def(*spec).compiles_long && !kernel_known(device, *spec);
}

// The forward workspace of `spec` for `problem`, 0 where the spec does not fit it.
std::size_t workspace_of(const KernelSpec& spec, const Problem& problem) {
  try {
    return strategy_def(spec).launches(spec, problem).workspace_bytes;
  } catch (const std::invalid_argument&) {
    return 0;
  }
}

int index_of(Pass pass) { return pass == Pass::grad_a ? 0 : 1; }

// Whether `stream` is being captured, asked in the device's context (a call may come from a thread without one).
bool capturing(const DeviceInfo& device, Stream stream) {
  const ScopedContext scope(device.context);
  return stream_is_capturing(reinterpret_cast<CUstream>(stream));
}

} // namespace

ProductStandIn::ProductStandIn(std::shared_ptr<const DeviceInfo> device, const Problem& problem,
                               std::shared_future<PlanImpl> chosen, BuildPass build_pass, std::size_t workspace,
                               std::string what)
    : device_(std::move(device)), problem_(problem), chosen_(std::move(chosen), what),
      build_pass_(std::move(build_pass)), workspace_(workspace), what_(std::move(what)) {}

const SemiringBMM::Impl* ProductStandIn::fitting(const SemiringBMM::Impl* plan) const {
  if (!plan || plan->launches.workspace_bytes <= workspace_) return plan;
  std::call_once(too_large_, [&] {
    log_message(LogLevel::warn, what_ + ": its chosen variant takes " + std::to_string(plan->launches.workspace_bytes) +
                                    " bytes of workspace where its plan announced " + std::to_string(workspace_) +
                                    "; its calls keep running its stand-in");
  });
  return nullptr;
}

const SemiringBMM::Impl* ProductStandIn::chosen() const { return fitting(chosen_.get(false)); }

PlanImpl ProductStandIn::chosen_plan() const { return chosen() ? chosen_.future().get() : nullptr; }

const SemiringBMM::Impl* ProductStandIn::forward(Stream stream) const {
  if (const SemiringBMM::Impl* c = chosen()) return c;
  return fitting(chosen_.get(capturing(*device_, stream)));
}

void ProductStandIn::want(bool grad_a, bool grad_b) const {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const Pass pass : {Pass::grad_a, Pass::grad_b}) {
    const int i = index_of(pass);
    if (!(i == 0 ? grad_a : grad_b) || passes_[i].valid()) continue;
    // The pass's kernels compile beside the chosen plan's own, then the plan takes them once it is built.
    passes_[i] = start_background_build<bool>(
        device_, [device = device_, problem = problem_, chosen = chosen_.future(), build = build_pass_, pass] {
          const TuningHold hold(true, false); // nothing is tuned behind the caller's work
          for (const KernelSpec& spec : kernels_ahead(problem, *device, tune_policy_from_env(), pass)) {
            try {
              load_kernel(*device, spec);
            } catch (const std::exception&) { // the pass's own build below meets the failure again, and reports it
            }
          }
          build(*chosen.get(), pass);
          return true;
        });
  }
}

std::size_t ProductStandIn::pass_workspace_bytes(bool grad_a, bool grad_b) const {
  std::size_t bytes = 0;
  for (const Pass pass : {Pass::grad_a, Pass::grad_b})
    if (pass == Pass::grad_a ? grad_a : grad_b)
      if (const std::optional<KernelSpec> spec = expected_spec(problem_, *device_, pass))
        bytes = std::max(bytes, workspace_of(*spec, problem_));
  return bytes;
}

bool ProductStandIn::pass_built(int i, bool wait) const {
  std::shared_future<bool> pass;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    pass = passes_[i];
  }
  if (!pass.valid()) return false;
  if (!wait && pass.wait_for(std::chrono::seconds(0)) != std::future_status::ready) return false;
  try {
    return pass.get();
  } catch (const std::exception& e) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!pass_warned_[i])
      log_message(LogLevel::warn, what_ + ": its chosen " + (i == 0 ? "grad_a" : "grad_b") + " pass failed to build (" +
                                      e.what() + "); its backwards keep running its stand-in");
    pass_warned_[i] = true;
    return false;
  }
}

const SemiringBMM::Impl* ProductStandIn::backward(bool grad_a, bool grad_b, Stream stream) const {
  want(grad_a, grad_b);
  const bool wait = capturing(*device_, stream);
  const SemiringBMM::Impl* c = wait ? forward(stream) : chosen();
  if (!c) return nullptr;
  if (grad_a && !pass_built(0, wait)) return nullptr;
  if (grad_b && !pass_built(1, wait)) return nullptr;
  return c;
}

KernelSpec quick_product_spec(const Problem& problem) {
  const KernelSpec spec = default_spec(problem);
  if (!spec.is_tiled()) return spec;
  KernelSpec small = spec;
  small.tile_m = small.tile_n = 32, small.tile_k = 16, small.thread_m = small.thread_n = 2;
  try {
    check_spec_fits(small, problem);
    return small;
  } catch (const std::invalid_argument&) {
    return spec;
  }
}

KernelSpec quick_grad_spec(const Problem& problem, Pass pass) {
  return default_grad_spec(grad_problem(problem), pass);
}

const SemiringBMM::Impl& current_plan(const SemiringBMM::Impl& plan) {
  const SemiringBMM::Impl* chosen = plan.stand_in ? plan.stand_in->chosen() : nullptr;
  return chosen ? *chosen : plan;
}

const SemiringBMM::Impl& forward_plan(const SemiringBMM::Impl& plan, Stream stream) {
  const SemiringBMM::Impl* chosen = plan.stand_in ? plan.stand_in->forward(stream) : nullptr;
  return chosen ? *chosen : plan;
}

bool takes_stand_in(const Problem& problem, const DeviceInfo& device, bool grad_a, bool grad_b) {
  if (!stand_in_enabled() || in_background_build() || QuickBuild::active() || TuningHold::active()) return false;
  const Shape& s = problem.shape;
  if (s.B == 0 || s.M == 0 || s.N == 0) return false;
  const bool waits = compiles_long(expected_spec(problem, device, Pass::forward), device) ||
                     (grad_a && compiles_long(expected_spec(problem, device, Pass::grad_a), device)) ||
                     (grad_b && compiles_long(expected_spec(problem, device, Pass::grad_b), device));
  return waits && !strategy_def(quick_product_spec(problem)).compiles_long;
}

PlanImpl chosen_or_stand_in(const Problem& problem, const std::shared_ptr<const DeviceInfo>& device, bool grad_a,
                            bool grad_b, const MakePlan& make_chosen,
                            const std::function<PlanImpl(std::shared_ptr<const ProductStandIn>)>& make_stand_in,
                            const BuildPass& build_pass) {
  Registry& r = registry();
  // A stand-in made before choices were forgotten (import_choices, share_choices) waits for the variant chosen then:
  // a plan made after it is made anew, so that it takes the imported one.
  const auto key = std::make_pair(device->context_id, describe(problem) + "\n" + std::to_string(choices_generation()));
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    if (const auto it = r.plans.find(key); it != r.plans.end()) {
      it->second->stand_in->want(grad_a, grad_b);
      if (PlanImpl chosen = it->second->stand_in->chosen_plan()) return chosen;
      return it->second;
    }
  }
  std::shared_future<PlanImpl> chosen = start_background_build<PlanImpl>(device, [make_chosen] {
    const TuningHold hold(true, false); // nothing is tuned behind the caller's work
    return make_chosen();
  });
  if (chosen.wait_for(kChosenWait) == std::future_status::ready) return chosen.get(); // its error, if any
  std::size_t workspace = workspace_of(quick_product_spec(problem), problem);
  if (const std::optional<KernelSpec> expected = expected_spec(problem, *device, Pass::forward))
    workspace = std::max(workspace, workspace_of(*expected, problem));
  const std::string what = describe(problem);
  auto stand_in = std::make_shared<const ProductStandIn>(device, problem, chosen, build_pass, workspace, what);
  stand_in->want(grad_a, grad_b);
  PlanImpl plan;
  try {
    plan = make_stand_in(stand_in);
  } catch (const std::exception& e) {
    if (log_enabled(LogLevel::debug))
      log_message(LogLevel::debug, what + ": no stand-in (" + e.what() + "); waiting for its kernels");
    return chosen.get();
  }
  if (chosen.wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
    try {
      return chosen.get();
    } catch (const std::exception&) { // the stand-in, built now, serves: as where the chosen plan fails later
    }
  }
  if (log_enabled(LogLevel::debug))
    log_message(LogLevel::debug, what + ": quick builds of its default variants stand in while its chosen variant is "
                                        "built");
  std::lock_guard<std::mutex> lock(r.mutex);
  const auto [at, added] = r.plans.emplace(key, std::move(plan)); // another thread's, where it made one first
  if (added)
    wait_for_builds_at_exit();
  else
    at->second->stand_in->want(grad_a, grad_b); // the passes this call asked for, of the plan that serves
  return at->second;
}

} // namespace jitbmm
