// A chain plan's strategy (docs/chains.md, "Strategies"): what a ChainPlan call runs once its arguments are checked.
// One class each, beside the others: SequentialChain (runtime/chain_sequential.hpp: a block or a cluster per
// sequence), ChunkedChain (runtime/chain_chunked.hpp: chunks' products formed by trees of products), SteppedChain
// (runtime/chain_stepped.hpp: every sequence a position at a time) and StandInChain (runtime/chain_stand_in.hpp: one
// that compiles quickly, while the chosen one's kernels are built). A plan holds one and calls it alone
// (runtime/chain_plan.cpp, runtime/chain_hmm_backward.cpp); which one a problem takes is runtime/chain_choice.cpp's.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "jitbmm/chain.hpp"
#include "templates/chain/params.cuh"

namespace jitbmm {

// How a strategy is made: its kernels built for the calls (`quick`: as quick builds, a stand-in's, runtime/jit.hpp),
// or its sizes alone: nothing built and no call taken (std::logic_error), only the scratch its calls would take, each
// product its calls would plan counted at the most its plan may take without tuning
// (runtime/product_workspace_bound.hpp). A plan announces so the workspace of its chosen strategy before that is
// built (runtime/chain_stand_in.hpp).
enum class StrategyBuild { kernels, quick, sizes };

// What a call on a strategy made for its sizes alone throws.
[[noreturn]] inline void throw_sizes_only(const char* strategy) {
  throw std::logic_error(std::string(strategy) + " chain: made for its sizes alone, it takes no call");
}

class ChainStrategy {
public:
  virtual ~ChainStrategy() = default;
  // As ChainPlan::strategy() names it.
  virtual const char* name() const = 0;
  // The forward: `params` holds the call's inputs, lengths, the pieces of `saved` (null: not asked for), path, score
  // and alpha (runtime/chain_plan.cpp attaches them, checked), and writes what they name.
  virtual void forward(jb::ChainParams params, void* saved, Stream stream, const Workspace& workspace) const = 0;
  // The backward: params as the forward's, with grad_score and the gradients asked for (the CRF form's grad; the HMM
  // form's grad_emissions, grad and grad_initial, each null where not asked for); `saved` the forward's (log).
  virtual void backward(jb::ChainParams params, const void* saved, Stream stream,
                        const Workspace& workspace) const = 0;
  // The scratch a forward takes, with or without saved and the path; a backward's, with or without the transitions'
  // gradient (the HMM form's; the CRF form's always has its potentials').
  virtual std::size_t workspace_bytes(bool with_saved, bool with_path) const = 0;
  virtual std::size_t backward_workspace_bytes(bool transitions) const = 0;
  // The least workspace a call may be given (a smaller one is refused, naming it): the above, but for a stand-in's
  // (runtime/chain_stand_in.hpp), whose need may change once it settles.
  virtual std::size_t least_workspace_bytes(bool with_saved, bool with_path) const {
    return workspace_bytes(with_saved, with_path);
  }
  virtual std::size_t least_backward_workspace_bytes(bool transitions) const {
    return backward_workspace_bytes(transitions);
  }
  // Whether what the calls run can still change: false only for a stand-in whose chosen strategy is being built.
  virtual bool settled() const { return true; }
  // ChainPlan::kernel_name() and chunk().
  virtual std::string kernel_name() const = 0;
  virtual int64_t chunk() const { return 0; }
};

// The scratch of each kind of call a strategy of `problem` takes: a forward with saved or without (log) and with the
// path or without (max_plus), a backward with the transitions' gradient or without. Each kind is asked once: asking
// for one a chain does not have (saved of a max_plus chain) would plan products its calls never run.
class ChainWorkspaces {
public:
  ChainWorkspaces() = default;
  ChainWorkspaces(const ChainStrategy& strategy, const ChainProblem& problem)
      : log_(problem.semiring == Semiring::log) {
    for (const bool other : {false, true}) {
      forward_[other] = strategy.workspace_bytes(log_ && other, !log_ && other);
      backward_[other] = strategy.backward_workspace_bytes(other);
    }
  }
  std::size_t forward(bool with_saved, bool with_path) const { return forward_[log_ ? with_saved : with_path]; }
  std::size_t backward(bool transitions) const { return backward_[transitions]; }
  // Each kind's larger of the two (of one problem).
  ChainWorkspaces larger(const ChainWorkspaces& other) const {
    ChainWorkspaces w = *this;
    for (const int i : {0, 1}) {
      w.forward_[i] = std::max(forward_[i], other.forward_[i]);
      w.backward_[i] = std::max(backward_[i], other.backward_[i]);
    }
    return w;
  }
  // Whether each kind's is at most `bound`'s.
  bool within(const ChainWorkspaces& bound) const {
    for (const int i : {0, 1})
      if (forward_[i] > bound.forward_[i] || backward_[i] > bound.backward_[i]) return false;
    return true;
  }

private:
  bool log_ = true;
  std::size_t forward_[2] = {}, backward_[2] = {}; // by saved (log) or path (max_plus); by transitions
};

} // namespace jitbmm
