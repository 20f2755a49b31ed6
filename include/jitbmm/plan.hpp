// Plans: a problem bound to a device and a compiled kernel, ready to launch many times.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

#include "jitbmm/kernel_spec.hpp"
#include "jitbmm/types.hpp"

namespace jitbmm {

// A compiled, loaded kernel for one Problem on one device. Cheap to copy (shared). Thread-safe to call.
class SemiringBMM {
public:
  // Plan for the device current on this thread (docs/cpp-api.md). A second get() of the same
  // problem on the same device reuses the compiled kernel: no second NVRTC call.
  static SemiringBMM get(const Problem& problem);
  // The same, for calls on `stream`: while `stream` is being captured into a CUDA graph, the variant comes from a
  // stored decision or is the default, and nothing is tuned (tuning launches and synchronises, which would break
  // the capture); a later get() outside the capture tunes as usual (docs/caching-and-tuning.md, "CUDA graphs").
  static SemiringBMM get(const Problem& problem, Stream stream);
  // Plan with an explicit kernel variant (for inspection, tests and benchmarks).
  static SemiringBMM get(const Problem& problem, const KernelSpec& spec);
  // Compiles, all at once on the CPU's cores, the kernels that get(problem) and a backward writing the gradients
  // named will load (their stored decisions' or the defaults'; a pass that would be tuned is left to its tuning),
  // so that a first training step waits for its longest compile rather than for the sum of them
  // (docs/caching-and-tuning.md, "First calls"). Where get() would take a stand-in (settled()), its quick builds
  // instead, forward and the passes named, while the chosen ones build in the background. Checks `problem` as get()
  // does; launches nothing, and leaves a kernel that fails to build to the get() or backward() that needs it.
  static void prepare(const Problem& problem, bool grad_a, bool grad_b);

  // Launches out = a ⊗ b on `stream` (asynchronous). Pointers are device pointers laid out as the problem's
  // strides say; they may be null only when the tensor they point to is empty. Throws std::invalid_argument
  // naming the argument, CudaError when the launch fails.
  void operator()(const void* a, const void* b, void* out, Stream stream = nullptr) const;
  // As above, also writing int32 argmax[B][M][N] (problem.with_argmax must be set; otherwise argmax is null), with
  // the scratch taken from `workspace` when one is given (see Workspace; workspace_bytes() says how much).
  void operator()(const void* a, const void* b, void* out, int32_t* argmax, Stream stream = nullptr,
                  const Workspace& workspace = {}) const;
  // As above, where b and `workspace` (which must be given) are those of this plan's previous call on `stream`, and
  // neither has changed since: exp_matmul prepares a alone, b's factors and maxima being in the workspace already
  // (a loop of products with one right operand, as a chain's steps with one table); the other strategies, and a plan
  // that watches its repairs (get() without a spec: it may move to another variant between calls), run as
  // operator() does. A call that breaks the condition computes with b's factors of that previous call.
  void run_same_b(const void* a, const void* b, void* out, int32_t* argmax, Stream stream,
                  const Workspace& workspace) const;
  // As operator() (same_b: as run_same_b), for a product wanted only where the device int at `needed` is not 0 when
  // the launches reach it: an earlier launch on `stream` writes the flag, and the host does not wait to read it.
  // Where it is 0, every launch returns before reading or writing anything: out and argmax keep what they held, and
  // the call is not a previous call for run_same_b. A plan watching its repairs does not observe such a call.
  void run_if(const int* needed, const void* a, const void* b, void* out, int32_t* argmax, Stream stream,
              const Workspace& workspace, bool same_b = false) const;
  // The scratch bytes one forward call takes (0 for most direct kernels; split-K's partials, exp_matmul's factors).
  std::size_t workspace_bytes() const;
  // Whether calls run the variants the plan chose. get() of a problem whose chosen variant takes seconds to compile
  // (exp_matmul) and is not built yet returns a plan whose calls run quick builds of the default variants meanwhile
  // (a stand-in, docs/caching-and-tuning.md, "First calls"): false until the chosen variant is built in the
  // background (or failed to build: the stand-in then serves for good). spec(), kernel_name(), source() and
  // registers() describe what calls run now.
  bool settled() const;

  // exp_matmul plans only (std::invalid_argument otherwise): runs like operator(), waits for `stream`, and says
  // how many outputs the guard found inexact and sent to the exact repair pass, and how many repair tiles ran.
  struct RepairReport {
    int64_t outputs = 0, repaired_outputs = 0, tiles = 0, repaired_tiles = 0;
  };
  RepairReport run_with_repair_report(const void* a, const void* b, void* out, Stream stream = nullptr) const;

  // Gradients of a scalar loss L through out = a ⊗ b (docs/gradients-and-numerics.md), asynchronous on `stream`.
  // grad_out is dL/dout, laid out like out; grad_a / grad_b (either may be null) receive dL/da and dL/db in a's and b's
  // own layout and dtype (an operand broadcast over the batch gets the sum over the batch). log reads `out`, the saved
  // forward result; max_plus, min_plus and max_times read `argmax`, the forward's (this overload recomputes it
  // with one forward pass into a temporary buffer). Kernels are chosen per pass like the forward's (tuning
  // policy, stored decisions) on first use, and kept by the plan; a first use while `stream` is being captured into
  // a CUDA graph tunes nothing (see get). Throws std::invalid_argument naming the argument.
  void backward(const void* a, const void* b, const void* out, const void* grad_out, void* grad_a, void* grad_b,
                Stream stream = nullptr) const;
  void backward(const void* a, const void* b, const void* out, const int32_t* argmax, const void* grad_out,
                void* grad_a, void* grad_b, Stream stream = nullptr, const Workspace& workspace = {}) const;
  // The scratch bytes one backward call takes for the gradients asked for; argmax_given: the selecting semirings
  // get the forward's argmax (else their backward recomputes it into scratch). Chooses the passes' kernels (for
  // calls on `stream`: nothing is tuned while it is being captured, as backward() itself does).
  std::size_t backward_workspace_bytes(bool grad_a, bool grad_b, bool argmax_given = true,
                                       Stream stream = nullptr) const;
  // The variant a pass runs (grad_a / grad_b are chosen on first use; forward is spec()).
  KernelSpec grad_spec(Pass pass) const;

  const Problem& problem() const;
  const KernelSpec& spec() const;
  const std::string& kernel_name() const;
  const std::string& source() const; // the generated CUDA source that was compiled
  int registers() const;             // per thread, as the driver reports
  std::string device_name() const;
  std::string arch() const; // "sm_90"

  struct Impl;

private:
  explicit SemiringBMM(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  void run(const void* a, const void* b, void* out, int32_t* argmax, Stream stream, const Workspace& workspace,
           bool same_b, const int* needed = nullptr) const;
  std::shared_ptr<const Impl> impl_;
};

// The log semiring in f32, row-major contiguous operands: out[b,i,j] = log Σ_k exp(a[b,i,k] + b[b,k,j]).
class JitLogBMM {
public:
  static JitLogBMM get(Shape shape);
  void operator()(const float* a, const float* b, float* out, Stream stream = nullptr) const {
    plan_(a, b, out, stream);
  }
  const SemiringBMM& plan() const { return plan_; }

private:
  explicit JitLogBMM(SemiringBMM plan) : plan_(std::move(plan)) {}
  SemiringBMM plan_;
};

// Process-wide counters, for tests and diagnostics.
struct Stats {
  long nvrtc_compiles = 0;
  std::size_t pool_reserved_bytes = 0; // device memory jitbmm's scratch pools hold, in use or kept for the next call
};
Stats stats();

// Calls given no Workspace take their scratch from jitbmm's pool on the device, which keeps the memory for the next
// call instead of mapping it again. This gives back to the driver all of it that no call is using (every device).
void release_pool_memory();

// Waits until every build this process runs in the background has ended, built or failed: the chosen variants or
// strategy a stand-in serves for (docs/caching-and-tuning.md, "First calls"); returns at once where none runs. For a
// program that removes the cache directory it used before it ends (a build writes there), or that times settled
// kernels. The process waits for them at its end in any case. std::logic_error from a background build's own thread.
void wait_for_builds();

} // namespace jitbmm
