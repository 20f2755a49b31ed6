// A chain plan's stand-in (chain_stand_in.hpp).
#include "runtime/chain_stand_in.hpp"

#include <algorithm>
#include <chrono>
#include <iterator>
#include <map>
#include <sstream>
#include <utility>
#include <vector>

#include "runtime/tuner/choose.hpp"
#include "runtime/tuner/policy.hpp"
#include "support/log.hpp"

namespace jitbmm {

namespace {

// The problem as the stand-ins are shared: every field that shapes a plan.
std::string problem_key(const ChainProblem& p) {
  std::ostringstream key;
  key << int(p.semiring) << ' ' << int(p.dtype) << ' ' << p.B << ' ' << p.T << ' ' << p.C << ' ' << int(p.form) << ' '
      << p.with_lengths << p.batched_transitions << p.batched_initial;
  for (const int64_t s : p.strides) key << ' ' << s;
  for (const int64_t s : p.emission_strides) key << ' ' << s;
  for (const int64_t s : p.transition_strides) key << ' ' << s;
  for (const int64_t s : p.initial_strides) key << ' ' << s;
  return key.str();
}

std::string describe(const ChainProblem& p) {
  return std::string("chain ") + semiring_info(p.semiring).name + ' ' + dtype_info(p.dtype).name + ' ' +
         (p.form == ChainForm::hmm ? "hmm " : "crf ") + std::to_string(p.B) + "x" + std::to_string(p.T) + "x" +
         std::to_string(p.C);
}

// The stand-ins of the process, one a problem and context (by its id, DeviceInfo::context_id), each for as long as a
// plan holds it: a problem whose plans are all dropped frees its stand-in and its chosen strategy (their side streams
// and buffers) as a plan that never stood in is freed, so that problems that come and go (lengths that vary) leave
// nothing behind. A plan of the problem made after starts anew, its kernels found in memory. The table itself is
// never destroyed: a build may reach it at the process's end.
struct Registry {
  std::mutex mutex;
  std::map<std::pair<unsigned long long, std::string>, std::weak_ptr<const StandInChain>> stand_ins;
};

Registry& registry() {
  static auto* r = new Registry();
  return *r;
}

// A workspace for a call whose strategy needs need() bytes: the caller's, or jitbmm's pool where the caller's (sized
// for the other strategy) is smaller. None given: the pool's, as ever.
template <class Need> Workspace fitted(const Workspace& caller, Need need) {
  return !caller.ptr && !caller.bytes ? caller : caller.bytes >= need() ? caller : Workspace{};
}

} // namespace

StandInChain::StandInChain(std::shared_ptr<const ChainStrategy> stand_in, Chosen chosen,
                           std::shared_ptr<const ChosenSizes> chosen_sizes, ChainWorkspaces announced, std::string what,
                           bool saved_alike)
    : stand_in_(std::move(stand_in)), chosen_(std::move(chosen), what), chosen_sizes_(std::move(chosen_sizes)),
      announced_(announced), what_(std::move(what)), saved_alike_(saved_alike) {}

bool StandInChain::settled() const { return chosen_.ended(); }

const ChainStrategy* StandInChain::chosen(bool wait) const {
  const ChainStrategy* c = chosen_.get(wait);
  // Its sizes were written before its build was ready.
  if (!c || (chosen_sizes_->known && chosen_sizes_->sizes.within(announced_))) return c;
  std::call_once(too_large_, [&] {
    log_message(LogLevel::warn,
                what_ + ": its chosen strategy " +
                    (chosen_sizes_->known ? "takes more workspace than its plan announced"
                                          : "could not say its workspace (" + chosen_sizes_->why + ")") +
                    "; its calls keep running its stand-in");
  });
  return nullptr;
}

const ChainStrategy& StandInChain::current() const {
  const ChainStrategy* c = chosen(false);
  return c ? *c : *stand_in_;
}

const ChainStrategy* StandInChain::for_call(Stream stream) const {
  if (const ChainStrategy* c = chosen(false)) return c;
  return chosen(stream_is_capturing(reinterpret_cast<CUstream>(stream)));
}

std::size_t StandInChain::workspace_bytes(bool with_saved, bool with_path) const {
  return settled() ? current().workspace_bytes(with_saved, with_path) : announced_.forward(with_saved, with_path);
}

std::size_t StandInChain::backward_workspace_bytes(bool transitions) const {
  return settled() ? current().backward_workspace_bytes(transitions) : announced_.backward(transitions);
}

std::size_t StandInChain::least_workspace_bytes(bool with_saved, bool with_path) const {
  const std::size_t own = stand_in_->workspace_bytes(with_saved, with_path);
  const ChainStrategy* c = chosen(false);
  return c ? std::min(own, c->workspace_bytes(with_saved, with_path)) : own;
}

std::size_t StandInChain::least_backward_workspace_bytes(bool transitions) const {
  const std::size_t own = stand_in_->backward_workspace_bytes(transitions);
  const ChainStrategy* c = chosen(false);
  return c ? std::min(own, c->backward_workspace_bytes(transitions)) : own;
}

void StandInChain::forward(jb::ChainParams params, void* saved, Stream stream, const Workspace& workspace) const {
  const ChainStrategy* c = for_call(stream);
  if (!c && saved && !saved_alike_) c = chosen(true); // its backward reads the chosen strategy's layout alone
  const ChainStrategy& runs = c ? *c : *stand_in_;
  // Recorded before the launches: a backward that follows on the host reads what this forward will have written.
  // Once settled with no buffer of the stand-in's left, a call takes no lock.
  if (saved && (!c || stand_in_saved_count_.load(std::memory_order_acquire) > 0)) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (c)
      stand_in_saved_.erase(saved);
    else
      stand_in_saved_.insert(saved);
    stand_in_saved_count_.store(stand_in_saved_.size(), std::memory_order_release);
  }
  runs.forward(params, saved, stream,
               fitted(workspace, [&] { return runs.workspace_bytes(saved != nullptr, params.path != nullptr); }));
}

void StandInChain::backward(jb::ChainParams params, const void* saved, Stream stream,
                            const Workspace& workspace) const {
  bool stand_in_wrote = false;
  if (saved && stand_in_saved_count_.load(std::memory_order_acquire) > 0) {
    std::lock_guard<std::mutex> lock(mutex_);
    stand_in_wrote = stand_in_saved_.count(saved) > 0;
  }
  const ChainStrategy* c = stand_in_wrote ? nullptr : for_call(stream);
  const ChainStrategy& runs = c ? *c : *stand_in_;
  runs.backward(params, saved, stream,
                fitted(workspace, [&] { return runs.backward_workspace_bytes(params.grad != nullptr); }));
}

std::shared_ptr<const ChainStrategy>
chosen_or_stand_in(const ChainProblem& problem, const std::shared_ptr<const DeviceInfo>& device,
                   const MakeStrategy& make_chosen, const MakeStrategy& make_stand_in, const MakeStrategy& make_sizes,
                   bool saved_alike) {
  Registry& r = registry();
  // A stand-in made before choices were forgotten (import_choices) holds the products chosen then: made anew after.
  const auto key =
      std::make_pair(device->context_id, problem_key(problem) + "\n" + std::to_string(choices_generation()));
  // The problem's stand-in, where a thread has made one: looked for again before the chosen strategy is returned, so
  // that a plan made while another thread makes the stand-in runs what that runs (a backward then reads `saved` as
  // the forward that wrote it wrote it, whichever of the two plans each came through).
  const auto registered = [&]() -> std::shared_ptr<const ChainStrategy> {
    std::lock_guard<std::mutex> lock(r.mutex);
    const auto it = r.stand_ins.find(key);
    return it != r.stand_ins.end() ? it->second.lock() : nullptr;
  };
  if (auto s = registered()) return s;
  auto chosen_sizes = std::make_shared<ChosenSizes>();
  StandInChain::Chosen chosen = start_background_build<std::shared_ptr<const ChainStrategy>>(
      device, [make_chosen, chosen_sizes, problem]() -> std::shared_ptr<const ChainStrategy> {
        std::shared_ptr<const ChainStrategy> built = make_chosen();
        try {                                 // a failure here is its calls' to report, where no stand-in runs them
          const TuningHold hold(true, false); // the products its sizes plan, as a chain plan's calls do: none tuned
          chosen_sizes->sizes = ChainWorkspaces(*built, problem);
          chosen_sizes->known = true;
        } catch (const std::exception& e) {
          chosen_sizes->why = e.what();
        }
        return built;
      });
  if (chosen.wait_for(kChosenWait) == std::future_status::ready) { // its error, if any
    auto s = registered(); // made by another thread meanwhile
    return s ? s : chosen.get();
  }
  std::shared_ptr<const ChainStrategy> stand_in;
  ChainWorkspaces announced;
  try {
    stand_in = make_stand_in();
    // The chosen strategy's sizes too: a plan that could not say them would run its stand-in for good.
    announced = ChainWorkspaces(*stand_in, problem).larger(ChainWorkspaces(*make_sizes(), problem));
  } catch (const std::exception& e) {
    if (log_enabled(LogLevel::debug))
      log_message(LogLevel::debug, describe(problem) + ": no stand-in (" + e.what() + "); waiting for its kernels");
    return chosen.get();
  }
  if (chosen.wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
    auto s = registered();
    return s ? s : chosen.get();
  }
  if (log_enabled(LogLevel::debug))
    log_message(LogLevel::debug, describe(problem) + ": the " + stand_in->name() +
                                     " strategy stands in while its chosen strategy is built");
  auto made = std::make_shared<const StandInChain>(std::move(stand_in), std::move(chosen), std::move(chosen_sizes),
                                                   announced, describe(problem), saved_alike);
  std::lock_guard<std::mutex> lock(r.mutex);
  if (const auto it = r.stand_ins.find(key); it != r.stand_ins.end())
    if (auto first = it->second.lock()) return first;           // another thread's, where it made one first
  for (auto it = r.stand_ins.begin(); it != r.stand_ins.end();) // those of problems whose plans are gone
    it = it->second.expired() ? r.stand_ins.erase(it) : std::next(it);
  r.stand_ins[key] = made;
  wait_for_builds_at_exit();
  return made;
}

} // namespace jitbmm
