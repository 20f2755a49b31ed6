// The state behind a SemiringBMM, shared by the forward (plan.cpp) and the backward (backward.cpp).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>

#include "generator/strategy.hpp"
#include "runtime/jit.hpp"
#include "runtime/repair_watch.hpp"
#include "support/built_once.hpp"
#include "jitbmm/plan.hpp"
#include "templates/core/params.cuh"

namespace jitbmm {

class ProductStandIn;

// A backward pass's kernel, chosen (stored decision, tuning or default) on first use.
struct GradKernel {
  KernelSpec spec;
  std::shared_ptr<const LoadedKernel> kernel;
  LaunchPlan launches; // the pass's launches for the plan's problem, worked out once
  // Its launches after the other pass of a call, of the same strategy, in the same workspace (where the strategy has
  // them: StrategyDef::second_pass_launches).
  std::optional<LaunchPlan> second;
};

// A forward variant a plan moves to (the one fastest on wide-range data: runtime/repair_watch.hpp).
struct ForwardVariant {
  KernelSpec spec;
  std::shared_ptr<const LoadedKernel> kernel;
  LaunchPlan launches; // its workspace fits the plan's (workspace_bytes() never changes)
};

struct SemiringBMM::Impl {
  Problem problem;
  KernelSpec spec;
  std::shared_ptr<const DeviceInfo> device;
  std::shared_ptr<const LoadedKernel> kernel; // null when the problem has no outputs (nothing to launch)
  jb::BmmParams params{};                     // sizes and strides; pointers filled per call
  LaunchPlan launches;                        // the strategy's launches for this problem, and their workspace

  // Plans the tuner gave a strategy with repair counts (exp_matmul) watch them and may move, once, to the wide-data
  // variant.
  std::unique_ptr<RepairWatch> watch;
  mutable std::mutex wide_mutex;                      // guards moving
  mutable std::shared_ptr<const ForwardVariant> wide; // set once, before `moved`
  mutable std::atomic<bool> moved{false};             // calls run `wide` from now on
  mutable std::atomic<bool> settled{false};           // watching is over: moved, or nothing faster on wide data

  // Built on first use, each on its own: a pass chosen (perhaps tuned) and built holds up no call that needs another.
  BuiltOnce<std::shared_ptr<const GradKernel>> grad[2];      // grad_a, grad_b
  BuiltOnce<std::shared_ptr<const SemiringBMM>> with_argmax; // the forward with argmax, for the selecting backward

  // A stand-in plan's (runtime/product_stand_in.hpp): its own kernels, its backward's too, are quick builds of the
  // default variants, and its calls run the chosen plan once that is built. Null for every other plan.
  std::shared_ptr<const ProductStandIn> stand_in;
};

// The problem of the forward that recomputes a selecting semiring's argmax for a backward when the caller has none:
// its values and argmax go to scratch, contiguous.
inline Problem argmax_problem(const Problem& problem) {
  Problem q = problem;
  q.with_argmax = true;
  q.out_strides.reset();
  return q;
}

// Argument checks shared by the forward and backward launches; the message names the argument.
inline void check_pointer(const void* ptr, const char* name, bool empty) {
  if (!ptr && !empty) throw std::invalid_argument(std::string(name) + ": null device pointer");
}
inline void check_alignment(const void* ptr, const char* name, int bytes) {
  if (reinterpret_cast<uintptr_t>(ptr) % bytes != 0)
    throw std::invalid_argument(std::string(name) + ": device pointer not aligned to its " + std::to_string(bytes) +
                                "-byte element");
}

} // namespace jitbmm
