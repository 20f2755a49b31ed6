// The HMM form's backward of a chain plan: the gradients of its three tables (the sequential module's "_nodes",
// "_edges" and "_reduce", or the stepped or the chunked strategy's).
#include <algorithm>
#include <cstdint>

#include "runtime/chain_plan_impl.hpp"
#include "runtime/driver_api.hpp"
#include "runtime/launch.hpp"
#include "runtime/plan_impl.hpp" // check_pointer, check_alignment
#include "runtime/scratch.hpp"
#include "support/checked_size.hpp"

namespace jitbmm {

using namespace chain_detail;

namespace {

// How the HMM backward sums the transitions' gradient: `groups` tables (one per sequence when batched), each over
// `steps` steps cut into `chunks` ranges of `chunk` steps, one "_edges" block per range and tile of `rows` rows.
// Enough ranges to give every SM a few blocks, as long as their partial sums take at most half the tables' bytes
// (the backward's scratch counts in its peak memory, which the saved messages and the emissions' gradient already
// make three times the emissions); with one range a block's sums are the gradient itself, otherwise partial sums
// that "_reduce" adds in order.
struct EdgeSplit {
  int64_t groups = 1, steps = 0, chunks = 1, chunk = 1, tiles = 1;
  std::size_t partial_bytes(const ChainProblem& p) const {
    if (chunks == 1) return 0;
    const auto n = std::size_t(checked_product({groups, chunks, p.C, p.C}, "chain: partial sums"));
    return ScratchSize().add(n * std::size_t(dtype_info(p.dtype).acc_bytes), "workspace").bytes();
  }
};
EdgeSplit edge_split(const ChainPlan::Impl& im) {
  const ChainProblem& p = im.problem;
  EdgeSplit e;
  e.groups = p.batched_transitions ? p.B : 1;
  e.steps = p.batched_transitions ? p.T - 1 : p.B * (p.T - 1);
  e.tiles = (p.C + im.spec.edge_rows() - 1) / im.spec.edge_rows();
  const int64_t blocks = 4 * int64_t(std::max(1, im.device->sm_count));
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

} // namespace

std::size_t ChainPlan::backward_workspace_bytes() const {
  if (impl_->chunked && impl_->problem.semiring == Semiring::log) return impl_->chunked->backward_workspace_bytes();
  if (impl_->stepped) return impl_->stepped->backward_workspace_bytes(true);
  if (impl_->problem.form != ChainForm::hmm) return 0;
  return edge_split(*impl_).partial_bytes(impl_->problem);
}

void ChainPlan::backward(const HmmInputs& hmm, const int64_t* lengths, const void* saved, const int32_t* path,
                         const void* grad_score, const HmmGradients& grads, Stream stream,
                         const Workspace& workspace) const {
  const Impl& im = *impl_;
  const ChainProblem& p = im.problem;
  check_form(p, ChainForm::hmm);
  const bool empty = p.B == 0;
  jb::ChainParams params = hmm_params(im, hmm, empty);
  check_pointer(grad_score, "grad_score", empty);
  check_lengths(p, lengths, empty);
  check_backward_reads(p, saved, path, empty);
  const int bytes = dtype_info(p.dtype).size_bytes;
  check_alignment(grad_score, "grad_score", dtype_info(chain_output_dtype(p)).size_bytes);
  check_alignment(grads.emissions, "grads.emissions", bytes);
  check_alignment(grads.transitions, "grads.transitions", bytes);
  check_alignment(grads.initial, "grads.initial", bytes);
  attach(params, p, lengths, path, saved);
  const auto cu_stream = reinterpret_cast<CUstream>(stream);
  const bool chunked = im.chunked && p.semiring == Semiring::log; // max_plus's backward reads the path alone
  const std::size_t need = im.stepped          ? im.stepped->backward_workspace_bytes(grads.transitions != nullptr)
                           : chunked           ? im.chunked->backward_workspace_bytes()
                           : grads.transitions ? edge_split(im).partial_bytes(p)
                                               : 0;
  check_workspace(workspace, need); // before the first launch or memset: a refused call writes nothing
  if (empty) {
    // No sequence: a shared table's gradient is a sum of nothing.
    ScopedContext scope(im.device->context);
    const std::size_t table = std::size_t(p.C) * std::size_t(bytes);
    if (grads.transitions && !p.batched_transitions)
      check(driver().cuMemsetD8Async(reinterpret_cast<CUdeviceptr>(grads.transitions), 0, table * std::size_t(p.C),
                                     cu_stream),
            "cuMemsetD8Async");
    if (grads.initial && !p.batched_initial)
      check(driver().cuMemsetD8Async(reinterpret_cast<CUdeviceptr>(grads.initial), 0, table, cu_stream),
            "cuMemsetD8Async");
    return;
  }
  params.grad_score = grad_score;
  params.grad_emissions = grads.emissions;
  params.grad = grads.transitions;
  params.grad_initial = grads.initial;
  if (im.stepped) {
    im.stepped->backward(params, stream, workspace);
    return;
  }
  if (chunked) {
    im.chunked->backward(params, saved, stream, workspace);
    return;
  }
  const EdgeSplit split = edge_split(im);
  params.chunk = split.chunk;
  params.chunks = split.chunks;
  ScopedContext scope(im.device->context);
  // Grid-strided launches: enough blocks to fill the GPU a few times over.
  auto strided = [&](int64_t items) {
    const int64_t blocks = (items + kHmmNodeThreads - 1) / kHmmNodeThreads;
    return unsigned(std::clamp<int64_t>(blocks, 1, 16 * int64_t(std::max(1, im.device->sm_count))));
  };
  if (grads.emissions)
    launch_chain(im, "_nodes", strided(jb::hmm_row_threads(p.B * p.T)), unsigned(kHmmNodeThreads), params, cu_stream);
  Scratch scratch(*im.device, workspace, need, cu_stream);
  params.partials = scratch.take(need);
  if (grads.transitions) {
    const unsigned grid[3] = {unsigned(split.groups * split.chunks), unsigned(split.tiles), 1};
    const unsigned block[3] = {unsigned(im.spec.edge_threads()), 1, 1};
    void* args[] = {&params};
    launch(im.kernel->entry("_edges"), grid, block, args, cu_stream, im.kernel->generated.name, "_edges", 0);
  }
  const int64_t reduced = jb::hmm_reduce_threads(grads.transitions && split.chunks > 1 ? split.groups * p.C * p.C : 0,
                                                 grads.initial ? (p.batched_initial ? p.B : 1) * p.C : 0);
  if (reduced > 0) launch_chain(im, "_reduce", strided(reduced), unsigned(kHmmNodeThreads), params, cu_stream);
}

} // namespace jitbmm
