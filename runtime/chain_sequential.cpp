#include "runtime/chain_sequential.hpp"

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "generator/chain_source.hpp"
#include "generator/launch_grid.hpp"
#include "runtime/hmm_sums.hpp"
#include "runtime/launch.hpp"
#include "runtime/scratch.hpp"
#include "runtime/tuner/build_ahead.hpp"
#include "support/checked_size.hpp"

namespace jitbmm {

namespace {

// A spec's units, emitted once a process: a plan made again skips generating and hashing their sources.
std::shared_ptr<const std::vector<GeneratedKernel>> units_of(const ChainSpec& spec) {
  static std::mutex mutex;
  static auto* emitted = new std::map<std::string, std::shared_ptr<const std::vector<GeneratedKernel>>>();
  const std::string key = to_string(spec) + " shared_limit=" + std::to_string(spec.shared_limit);
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (const auto it = emitted->find(key); it != emitted->end()) return it->second;
  }
  auto units = std::make_shared<const std::vector<GeneratedKernel>>(emit_chain_units(spec));
  std::lock_guard<std::mutex> lock(mutex);
  return emitted->emplace(key, std::move(units)).first->second;
}

} // namespace

SequentialChain::SequentialChain(const ChainProblem& problem, const ChainSpec& spec,
                                 std::shared_ptr<const DeviceInfo> device, StrategyBuild build)
    : problem_(problem), spec_(spec), device_(std::move(device)) {
  if (problem.form == ChainForm::hmm) sums_ = std::make_unique<const HmmSums>(problem, device_, nullptr); // sizes
  if (problem.B == 0 || build == StrategyBuild::sizes) return;
  // Every unit a first forward and backward load, built at once.
  const QuickBuild quick_build(build == StrategyBuild::quick);
  const std::shared_ptr<const std::vector<GeneratedKernel>> emitted = units_of(spec_);
  const std::vector<GeneratedKernel>& units = *emitted;
  build_ahead(*device_, units);
  forward_ = load_generated(*device_, units.front());
  if (problem.semiring == Semiring::log) saving_ = load_generated(*device_, units[1]);
  backward_ = load_generated(*device_, units.back());
  if (problem.form == ChainForm::hmm) sums_ = std::make_unique<const HmmSums>(problem, device_, backward_);
}

std::string SequentialChain::kernel_name() const { return forward_ ? forward_->generated.name : ""; }

std::size_t SequentialChain::workspace_bytes(bool, bool with_path) const {
  const ChainProblem& p = problem_;
  if (!with_path || p.semiring != Semiring::max_plus) return 0;
  return ScratchSize().add(std::size_t(checked_product({p.B, p.T, p.C}, "chain: B*T*C")) * 2, "workspace").bytes();
}

std::size_t SequentialChain::backward_workspace_bytes(bool transitions) const {
  return sums_ ? sums_->workspace_bytes(transitions) : 0;
}

void SequentialChain::launch(const LoadedKernel& unit, const char* suffix, unsigned blocks, unsigned threads,
                             jb::ChainParams params, CUstream stream, unsigned dynamic_shared) const {
  const unsigned grid[3] = {blocks, 1, 1}, block[3] = {threads, 1, 1};
  void* args[] = {&params};
  jitbmm::launch(unit, suffix, grid, block, args, stream, dynamic_shared);
}

void SequentialChain::forward(jb::ChainParams params, void* saved, Stream stream, const Workspace& workspace) const {
  const ChainProblem& p = problem_;
  if (!forward_) throw_sizes_only(name());
  const std::size_t back_bytes = workspace_bytes(saved != nullptr, params.path != nullptr);
  ScopedContext scope(device_->context);
  const auto cu_stream = reinterpret_cast<CUstream>(stream);
  Scratch scratch(*device_, workspace, back_bytes, cu_stream);
  params.back = static_cast<unsigned short*>(scratch.take(back_bytes));
  // A cluster of blocks per sequence; with saved, the saving forward: clusters B to 2B − 1 compute the backward
  // messages alongside.
  const ChainSpec& sp = spec_;
  if (saved)
    launch(*saving_, "", unsigned(2 * p.B * sp.saving.cluster), unsigned(sp.saving.threads), params, cu_stream,
           sp.saving_dynamic_bytes());
  else
    launch(*forward_, "", unsigned(p.B * sp.forward.cluster), unsigned(sp.forward.threads), params, cu_stream,
           sp.dynamic_bytes(sp.forward));
}

void SequentialChain::backward(jb::ChainParams params, const void*, Stream stream, const Workspace& workspace) const {
  if (!backward_) throw_sizes_only(name());
  if (problem_.form == ChainForm::hmm) {
    sums_->run(params, stream, workspace);
    return;
  }
  ScopedContext scope(device_->context);
  // A block per step, grid-strided beyond what one launch should hold.
  const int64_t steps = problem_.B * (problem_.T - 1);
  launch(*backward_, "", grid_stride_blocks(steps, 1), unsigned(spec_.backward_threads), params,
         reinterpret_cast<CUstream>(stream));
}

} // namespace jitbmm
