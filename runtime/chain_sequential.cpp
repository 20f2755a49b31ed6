#include "runtime/chain_sequential.hpp"

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "generator/chain_source.hpp"
#include "generator/launch_grid.hpp"
#include "runtime/launch.hpp"
#include "runtime/scratch.hpp"
#include "runtime/tuner/build_ahead.hpp"
#include "support/checked_size.hpp"
#include "templates/chain/edge_params.cuh"

namespace jitbmm {

// How the HMM backward sums the transitions' gradient: `groups` tables (one per sequence when batched), each over
// `steps` steps cut into `chunks` ranges of `chunk` steps, one "_edges" block per range and tile of `rows` rows.
// Enough ranges to give every SM a few blocks, as long as their partial sums take at most half the tables' bytes
// (the backward's scratch counts in its peak memory, which the saved messages and the emissions' gradient already
// make three times the emissions); with one range a block's sums are the gradient itself, otherwise partial sums
// that "_reduce" adds in order.
struct SequentialChain::EdgeSplit {
  int64_t groups = 1, steps = 0, chunks = 1, chunk = 1, tiles = 1;
  std::size_t partial_bytes(const ChainProblem& p) const {
    if (chunks == 1) return 0;
    const auto n = std::size_t(checked_product({groups, chunks, p.C, p.C}, "chain: partial sums"));
    return ScratchSize().add(n * std::size_t(dtype_info(p.dtype).acc_bytes), "workspace").bytes();
  }
};

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
  if (problem.B == 0 || build == StrategyBuild::sizes) return;
  // Every unit a first forward and backward load, built at once.
  const QuickBuild quick_build(build == StrategyBuild::quick);
  const std::shared_ptr<const std::vector<GeneratedKernel>> emitted = units_of(spec_);
  const std::vector<GeneratedKernel>& units = *emitted;
  build_ahead(*device_, units);
  forward_ = load_generated(*device_, units.front());
  if (problem.semiring == Semiring::log) saving_ = load_generated(*device_, units[1]);
  backward_ = load_generated(*device_, units.back());
}

std::string SequentialChain::kernel_name() const { return forward_ ? forward_->generated.name : ""; }

std::size_t SequentialChain::workspace_bytes(bool, bool with_path) const {
  const ChainProblem& p = problem_;
  if (!with_path || p.semiring != Semiring::max_plus) return 0;
  return ScratchSize().add(std::size_t(checked_product({p.B, p.T, p.C}, "chain: B*T*C")) * 2, "workspace").bytes();
}

std::size_t SequentialChain::backward_workspace_bytes(bool transitions) const {
  if (problem_.form != ChainForm::hmm || !transitions) return 0;
  return edge_split().partial_bytes(problem_);
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
    hmm_backward(params, stream, workspace);
    return;
  }
  ScopedContext scope(device_->context);
  // A block per step, grid-strided beyond what one launch should hold.
  const int64_t steps = problem_.B * (problem_.T - 1);
  launch(*backward_, "", grid_stride_blocks(steps, 1), unsigned(spec_.backward_threads), params,
         reinterpret_cast<CUstream>(stream));
}

SequentialChain::EdgeSplit SequentialChain::edge_split() const {
  const ChainProblem& p = problem_;
  EdgeSplit e;
  e.groups = p.batched_transitions ? p.B : 1;
  e.steps = p.batched_transitions ? p.T - 1 : p.B * (p.T - 1);
  e.tiles = (p.C + spec_.edge_rows() - 1) / spec_.edge_rows();
  // One wave of blocks, as many an SM as the entry is compiled for and its shared memory lets the SM hold: a second,
  // partial wave's ranges of steps would each stage and set up as much as a whole range for a fraction of its sums.
  const int acc = dtype_info(p.dtype).acc_bytes, threads = spec_.edge_threads();
  const unsigned shared = jb::edge_shape(int(p.C), threads, spec_.edge_rows(), acc, p.semiring == Semiring::log).shared;
  int per_sm = jb::edge_blocks_per_sm(threads, acc);
  // The driver reserves 1 KiB of each block's shared memory; an unknown size (0) leaves the count as compiled.
  if (device_->max_shared_per_sm > 0) per_sm = std::min<int>(per_sm, device_->max_shared_per_sm / (shared + 1024));
  const int64_t blocks = int64_t(std::max(1, per_sm)) * std::max(1, device_->sm_count);
  const int64_t per_chunk = std::max<int64_t>(1, e.groups * e.tiles); // blocks per range of steps (B may be 0)
  const int64_t wanted = std::max<int64_t>(1, (blocks + per_chunk - 1) / per_chunk);
  // A range of fewer than 8 steps would stage more than it sums. Each table holds at most 2^62 bytes
  // (check_chain_problem), so their halves add up without overflow.
  const int64_t size = dtype_info(p.dtype).size_bytes;
  const int64_t half_tables =
      p.B * p.T * p.C * size / 2 + e.groups * p.C * p.C * size / 2 + (p.batched_initial ? p.B : 1) * p.C * size / 2;
  const int64_t room = half_tables / std::max<int64_t>(1, e.groups * p.C * p.C) / dtype_info(p.dtype).acc_bytes;
  e.chunks = std::clamp<int64_t>(std::min({wanted, e.steps / 8, room}), 1, int64_t(1) << 20);
  e.chunk = std::max<int64_t>(1, (e.steps + e.chunks - 1) / e.chunks);
  e.chunks = std::max<int64_t>(1, (e.steps + e.chunk - 1) / e.chunk);
  return e;
}

// The HMM form's gradients: the state marginals (the backward unit's main entry), the transitions' in ranges of
// steps ("_edges") and their sums with the initial table's ("_reduce").
void SequentialChain::hmm_backward(jb::ChainParams params, Stream stream, const Workspace& workspace) const {
  const ChainProblem& p = problem_;
  const EdgeSplit split = edge_split();
  const std::size_t need = backward_workspace_bytes(params.grad != nullptr);
  params.chunk = split.chunk;
  params.chunks = split.chunks;
  ScopedContext scope(device_->context);
  const auto cu_stream = reinterpret_cast<CUstream>(stream);
  // Grid-strided launches of `threads` a block: enough blocks to fill the GPU a few times over.
  auto strided = [&](int64_t items, int threads) {
    const int64_t blocks = (items + threads - 1) / threads;
    return unsigned(std::clamp<int64_t>(blocks, 1, 4096 / threads * int64_t(std::max(1, device_->sm_count))));
  };
  if (params.grad_emissions)
    launch(*backward_, "", strided(jb::hmm_node_threads(p.B, p.T, int(p.C)), kHmmNodeThreads),
           unsigned(kHmmNodeThreads), params, cu_stream);
  Scratch scratch(*device_, workspace, need, cu_stream);
  params.partials = scratch.take(need);
  if (params.grad) {
    const unsigned grid[3] = {unsigned(split.groups * split.chunks), unsigned(split.tiles), 1};
    const unsigned block[3] = {unsigned(spec_.edge_threads()), 1, 1};
    void* args[] = {&params};
    jitbmm::launch(*backward_, "_edges", grid, block, args, cu_stream);
  }
  const int64_t reduced =
      jb::hmm_reduce_threads(params.grad && split.chunks > 1 ? split.groups * p.C * p.C : 0, split.chunks,
                             params.grad_initial ? (p.batched_initial ? p.B : 1) * p.C : 0);
  if (reduced > 0)
    launch(*backward_, "_reduce", strided(reduced, jb::kHmmReduceThreads), unsigned(jb::kHmmReduceThreads), params,
           cu_stream);
}

} // namespace jitbmm
