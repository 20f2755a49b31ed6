#include "runtime/chain_chunked.hpp"

#include <algorithm>
#include <stdexcept>
#include <utility>
#include <vector>

#include "generator/chain_source.hpp"
#include "jitbmm/plan.hpp"
#include "runtime/driver_api.hpp"
#include "runtime/launch.hpp"
#include "runtime/product_workspace_bound.hpp"
#include "runtime/scratch.hpp"
#include "runtime/tuner/build_ahead.hpp"
#include "runtime/tuner/choose.hpp"
#include "runtime/tuner/policy.hpp"
#include "support/checked_size.hpp"
#include "templates/chain/chunk_params.cuh"

namespace jitbmm {

namespace {

// The chain of `chunks` chunks' products (chain_of_chunks).
ChainProblem chain_over(const ChainProblem& p, int64_t chunks) {
  ChainProblem top;
  top.semiring = p.semiring;
  top.dtype = chain_output_dtype(p);
  top.B = p.B;
  top.T = chunks + 1;
  top.C = p.C;
  return top;
}

int64_t chunks_of(const ChainProblem& p, int64_t chunk) { return (p.T - 1 + chunk - 1) / chunk; }

// The chunks' products sit in `saved` after the chain of chunks' own messages, aligned for a 16-byte load.
std::size_t aligned(std::size_t bytes) { return (bytes + 15) / 16 * 16; }

std::size_t products_bytes(const ChainProblem& p, int64_t chunks) {
  return std::size_t(checked_product({p.B, chunks, p.C, p.C, dtype_info(p.dtype).acc_bytes}, "chain: chunks"));
}

} // namespace

std::string chunk_unfit(const ChainProblem& p, int64_t chunk) {
  check_chain_problem(p);
  if (chunk < 2 || chunk > kMaxChainChunk || (chunk & (chunk - 1)) != 0)
    return "chunk: must be a power of two in [2, " + std::to_string(kMaxChainChunk) + "] (got " +
           std::to_string(chunk) + ")";
  if (p.T < 2) return "chunk: a chain of one position has no step to cut";
  if (p.C > kMaxSequentialChainStates)
    return "chunk: chains of at most " + std::to_string(kMaxSequentialChainStates) + " states are computed in chunks";
  int64_t whole = 2; // one chunk of the whole chain
  while (whole < p.T - 1) whole *= 2;
  if (chunk > whole)
    return "chunk: longer than one chunk of the whole chain (" + std::to_string(whole) + " steps for T = " +
           std::to_string(p.T) + ")";
  if (p.semiring != Semiring::log) return {}; // max_plus keeps its chunks' products in scratch
  const int64_t chunks = chunks_of(p, chunk);
  const std::size_t need = aligned(chain_saved_bytes(chain_over(p, chunks))) + products_bytes(p, chunks);
  if (need > chain_saved_bytes(p))
    return "chunk: the products of chunks of " + std::to_string(chunk) + " steps (" + std::to_string(need) +
           " bytes) do not fit in the forward's saved (" + std::to_string(chain_saved_bytes(p)) +
           " bytes): take longer chunks";
  return {};
}

ChainProblem chain_of_chunks(const ChainProblem& p, int64_t chunk) {
  if (const std::string why = chunk_unfit(p, chunk); !why.empty()) throw std::invalid_argument(why);
  return chain_over(p, chunks_of(p, chunk));
}

namespace {

// `plan` after checking that it computes the chain of chunks `top` in the sequential kernels: the forward reads its
// saved messages and the chunks' products at fixed places in `saved`, and its scratch counts no chunks of its own.
ChainPlan checked_chain_of_chunks(ChainPlan plan, const ChainProblem& top) {
  const ChainProblem& q = plan.problem();
  int64_t want[4], have[4];
  chain_strides(top, want);
  chain_strides(q, have);
  const bool same = q.semiring == top.semiring && q.dtype == top.dtype && q.B == top.B && q.T == top.T &&
                    q.C == top.C && q.form == top.form && q.with_lengths == top.with_lengths &&
                    std::equal(want, want + 4, have);
  if (!same || plan.chunk() != 0)
    throw std::invalid_argument("chain of chunks: the plan given is not of the chain of chunks (B = " +
                                std::to_string(top.B) + ", T = " + std::to_string(top.T) + ", C = " +
                                std::to_string(top.C) + ", contiguous, in the sequential kernels)");
  return plan;
}

} // namespace

ChunkedChain::ChunkedChain(const ChainProblem& problem, int64_t chunk, std::optional<ChainPlan> chain_of_chunks_plan,
                           std::shared_ptr<const DeviceInfo> device, bool tune_products,
                           std::shared_ptr<const ChainStrategy> sequential, StrategyBuild build)
    : problem_(problem), L_(chunk), tune_products_(tune_products), sizes_only_(build == StrategyBuild::sizes),
      device_(std::move(device)), sequential_(std::move(sequential)) {
  if (const std::string why = chunk_unfit(problem, chunk); !why.empty()) throw std::invalid_argument(why);
  const bool log = problem.semiring == Semiring::log;
  if (!sizes_only_ && log != chain_of_chunks_plan.has_value())
    throw std::invalid_argument(log ? "chain of chunks: a log chain in chunks needs the plan of its chain of chunks"
                                    : "chain of chunks: a max_plus chain in chunks runs its own");
  if (log && !sizes_only_)
    top_ = checked_chain_of_chunks(std::move(*chain_of_chunks_plan), chain_of_chunks(problem, chunk));
  const ChunkLayout layout(problem, chunk, *device_);
  levels_ = layout.levels, chunks_ = layout.chunks, group_ = layout.group;
  if (problem.B > 0 && !sizes_only_) {
    std::vector<GeneratedKernel> units;
    std::vector<KernelSpec> specs;
    chunked_kernels_ahead(problem, chunk, *device_, tune_products, units, specs);
    build_ahead(*device_, units, specs);
    kernel_ = load_generated(*device_, units.front());
  }
}

ChunkLayout::ChunkLayout(const ChainProblem& problem, int64_t chunk, const DeviceInfo& device)
    : L(chunk), chunks(chunks_of(problem, chunk)) {
  while ((int64_t(1) << levels) < L) ++levels;
  // A pass of the tree takes every chunk it can within four times the inputs' size in the accumulator type (at least
  // 256 MiB, at most an eighth of the device's memory, so that a chain whose inputs fill much of it still has room
  // for its scratch): its levels, each half the one below, take 1.5 L matrices a chunk, log's backward two levels'
  // gradients more (3.5 L in all; the HMM form's one matrix a chunk more, its steps' sum, counted in
  // backward_workspace_bytes), so that is all of them at once; fewer passes launch fewer, larger products.
  const int acc = dtype_info(problem.dtype).acc_bytes;
  const bool log = problem.semiring == Semiring::log;
  const auto per_chunk = checked_product({problem.C, problem.C, acc}, "chain: chunks") * ((log ? 7 : 3) * L / 2) +
                         2 * L * acc;
  const int64_t input = problem.form == ChainForm::crf
                            ? checked_product({problem.B, problem.T - 1, problem.C, problem.C, acc}, "chain: potentials")
                            : checked_product({problem.B, problem.T + problem.C, problem.C, acc}, "chain: tables");
  const int64_t floor = int64_t(256) << 20;
  const int64_t ceiling = std::max<int64_t>(floor, int64_t(std::min<std::size_t>(device.total_memory, 1ull << 60) / 8));
  const int64_t budget = std::clamp<int64_t>(std::min(input, int64_t(1) << 56) * 4, floor, ceiling);
  group = std::clamp<int64_t>(budget / per_chunk, 1, std::max<int64_t>(1, problem.B * chunks));
}

std::vector<int64_t> ChunkLayout::level_batches(int64_t B) const {
  const int64_t total = B * chunks;
  std::vector<int64_t> counts{std::min(group, total)}; // the chunks of a pass: its first, and a last shorter one
  if (total > group && total % group) counts.push_back(total % group);
  std::vector<int64_t> batches;
  for (const int64_t count : counts)
    for (int64_t j = 1; j <= levels; ++j) batches.push_back((count * L) >> j);
  return batches;
}

void chunked_kernels_ahead(const ChainProblem& problem, int64_t chunk, const DeviceInfo& device, bool tune_products,
                           std::vector<GeneratedKernel>& units, std::vector<KernelSpec>& specs) {
  units.insert(units.begin(), emit_chunk_kernel(problem.semiring, problem.dtype, int(problem.C)));
  // Chosen as the calls choose them: under their hold on tuning.
  const TuningHold hold(!tune_products, false);
  const TunePolicy policy = tune_policy_from_env();
  for (const int64_t batch : ChunkLayout(problem, chunk, device).level_batches(problem.B)) {
    const Problem q = chunk_level_problem(problem, batch);
    for (const Pass pass : {Pass::forward, Pass::grad_a, Pass::grad_b}) {
      if (pass != Pass::forward && problem.semiring != Semiring::log) break; // max_plus's products have none
      for (const KernelSpec& spec : kernels_ahead(q, device, policy, pass)) specs.push_back(spec);
    }
  }
}

std::size_t ChunkedChain::matrix_bytes(int64_t matrices) const {
  return std::size_t(
      checked_product({matrices, problem_.C, problem_.C, dtype_info(problem_.dtype).acc_bytes}, "chain: chunks"));
}

std::size_t ChunkedChain::top_saved_offset() const { return aligned(chain_saved_bytes(chain_over(problem_, chunks_))); }

std::size_t ChunkedChain::workspace_bytes(bool with_saved, bool with_path) const {
  const ChainProblem& p = problem_;
  if (p.B == 0) return 0;
  const bool log = p.semiring == Semiring::log;
  const int acc = dtype_info(p.dtype).acc_bytes;
  ScratchSize s;
  if (!(log && with_saved)) s.add(matrix_bytes(p.B * chunks_), "workspace"); // the chunks' products
  s.add(std::size_t(p.B * chunks_) * sizeof(double), "workspace");           // their offsets
  s.add(matrix_bytes(group_ * L_), "workspace");                             // the even levels
  s.add(matrix_bytes(group_ * L_ / 2), "workspace");                         // the odd ones
  s.add(std::size_t(group_ * 2 * L_ * acc), "workspace");                    // every level's shifts
  s.add(product_scratch_bytes(false), "workspace");                          // the levels' products' own
  if (log) return s.bytes();
  const int64_t firsts = checked_product({p.B, chunks_ + 1}, "chain: chunks");
  s.add(std::size_t(checked_product({firsts, p.C, acc}, "chain: chunks")), "workspace"); // the chunks' first messages
  s.add(std::size_t(firsts) * sizeof(double), "workspace");                             // what they were shifted by
  if (with_path) {
    s.add(std::size_t(checked_product({p.B, p.T, p.C, 2}, "chain: B*T*C")), "workspace");    // the back-pointers
    s.add(std::size_t(checked_product({p.B, chunks_, p.C, 2}, "chain: chunks")), "workspace"); // the chunks' maps
  }
  return s.bytes();
}

void ChunkedChain::launch(const char* suffix, int64_t items, bool block_per_item, void* params, CUstream stream) const {
  // Grid-strided: a block per matrix, or a thread per element, up to enough blocks to fill the GPU a few times.
  const int64_t blocks = block_per_item ? items : (items + kChunkThreads - 1) / kChunkThreads;
  const unsigned grid[3] = {unsigned(std::clamp<int64_t>(blocks, 1, 32 * int64_t(std::max(1, device_->sm_count)))), 1,
                            1},
                 block[3] = {unsigned(kChunkThreads), 1, 1};
  void* args[] = {params};
  jitbmm::launch(*kernel_, suffix, grid, block, args, stream);
}

// A level of a tree: `batch` products of adjacent matrices (the later step's on the left: a chain step sends the
// messages through potentials[c][p] from p to c), a the odd ones and b the even ones of the level below.
SemiringBMM ChunkedChain::product(int64_t batch, Stream stream) const {
  const BuiltOnce<SemiringBMM>* kept = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    kept = &products_[batch]; // a map's entries stay where they are
  }
  return kept->get([&] { return SemiringBMM::get(chunk_level_problem(problem_, batch), stream); });
}

std::size_t ChunkedChain::product_scratch_bytes(bool backward, Stream stream) const {
  if (problem_.B == 0) return 0;
  // Found once: a plan's workspace never changes, nor do its backward passes once chosen.
  const std::size_t known = product_scratch_[backward].load(std::memory_order_relaxed);
  if (known != kUnknownBytes) return known;
  const ScopedContext scope(device_->context);
  const TuningHold hold(!tune_products_, false); // planned as the calls plan them
  std::size_t bytes = 0;
  for (const int64_t batch : ChunkLayout(problem_, L_, *device_).level_batches(problem_.B)) {
    const Problem q = chunk_level_problem(problem_, batch);
    if (sizes_only_) {
      bytes = std::max(bytes, backward ? product_backward_workspace_bound(q, *device_)
                                       : product_workspace_bound(q, *device_));
    } else {
      const SemiringBMM plan = product(batch, stream);
      bytes = std::max(bytes,
                       backward ? plan.backward_workspace_bytes(true, true, true, stream) : plan.workspace_bytes());
    }
  }
  product_scratch_[backward].store(bytes, std::memory_order_relaxed);
  return bytes;
}

Problem chunk_level_problem(const ChainProblem& problem, int64_t batch) {
  Problem q;
  q.semiring = problem.semiring;
  q.dtype = chain_output_dtype(problem);
  q.shape = Shape{batch, problem.C, problem.C, problem.C};
  q.a_strides = q.b_strides = Strides{2 * problem.C * problem.C, problem.C, 1};
  return q;
}

jb::ChunkParams ChunkedChain::params_for(const jb::ChainParams& call) const {
  jb::ChunkParams params{};
  params.potentials = call.potentials;
  params.lengths = call.lengths;
  params.B = problem_.B;
  params.T = problem_.T;
  params.L = L_;
  params.chunks = chunks_;
  params.levels = int(levels_);
  params.s_b = call.s_b;
  params.s_t = call.s_t;
  params.s_c = call.s_c;
  params.s_p = call.s_p;
  if (problem_.form == ChainForm::hmm) {
    params.emissions = call.emissions;
    params.initial = call.initial;
    params.e_b = call.e_b;
    params.e_t = call.e_t;
    params.e_c = call.e_c;
    params.i_b = call.i_b;
    params.i_c = call.i_c;
    params.batched_transitions = call.batched_transitions;
    params.batched_initial = call.batched_initial;
    // log's chain of chunks starts from messages of 0: the first messages ride in step 0.
    params.fold_first = problem_.semiring == Semiring::log;
  }
  return params;
}

void ChunkedChain::form_tree(jb::ChunkParams params, const std::vector<char*>& level, char* shifts,
                             const Workspace& products, Stream stream) const {
  const auto cu_stream = reinterpret_cast<CUstream>(stream);
  const std::size_t matrix = matrix_bytes(1);
  const int acc = dtype_info(problem_.dtype).acc_bytes;
  params.matrices = level[0];
  params.shifts = shifts;
  launch("", params.count * L_, true, &params, cu_stream);
  // Every level's shifts after those of the levels below it.
  std::size_t shift_at = std::size_t(params.count * L_ * acc);
  for (int64_t j = 1; j <= levels_; ++j) {
    const int64_t batch = (params.count * L_) >> j;
    const char* in = level[std::size_t(j - 1)];
    product(batch, stream)(in + matrix, in, level[std::size_t(j)], nullptr, stream, products);
    jb::ChunkParams n = params;
    n.matrices = level[std::size_t(j)];
    n.shifts = shifts + shift_at;
    n.count = batch;
    launch("_normalize", batch, true, &n, cu_stream);
    shift_at += std::size_t(batch * acc);
  }
}

void ChunkedChain::form_products(jb::ChunkParams params, char* products, char* even, char* odd, char* shifts,
                                 const Workspace& scratch, Stream stream) const {
  const int64_t total = problem_.B * chunks_;
  for (int64_t first = 0; first < total; first += group_) {
    params.first = first;
    params.count = std::min(group_, total - first);
    // The even levels where the steps were, the odd ones beside, the last one where the chain of chunks reads it.
    std::vector<char*> level(std::size_t(levels_ + 1));
    for (int64_t j = 0; j <= levels_; ++j) level[std::size_t(j)] = j % 2 ? odd : even;
    level[std::size_t(levels_)] = products + std::size_t(first) * matrix_bytes(1);
    form_tree(params, level, shifts, scratch, stream);
    params.shifts = shifts;
    launch("_offsets", params.count, false, &params, reinterpret_cast<CUstream>(stream));
  }
}

void ChunkedChain::forward(jb::ChainParams call, void* saved, Stream stream, const Workspace& workspace) const {
  if (sizes_only_) throw_sizes_only(name());
  if (call.alpha) {
    // The chunks have no messages of their own positions: alpha comes from the sequential kernels beside them.
    if (!sequential_) throw std::logic_error("chunked chain: alpha needs the sequential kernels");
    jb::ChainParams messages = call;
    messages.path = nullptr;
    messages.rel = nullptr;
    sequential_->forward(messages, nullptr, stream, Workspace{});
  }
  if (problem_.semiring == Semiring::log)
    log_forward(call, saved, stream, workspace);
  else
    best_path(call, stream, workspace);
}

void ChunkedChain::log_forward(const jb::ChainParams& call, void* saved, Stream stream,
                               const Workspace& workspace) const {
  const ChainProblem& p = problem_;
  if (p.B == 0) return;
  const int acc = dtype_info(p.dtype).acc_bytes;
  const auto cu_stream = reinterpret_cast<CUstream>(stream);
  ScopedContext scope(device_->context);
  const TuningHold hold(!tune_products_, false); // the products' plans, and their wide-data variants
  const std::size_t product_bytes = product_scratch_bytes(false, stream);
  Scratch scratch(*device_, workspace, workspace_bytes(saved != nullptr), cu_stream);
  char* products = saved ? static_cast<char*>(saved) + top_saved_offset()
                         : static_cast<char*>(scratch.take(matrix_bytes(p.B * chunks_)));
  auto* offsets = static_cast<double*>(scratch.take(std::size_t(p.B * chunks_) * sizeof(double)));
  char* even = static_cast<char*>(scratch.take(matrix_bytes(group_ * L_)));
  char* odd = static_cast<char*>(scratch.take(matrix_bytes(group_ * L_ / 2)));
  char* shifts = static_cast<char*>(scratch.take(std::size_t(group_ * 2 * L_ * acc)));
  const Workspace product_scratch{scratch.take(product_bytes), product_bytes};

  jb::ChunkParams params = params_for(call);
  params.offsets = offsets;
  form_products(params, products, even, odd, shifts, product_scratch, stream);
  const int64_t total = p.B * chunks_;
  // The chain of the chunks' relative products, then their offsets added to its score.
  (*top_)(products, nullptr, call.score, saved, nullptr, nullptr, stream);
  params.score = call.score;
  launch("_score", p.B, false, &params, cu_stream);
  if (saved) {
    // What the chain of chunks and the products leave of `saved`: written too, so that none of its bytes varies.
    const std::size_t used = top_saved_offset() + matrix_bytes(total), all = chain_saved_bytes(p);
    check(driver().cuMemsetD8Async(reinterpret_cast<CUdeviceptr>(saved) + used, 0, all - used, cu_stream),
          "cuMemsetD8Async");
    if (top_saved_offset() > top_->saved_bytes())
      check(driver().cuMemsetD8Async(reinterpret_cast<CUdeviceptr>(saved) + top_->saved_bytes(), 0,
                                     top_saved_offset() - top_->saved_bytes(), cu_stream),
            "cuMemsetD8Async");
  }
}

void ChunkedChain::best_path(const jb::ChainParams& call, Stream stream, const Workspace& workspace) const {
  const ChainProblem& p = problem_;
  if (p.B == 0) return;
  const bool with_path = call.path != nullptr;
  const int acc = dtype_info(p.dtype).acc_bytes;
  const auto cu_stream = reinterpret_cast<CUstream>(stream);
  ScopedContext scope(device_->context);
  const TuningHold hold(!tune_products_, false); // the products' plans
  const std::size_t product_bytes = product_scratch_bytes(false, stream);
  Scratch scratch(*device_, workspace, workspace_bytes(false, with_path), cu_stream);
  const int64_t firsts = p.B * (chunks_ + 1);
  char* products = static_cast<char*>(scratch.take(matrix_bytes(p.B * chunks_)));
  auto* offsets = static_cast<double*>(scratch.take(std::size_t(p.B * chunks_) * sizeof(double)));
  char* even = static_cast<char*>(scratch.take(matrix_bytes(group_ * L_)));
  char* odd = static_cast<char*>(scratch.take(matrix_bytes(group_ * L_ / 2)));
  char* shifts = static_cast<char*>(scratch.take(std::size_t(group_ * 2 * L_ * acc)));
  const Workspace product_scratch{scratch.take(product_bytes), product_bytes};
  void* rel = scratch.take(std::size_t(firsts * p.C * acc));
  auto* starts = static_cast<double*>(scratch.take(std::size_t(firsts) * sizeof(double)));

  jb::ChunkParams params = params_for(call);
  params.offsets = offsets;
  form_products(params, products, even, odd, shifts, product_scratch, stream);
  params.matrices = products;
  params.rel = rel;
  params.starts = starts;
  params.score = call.score;
  params.path = call.path;
  if (with_path) {
    params.back = static_cast<unsigned short*>(scratch.take(std::size_t(p.B * p.T * p.C) * 2));
    params.ends = static_cast<unsigned short*>(scratch.take(std::size_t(p.B * chunks_ * p.C) * 2));
  }
  // The chain of the chunks' products to each chunk's first messages; every chunk's steps again from them (the one
  // reaching each sequence's end alone without a path); then the path, chunk by chunk from the end, and inside them.
  launch("_chain", p.B, true, &params, cu_stream);
  launch("_rerun", with_path ? p.B * chunks_ : p.B, true, &params, cu_stream);
  if (with_path) {
    launch("_compose", p.B, false, &params, cu_stream);
    launch("_expand", std::max(p.B * chunks_, p.B * p.T), false, &params, cu_stream);
  }
}

} // namespace jitbmm
