// A product plan's stand-in (docs/caching-and-tuning.md, "First calls"): where the variant SemiringBMM::get chooses
// takes NVRTC seconds to compile (StrategyDef::compiles_long: exp_matmul) and is not built in this process yet, the
// plan's calls run quick builds (runtime/jit.hpp) of the problem's default variants, its backward's too, which
// compile in a fraction of a second, while the plan that get() makes without a stand-in (its choice, the check of a
// decision brought from elsewhere, its kernels) is built in the background (runtime/background_build.hpp). From
// then on forwards run the chosen plan, and backwards too once its passes are built. Every variant computes the
// product exactly (argmax ties alike), so a result does not depend on which ran it beyond rounding, and a backward
// may follow a forward of either. The plans of one problem on one device share their stand-in. Calls on a stream
// being captured into a CUDA graph wait for the chosen plan instead: a graph replays what it captured for good.
#pragma once

#include <cstddef>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>

#include "runtime/background_build.hpp"
#include "runtime/plan_impl.hpp"

namespace jitbmm {

using PlanImpl = std::shared_ptr<const SemiringBMM::Impl>;
using MakePlan = std::function<PlanImpl()>;
// Builds a plan's backward pass (grad_a or grad_b): its choice and kernel, kept by the plan.
using BuildPass = std::function<void(const SemiringBMM::Impl&, Pass)>;

class ProductStandIn {
public:
  // `workspace`: the forward workspace the plan announces (the larger of the stand-in's and the chosen variant's
  // as expected); `what` names the problem in the log's lines.
  ProductStandIn(std::shared_ptr<const DeviceInfo> device, const Problem& problem, std::shared_future<PlanImpl> chosen,
                 BuildPass build_pass, std::size_t workspace, std::string what);

  // The chosen plan for a forward on `stream` once built (waited for where the stream is being captured), else null:
  // the stand-in runs the call. A chosen plan whose workspace exceeds the announced one never serves (the rare
  // decision brought from elsewhere that fails its check, replaced by a larger one): the stand-in serves for good,
  // with a warning.
  const SemiringBMM::Impl* forward(Stream stream) const;
  // The same for a backward writing the gradients named: the chosen plan once it and those passes are built. Starts
  // building those passes where nothing builds them yet.
  const SemiringBMM::Impl* backward(bool grad_a, bool grad_b, Stream stream) const;
  // Starts building the chosen plan's passes named in the background, beside the plan itself.
  void want(bool grad_a, bool grad_b) const;
  // The chosen plan once built and fitting, waiting for its build; null where it failed or does not fit.
  const SemiringBMM::Impl* forward_waited() const { return fitting(chosen_.get(true)); }
  // The chosen plan where it serves forwards now; never waits.
  const SemiringBMM::Impl* chosen() const;
  PlanImpl chosen_plan() const; // the same, shared
  // Whether the chosen plan's build has ended (built, or failed: the stand-in then serves for good, with a warning).
  bool settled() const { return chosen_.ended(); }
  std::size_t workspace_bytes() const { return workspace_; }
  // The larger workspace of the chosen plan's passes named, as expected before they are built (what a backward's
  // scratch announced while the stand-in runs leaves room for).
  std::size_t pass_workspace_bytes(bool grad_a, bool grad_b) const;

private:
  const SemiringBMM::Impl* fitting(const SemiringBMM::Impl* plan) const;
  // Whether the chosen plan's pass is built, waiting for its build with `wait`.
  bool pass_built(int pass, bool wait) const;

  std::shared_ptr<const DeviceInfo> device_;
  Problem problem_;
  PendingBuild<SemiringBMM::Impl> chosen_;
  BuildPass build_pass_;
  std::size_t workspace_;
  std::string what_;
  mutable std::mutex mutex_;                   // guards passes_ and pass_warned_
  mutable std::shared_future<bool> passes_[2]; // grad_a, grad_b: built (true) or failed (false); started on want
  mutable bool pass_warned_[2] = {false, false};
  mutable std::once_flag too_large_; // the warning that the chosen plan takes more workspace than announced
};

// A stand-in's product (a product plan's, a chain's): the default variant in the tiled family's smallest tile (32 × 32
// outputs a block, 2 × 2 a thread), whose kernel compiles in about a third of the default tile's time; the default
// itself where that tile does not fit.
KernelSpec quick_product_spec(const Problem& problem);
// A product stand-in's backward pass (grad_a or grad_b) of the forward problem `problem`: its default variant.
KernelSpec quick_grad_spec(const Problem& problem, Pass pass);

// The plan whose kernels run now: a stand-in plan's chosen plan where it serves forwards, else `plan` itself.
const SemiringBMM::Impl& current_plan(const SemiringBMM::Impl& plan);
// The plan a forward on `stream` runs: the same, waiting for the chosen plan where the stream is being captured.
const SemiringBMM::Impl& forward_plan(const SemiringBMM::Impl& plan, Stream stream);

// Whether a plan of `problem` made on this thread takes a stand-in: $JITBMM_STAND_IN allows it, the thread builds
// nothing quick or in the background and holds no tuning (a capture, a chain's products), the problem has outputs,
// and the variant choose() takes for the forward (or for a pass named) without tuning now compiles long and is not
// built in this process yet.
bool takes_stand_in(const Problem& problem, const DeviceInfo& device, bool grad_a, bool grad_b);

// The plan of `problem` on `device` where takes_stand_in: the one of this problem's stand-in where the process has
// one (its chosen plan once that serves); else make_chosen's plan where it is built within a short wait; else a new
// stand-in: make_stand_in's plan (quick builds, its ProductStandIn given) while make_chosen runs in the background;
// else, where make_stand_in fails or the chosen plan is built first, the chosen plan. The passes named are wanted
// (ProductStandIn::want). make_chosen's error, where it fails before a stand-in is made, is thrown here.
PlanImpl chosen_or_stand_in(const Problem& problem, const std::shared_ptr<const DeviceInfo>& device, bool grad_a,
                            bool grad_b, const MakePlan& make_chosen,
                            const std::function<PlanImpl(std::shared_ptr<const ProductStandIn>)>& make_stand_in,
                            const BuildPass& build_pass);

} // namespace jitbmm
