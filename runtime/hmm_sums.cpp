#include "runtime/hmm_sums.hpp"

#include <algorithm>
#include <utility>

#include "generator/chain_source.hpp"
#include "jitbmm/chain.hpp"
#include "runtime/launch.hpp"
#include "runtime/scratch.hpp"
#include "support/checked_size.hpp"
#include "templates/chain/edge_params.cuh"

namespace jitbmm {

namespace {

// The spec whose backward unit the sums are: the fields that unit's text depends on (the HMM form, the semiring, the
// dtype, C); its "_edges" blocks follow from C (ChainSpec::edge_rows, edge_threads, wide_edges, mma_edges).
ChainSpec backward_spec(const ChainProblem& p) {
  ChainSpec s;
  s.semiring = p.semiring;
  s.dtype = p.dtype;
  s.form = ChainForm::hmm;
  s.C = int(p.C);
  return s;
}

} // namespace

bool hmm_sums_apply(const ChainProblem& p, std::shared_ptr<const DeviceInfo> device) {
  if (p.form != ChainForm::hmm || p.semiring != Semiring::log || p.C > 128) return false;
  return p.C <= 64 || HmmSums(p, std::move(device), nullptr).wide_whole();
}

GeneratedKernel HmmSums::unit(const ChainProblem& problem) {
  return emit_chain_kernel(backward_spec(problem), ChainUnit::backward);
}

HmmSums::HmmSums(const ChainProblem& problem, std::shared_ptr<const DeviceInfo> device,
                 std::shared_ptr<const LoadedKernel> kernel)
    : problem_(problem), device_(std::move(device)), kernel_(std::move(kernel)), split_(split()) {}

std::size_t HmmSums::Split::partial_bytes(const ChainProblem& p) const {
  if (chunks == 1) return 0;
  const auto n = std::size_t(checked_product({groups, chunks, p.C, p.C}, "chain: partial sums"));
  return ScratchSize().add(n * std::size_t(dtype_info(p.dtype).acc_bytes), "workspace").bytes();
}

// One wave of ranges of steps, as many blocks an SM as the entry is compiled for and the SM's shared memory holds (a
// second, partial wave's ranges would each stage and set up as much as a whole range for a fraction of its sums), as
// long as their partial sums take at most half the tables' bytes; where that leaves SMs without a block, as many as
// give every SM one, within what the backward's peak memory leaves of four times the tables (the saved messages or
// the best path and the gradients take the rest; half types' saved messages, in f32, alone take four times their
// emissions). More blocks an SM than one or two wait on each other more than they gain. With one range a block's
// sums are the gradient itself, otherwise partial sums that "_reduce" adds in order. The wide blocks where the unit
// has them and their wave is whole within the latter bound: fewer blocks, each forming its steps' factors for more
// sums. From 128 states the mma blocks instead where the device has TF32 mma.sync (below), their ranges bounded as
// the wide ones': their terms cost little beside staging and forming the factors.
HmmSums::Split HmmSums::split() const {
  const ChainProblem& p = problem_;
  const ChainSpec spec = backward_spec(p);
  const int64_t groups = p.batched_transitions ? p.B : 1, steps = p.batched_transitions ? p.T - 1 : p.B * (p.T - 1);
  // The most ranges: a range of fewer than 8 steps would stage more than it sums, and the partial sums' room. Each
  // table holds at most 2^62 bytes (check_chain_problem), so their halves add up without overflow, and six times them
  // below 2^58 does not overflow.
  const int64_t size = dtype_info(p.dtype).size_bytes, acc = dtype_info(p.dtype).acc_bytes;
  const int64_t half_tables =
      p.B * p.T * p.C * size / 2 + groups * p.C * p.C * size / 2 + (p.batched_initial ? p.B : 1) * p.C * size / 2;
  const int64_t kept = p.semiring == Semiring::log ? int64_t(chain_saved_bytes(p)) : p.B * p.T * 4;
  const int64_t peak = half_tables >= (int64_t(1) << 58) ? half_tables : std::max(half_tables, 6 * half_tables - kept);
  const int64_t partial = std::max<int64_t>(1, groups * p.C * p.C) * acc; // a range's sums
  const int64_t most = std::clamp<int64_t>(std::min(steps / 8, half_tables / partial), 1, int64_t(1) << 20),
                most_at_peak = std::clamp<int64_t>(std::min(steps / 8, peak / partial), 1, int64_t(1) << 20);
  const int64_t sms = std::max(1, device_->sm_count);
  auto split_for = [&](int kind) {
    const bool wide = kind != jb::kEdgeNarrow;
    Split e;
    e.kind = kind;
    e.groups = groups;
    e.steps = steps;
    e.tiles = (p.C + spec.edge_rows(kind) - 1) / spec.edge_rows(kind);
    e.threads = spec.edge_threads(kind);
    // The driver reserves 1 KiB of each block's shared memory; an unknown size (0) leaves the count as compiled.
    const unsigned shared =
        jb::edge_shape(int(p.C), e.threads, spec.edge_rows(kind), int(acc), p.semiring == Semiring::log, kind).shared;
    int per_sm = jb::edge_blocks_per_sm(e.threads, int(acc), kind);
    if (device_->max_shared_per_sm > 0) per_sm = std::min<int>(per_sm, device_->max_shared_per_sm / (shared + 1024));
    const int64_t per_chunk = std::max<int64_t>(1, groups * e.tiles); // blocks per range of steps (B may be 0)
    const int64_t wave = std::max<int64_t>(1, std::max(1, per_sm) * sms / per_chunk); // whole ranges in the wave
    e.chunks = std::min(wave, wide ? most_at_peak : most);
    if (e.chunks * per_chunk < sms)
      e.chunks = std::max(e.chunks, std::min(std::max<int64_t>(1, sms / per_chunk), most_at_peak));
    e.whole = e.chunks == wave;
    e.chunk = std::max<int64_t>(1, (steps + e.chunks - 1) / e.chunks);
    e.chunks = std::max<int64_t>(1, (steps + e.chunk - 1) / e.chunk);
    return e;
  };
  bool wide_whole = false;
  Split e = split_for(jb::kEdgeNarrow);
  if (spec.wide_edges()) {
    const Split wide = split_for(jb::kEdgeWide);
    if ((wide_whole = wide.whole)) e = wide;
  }
  if (spec.mma_edges() && device_->features.has(kMmaTf32Bf16)) {
    // Measured faster than the wide blocks where a whole wave of those fits (128 states), and than the narrow ones at
    // 256 states where the mma blocks fill the SMs; slower below 128 states, whose steps' factors cost more than
    // their terms, and at 128 states without such a wave (there the partial sums' room left fewer mma blocks than SMs).
    const Split mma = split_for(jb::kEdgeMma);
    if (wide_whole || (p.C >= 256 && mma.groups * mma.chunks * mma.tiles >= sms)) e = mma;
  }
  e.wide_whole = wide_whole;
  return e;
}

int HmmSums::kind() const { return split_.kind; }
bool HmmSums::wide_whole() const { return split_.wide_whole; }

std::size_t HmmSums::workspace_bytes(bool transitions) const {
  if (problem_.form != ChainForm::hmm || !transitions) return 0;
  return split_.partial_bytes(problem_);
}

void HmmSums::launch(const char* suffix, unsigned blocks, unsigned threads, jb::ChainParams& params, CUstream stream,
                     unsigned blocks_y) const {
  const unsigned grid[3] = {blocks, blocks_y, 1}, block[3] = {threads, 1, 1};
  void* args[] = {&params};
  jitbmm::launch(*kernel_, suffix, grid, block, args, stream);
}

void HmmSums::run(jb::ChainParams params, Stream stream, const Workspace& workspace) const {
  const ChainProblem& p = problem_;
  const Split& e = split_;
  const std::size_t need = workspace_bytes(params.grad != nullptr);
  params.chunk = e.chunk;
  params.chunks = e.chunks;
  ScopedContext scope(device_->context);
  const auto cu_stream = reinterpret_cast<CUstream>(stream);
  // Grid-strided launches of `threads` a block: enough blocks to fill the GPU a few times over.
  auto strided = [&](int64_t items, int threads) {
    const int64_t blocks = (items + threads - 1) / threads;
    return unsigned(std::clamp<int64_t>(blocks, 1, 4096 / threads * int64_t(std::max(1, device_->sm_count))));
  };
  if (params.grad_emissions)
    launch("", strided(jb::hmm_node_threads(p.B, p.T, int(p.C)), kHmmNodeThreads), unsigned(kHmmNodeThreads), params,
           cu_stream);
  Scratch scratch(*device_, workspace, need, cu_stream);
  params.partials = scratch.take(need);
  if (params.grad) // a block a range of steps (of each table) and tile of rows
    launch(ChainSpec::edge_entry(e.kind), unsigned(e.groups * e.chunks), unsigned(e.threads), params, cu_stream,
           unsigned(e.tiles));
  const int64_t reduced = jb::hmm_reduce_threads(params.grad && e.chunks > 1 ? e.groups * p.C * p.C : 0, e.chunks,
                                                 params.grad_initial ? (p.batched_initial ? p.B : 1) * p.C : 0);
  if (reduced > 0)
    launch("_reduce", strided(reduced, jb::kHmmReduceThreads), unsigned(jb::kHmmReduceThreads), params, cu_stream);
}

} // namespace jitbmm
