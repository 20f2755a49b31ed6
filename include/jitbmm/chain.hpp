// Chain plans: the forward algorithm of a linear-chain CRF (an HMM is one, with potentials formed from its tables)
// over all T positions of B sequences in generated kernels, instead of T − 1 dependent products (docs/chains.md).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "jitbmm/chain_problem.hpp"
#include "jitbmm/types.hpp"

namespace jitbmm {

struct ChainSpec;              // a chain module's variant (internal: generator/chain_source.hpp)
enum class StepKernel : int; // the stepped strategy's form (internal: runtime/chain_stepped.hpp)

// A chain bound to a device and its compiled kernels. Cheap to copy (shared). Thread-safe to call.
class ChainPlan {
public:
  // For the device current on this thread. A second get() of the same problem reuses the compiled kernels. Where
  // the strategy it chooses would make the first call wait for kernels to compile, a strategy of quick builds (less
  // optimised kernels that compile in well under a second) stands in while the chosen one is built on a thread of
  // its own (docs/caching-and-tuning.md, "First calls"; $JITBMM_STAND_IN=off waits for the chosen one instead):
  // settled() says when the calls run the chosen strategy.
  static ChainPlan get(const ChainProblem& problem);

  // The forward, asynchronous on `stream`. Device pointers: potentials laid out as the problem's strides say;
  // lengths as ChainProblem::with_lengths says (else null); score[B] in chain_output_dtype (the problem's dtype, f32
  // for half types). Optional (null to skip): saved, saved_bytes() bytes (16-byte aligned) that backward() reads:
  // the messages at full precision, for log; alpha[B][T][C] in the output dtype, the forward messages
  // (alpha[b][t][c] = ⊕ over the paths that end in state c at position t; −inf from a sequence's length on);
  // path[B][T] (max_plus only, int32), the best path's states (ties: the smallest state; −1 from a sequence's
  // length on). Throws std::invalid_argument naming the argument, CudaError when a launch fails.
  void operator()(const void* potentials, const int64_t* lengths, void* score, void* saved = nullptr,
                  void* alpha = nullptr, int32_t* path = nullptr, Stream stream = nullptr,
                  const Workspace& workspace = {}) const;
  // The bytes of operator()'s `saved` (0 for max_plus, whose backward reads the path): chain_saved_bytes(problem()).
  // The forward writes every one of them: nothing the buffer held before remains. What they hold depends on the
  // plan's strategy (chunk()): a backward reads them from a forward of a plan of the same problem and strategy
  // (ChainPlan::get gives one problem the same in a process, its stand-in included: settled()).
  std::size_t saved_bytes() const;
  // Scratch bytes operator() takes: max_plus with a path keeps one back-pointer per (b, t, c); the chunked strategy
  // its tree's levels (a pass over as many chunks as fit in the larger of four times the inputs' size and 256 MiB),
  // and for max_plus its chunks' products and first messages.
  std::size_t workspace_bytes(bool with_path) const;

  // grad_potentials[b][t][c][p] (contiguous [B][T − 1][C][C], the problem's dtype) = grad_score[b] (the output
  // dtype) times the derivative of score[b] with respect to potentials[b][t][c][p]. log reads the forward's `saved`
  // and gives the edge marginals (0 for a sequence whose score is −inf, for steps past a sequence's length, and
  // wherever grad_score[b] is 0); max_plus reads the forward's path and gives its edge indicator (none for a step
  // with a state outside [0, C), as −1 past a length: any path given is read, never written out of bounds).
  // Asynchronous on `stream`. A plan of the chunked strategy (chunk() > 0) takes backward_workspace_bytes() of
  // scratch (its tree's levels and their gradients), from `workspace` or jitbmm's pool.
  void backward(const void* potentials, const int64_t* lengths, const void* saved, const int32_t* path,
                const void* grad_score, void* grad_potentials, Stream stream = nullptr,
                const Workspace& workspace = {}) const;

  // The HMM form (ChainProblem::form = hmm): the same calls with the three tables instead of the potentials. The
  // forward's alpha[b][0] is initial ⊗ emissions[b][0]. The backward writes every gradient asked for: emissions'
  // (the state marginals times grad_score for log, the best path's states for max_plus; 0 past a length),
  // transitions' (the expected or the best path's transition counts times grad_score, summed over steps, and over
  // sequences for a shared table) and initial's (the state marginals at position 0, summed likewise). A log score
  // of −inf gives zeros, one of +inf or NaN NaN (for a shared table, in the sum). It takes backward_workspace_bytes()
  // of scratch (the transitions' partial sums), from `workspace` or jitbmm's pool.
  void operator()(const HmmInputs& hmm, const int64_t* lengths, void* score, void* saved = nullptr,
                  void* alpha = nullptr, int32_t* path = nullptr, Stream stream = nullptr,
                  const Workspace& workspace = {}) const;
  void backward(const HmmInputs& hmm, const int64_t* lengths, const void* saved, const int32_t* path,
                const void* grad_score, const HmmGradients& grads, Stream stream = nullptr,
                const Workspace& workspace = {}) const;
  std::size_t backward_workspace_bytes() const;

  const ChainProblem& problem() const;
  // The strategy along T (docs/chains.md, "Strategies"): 0 for the sequential kernels, else the steps per chunk of
  // the chunked one (up to kMaxSequentialChainStates states: each chunk's product formed by a tree of products,
  // then the chain of the chunks' products; max_plus's path from every chunk's steps run again).
  int64_t chunk() const;
  // The strategy the plan runs (docs/chains.md, "Strategies"): "sequential" (a block or a cluster per sequence),
  // "chunked" (chunk() > 0) or "stepped" (every sequence a position at a time, each step a product of the bmm
  // plans: wide batches, and more than kMaxSequentialChainStates states).
  const char* strategy() const;
  // False while a stand-in runs the calls for the chosen strategy, whose kernels are being built (get()):
  // strategy(), kernel_name() and chunk() then describe the stand-in, and change once it settles. The workspace sizes
  // are meanwhile the larger of the two strategies' (docs/caching-and-tuning.md, "First calls"), and the chosen
  // one's own once settled: what they say when first asked holds for every later call. A call given less than the
  // smaller of the two strategies' needs is refused; less than the strategy it runs needs, it takes that call's
  // scratch from jitbmm's pool. A backward given `saved` that the stand-in wrote runs the stand-in's backward. Work
  // captured into a CUDA graph waits for the chosen strategy. True for every other plan.
  bool settled() const;
  // The name of the generated kernel the forward runs, as the dump and override directories name its files (the
  // sequential strategy's forward unit; its saving forward and its backward are units of their own, named in
  // docs/chains.md). Empty when B = 0 (nothing was compiled).
  std::string kernel_name() const;
  std::string device_name() const;

  struct Impl;

private:
  friend ChainPlan settled_chain_plan(const ChainProblem& problem);
  friend ChainPlan chain_plan_for(const ChainProblem& problem, const ChainSpec& spec, int64_t chunk,
                                  bool tune_products, bool stepped, StepKernel steps);
  explicit ChainPlan(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

// The bytes of a forward's `saved` for `problem`, as a plan of it takes them, without making one (no GPU, no
// compiler): what a graph tracer needs to size the buffer. Throws std::invalid_argument as ChainPlan::get does for a
// problem jitbmm does not compute.
std::size_t chain_saved_bytes(const ChainProblem& problem);

} // namespace jitbmm
