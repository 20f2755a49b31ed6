// A chain plan's stand-in (docs/caching-and-tuning.md, "First calls"): where the strategy ChainPlan::get chooses
// would make a first call wait for its kernels to compile (seconds, with empty caches), the plan's calls run a
// strategy of quick builds (runtime/jit.hpp) that compile in well under a second (runtime/chain_plan.cpp says which)
// until the chosen strategy is built in the background (runtime/background_build.hpp); from then on they run the
// chosen strategy. Both compute
// the same chain to the chains' accuracy (Viterbi paths alike, ties to the smallest state), so a call's result never
// depends on which ran it beyond rounding.
//
// Until it settles, a plan announces the larger of the two strategies' workspaces, the chosen one's as the sizes of
// its strategy say before it is built (StrategyBuild::sizes), so that a caller may size a workspace once, when it
// first asks: every call given that much runs in it, whichever strategy runs it. A chosen strategy that turns out to
// take more than was announced, or that cannot say what it takes, never serves (the stand-in does for good, with a
// warning); one whose sizes are not known before it is built has no stand-in (the plan waits for it).
//
// A forward's `saved` holds what its strategy's backward reads. Where the two strategies lay it out alike (the
// sequential kernels and their quick builds; the stepped strategy's forms), a backward given `saved` that the stand-in
// wrote runs the stand-in's backward, whenever it comes, known by the buffer's address. Where they do not (the
// chunked strategy's log, whose stand-in is the sequential kernels), a forward that saves waits for the chosen
// strategy: a copy of `saved` (offloaded to the host and back, say) has another address, and its backward would read
// one layout as the other. The plans of one problem on one device that live at once share their stand-in, so that
// this holds between them too; it goes with the last of them. Work captured into a CUDA graph waits for the chosen
// strategy too: a graph replays what it captured for good.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "jitbmm/chain.hpp"
#include "runtime/background_build.hpp"
#include "runtime/chain_strategy.hpp"
#include "runtime/device.hpp"

namespace jitbmm {

using MakeStrategy = std::function<std::shared_ptr<const ChainStrategy>()>;

// The chosen strategy's workspaces, as its build found them once it was built (or why it could not).
struct ChosenSizes {
  ChainWorkspaces sizes;
  bool known = false;
  std::string why;
};

class StandInChain final : public ChainStrategy {
public:
  using Chosen = std::shared_future<std::shared_ptr<const ChainStrategy>>;
  // `chosen_sizes`: the chosen strategy's workspaces, written by its build before `chosen` is ready; `announced`
  // what the plan says its calls take until it settles. `what` names the problem in the log's lines.
  // `saved_alike`: whether the stand-in lays out `saved` as the chosen strategy does.
  StandInChain(std::shared_ptr<const ChainStrategy> stand_in, Chosen chosen,
               std::shared_ptr<const ChosenSizes> chosen_sizes, ChainWorkspaces announced, std::string what,
               bool saved_alike);

  // The strategy the plan's calls run now, and what it says of itself.
  const char* name() const override { return current().name(); }
  std::string kernel_name() const override { return current().kernel_name(); }
  int64_t chunk() const override { return current().chunk(); }
  // The announced workspaces until the plan settles; then what runs the calls takes.
  std::size_t workspace_bytes(bool with_saved, bool with_path) const override;
  std::size_t backward_workspace_bytes(bool transitions) const override;
  // A workspace of at least the smaller of the two strategies' needs is taken; where the strategy a call runs needs
  // more than it is given (sized before the plan settled), that call's scratch comes from jitbmm's pool.
  std::size_t least_workspace_bytes(bool with_saved, bool with_path) const override;
  std::size_t least_backward_workspace_bytes(bool transitions) const override;
  void forward(jb::ChainParams params, void* saved, Stream stream, const Workspace& workspace) const override;
  void backward(jb::ChainParams params, const void* saved, Stream stream, const Workspace& workspace) const override;
  // Once the chosen strategy is built (or has failed to build, or takes more than was announced: the stand-in then
  // serves for good, with a warning).
  bool settled() const override;

private:
  const ChainStrategy& current() const;
  // The chosen strategy where built (waiting for its build with `wait`) and within what was announced, else null.
  const ChainStrategy* chosen(bool wait) const;
  // The chosen strategy for a call on `stream` (waiting for it where the stream captures a graph), else null.
  const ChainStrategy* for_call(Stream stream) const;

  std::shared_ptr<const ChainStrategy> stand_in_;
  PendingBuild<ChainStrategy> chosen_;
  std::shared_ptr<const ChosenSizes> chosen_sizes_;
  ChainWorkspaces announced_;
  std::string what_;
  bool saved_alike_;
  mutable std::once_flag too_large_; // the warning that the chosen strategy takes more than was announced
  mutable std::mutex mutex_; // guards stand_in_saved_
  mutable std::set<const void*> stand_in_saved_; // the `saved` buffers a stand-in forward wrote last
  mutable std::atomic<std::size_t> stand_in_saved_count_{0}; // their number, read without the lock
};

// The strategy of a plan of `problem` on `device`, whose chosen strategy make_chosen builds: its stand-in where
// one of this problem is already in the process; else make_chosen's strategy where it is built within a short wait;
// else a new stand-in (make_stand_in's strategy) while make_chosen runs in the background, announcing the larger of
// its workspaces and those of make_sizes' strategy (the chosen one made for its sizes alone); else, where
// make_stand_in fails or the chosen strategy is built first, the chosen one. make_chosen's error, where it fails
// before a stand-in is made, is thrown here. `saved_alike`: whether the two strategies lay out `saved` alike.
std::shared_ptr<const ChainStrategy> chosen_or_stand_in(const ChainProblem& problem,
                                                        const std::shared_ptr<const DeviceInfo>& device,
                                                        const MakeStrategy& make_chosen,
                                                        const MakeStrategy& make_stand_in,
                                                        const MakeStrategy& make_sizes, bool saved_alike);

} // namespace jitbmm
