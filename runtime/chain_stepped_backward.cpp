// The stepped strategy's backward (runtime/chain_stepped.hpp): the CRF form's marginals, the HMM form's gradients
// of its tables, whose transitions' gradient is, for log, products of the saved messages over every (b, t).
#include <algorithm>
#include <cstdint>

#include "generator/step_source.hpp"
#include "runtime/chain_step_products.hpp"
#include "runtime/chain_stepped.hpp"
#include "runtime/driver_api.hpp"
#include "runtime/scratch.hpp"
#include "runtime/tuner/policy.hpp"
#include "support/checked_size.hpp"

namespace jitbmm {

int64_t SteppedChain::edge_slices() const {
  const ChainProblem& p = problem_;
  if (!shared_table(p)) return 1;
  // Slices of whole sequences, each summing at least 256 positions: the most that divide B up to as many as give the
  // GPU two output tiles of 128 × 128 per SM or, where that takes more, its prepare a block per SM (a block walks 32
  // of a slice's 2C lines, the operands' rows and columns, over all of the slice's positions).
  const int64_t sms = std::max(1, device_->sm_count);
  const int64_t tiles = std::max<int64_t>(1, ((p.C + 127) / 128) * ((p.C + 127) / 128));
  const int64_t wanted = std::max<int64_t>({1, 2 * sms / tiles, (32 * sms + 2 * p.C - 1) / (2 * p.C)});
  int64_t best = 1;
  for (int64_t s = 1; s <= std::min(wanted, p.B); ++s)
    if (p.B % s == 0 && (p.B / s) * p.T >= 256) best = s;
  return best;
}

std::size_t SteppedChain::backward_workspace_bytes(bool transitions) const {
  if (sums_) return sums_->workspace_bytes(transitions);
  const ChainProblem& p = problem_;
  if (p.B == 0 || p.form != ChainForm::hmm || !transitions || p.T < 2) return 0;
  ScopedContext scope(device_->context); // the products are planned on the plan's device
  const int acc = dtype_info(p.dtype).acc_bytes;
  const int64_t groups = p.batched_transitions ? p.B : 1;
  if (p.semiring == Semiring::max_plus)
    return ScratchSize().add(bytes_of({groups, p.C, p.C, acc}), "workspace").bytes();
  return ScratchSize()
      .add(bytes_of({p.B, p.T, p.C, acc}), "workspace")
      .add(bytes_of({2, edge_slices(), groups, p.C, p.C, acc}), "workspace")
      .add(product_bytes(edge_problem(), [&] { return edge_product(nullptr); }), "workspace")
      .add(bytes_of({2, 4}), "workspace")
      .bytes();
}

SemiringBMM SteppedChain::edge_product(Stream stream) const {
  return kept_product(kEdges, false, false, edge_problem(), stream);
}

Problem SteppedChain::edge_problem() const {
  const ChainProblem& p = problem_;
  const int64_t C = p.C, slices = edge_slices();
  // Out[c][q] = ⊕ over a slice's (b, t) of operand[b][t][c] ⊗ rel[b][t][q]: the operand read transposed.
  const int64_t k = p.batched_transitions ? p.T : p.B / slices * p.T;
  Problem q;
  q.semiring = Semiring::log;
  q.dtype = chain_output_dtype(p);
  q.shape = Shape{p.batched_transitions ? p.B : slices, C, k, C};
  q.a_strides = Strides{k * C, 1, C};
  q.b_strides = Strides{k * C, C, 1};
  q.out_strides = Strides{C * C, C, 1};
  return q;
}

void SteppedChain::backward(jb::ChainParams params, const void*, Stream stream, const Workspace& workspace) const {
  const ChainProblem& p = problem_;
  if (p.B == 0) return;
  if (sizes_only_) throw_sizes_only(name());
  const auto cu_stream = reinterpret_cast<CUstream>(stream);
  const bool log = p.semiring == Semiring::log;
  ScopedContext scope(device_->context);
  const TuningHold hold(!tune_products_, false);
  params.states = p.C;
  params.chunks = 1; // "_reduce" adds no partial sums of the transitions' gradient
  if (p.form == ChainForm::crf) {
    launch("", p.B * (p.T - 1) * p.C * p.C, false, params, cu_stream, true); // the marginals
    return;
  }
  if (sums_) {
    sums_->run(params, stream, workspace);
    return;
  }
  const bool transitions = params.grad != nullptr;
  Scratch scratch(*device_, workspace, backward_workspace_bytes(transitions), cu_stream); // plans the product first
  // The state marginals; with log's transitions' gradient, in the pass that forms its first operand (below). The
  // initial table's gradient follows them (hmm_initial_grads reads their first position back).
  const bool operand_pass = log && transitions && p.T >= 2;
  auto initial = [&] {
    if (params.grad_initial)
      launch("_reduce", jb::hmm_reduce_threads(0, 1, (p.batched_initial ? p.B : 1) * p.C), false, params, cu_stream,
             true);
  };
  if (!operand_pass) {
    if (params.grad_emissions) launch("", jb::hmm_row_threads(p.B * p.T), false, params, cu_stream, true);
    initial();
  }
  if (!transitions) return;
  const int acc = dtype_info(p.dtype).acc_bytes;
  const int64_t groups = p.batched_transitions ? p.B : 1;
  if (p.T < 2) { // no step: a sum of nothing
    check(driver().cuMemsetD8Async(reinterpret_cast<CUdeviceptr>(params.grad), 0,
                                   bytes_of({groups, p.C, p.C, dtype_info(p.dtype).size_bytes}), cu_stream),
          "cuMemsetD8Async");
    return;
  }
  if (!log) {
    params.operand = scratch.take(bytes_of({groups, p.C, p.C, acc}));
    launch("_path_edges", groups * p.C / (kStepThreads / 32) + 1, true, params, cu_stream, true);
    launch("_cast", groups * p.C * p.C, false, params, cu_stream, true);
    return;
  }
  // grad_score's parts of each sign, each a product of its operand with the saved messages. "_signs" says on the GPU
  // which signs grad_score has: the first product always runs (its sign the positive where there is one), the second
  // only where grad_score has both (run_if), so a grad_score of one sign, as a loss's usually is, costs one product.
  // Both have the same right operand: the second prepares its operand alone.
  params.operand = scratch.take(bytes_of({p.B, p.T, p.C, acc}));
  char* const products = static_cast<char*>(scratch.take(bytes_of({2, edge_slices(), groups, p.C, p.C, acc})));
  const std::size_t part = bytes_of({edge_slices(), groups, p.C, p.C, acc});
  const SemiringBMM edges = edge_product(stream);
  const Workspace edge_scratch{scratch.take(edges.workspace_bytes()), edges.workspace_bytes()};
  params.signs = static_cast<int*>(scratch.take(bytes_of({2, 4})));
  launch("_signs", 1, true, params, cu_stream, true);
  for (const int edge : {0, 1}) {
    params.edge = edge;
    const bool nodes = edge == 0 && params.grad_emissions; // one read of the backward messages for both
    launch(nodes ? "_nodes_operand" : "_operand", jb::hmm_row_threads(p.B * p.T), false, params, cu_stream, true);
    if (edge == 0) initial();
    void* const out = products + (edge == 0 ? 0 : part);
    if (edge == 0)
      edges(params.operand, params.rel, out, nullptr, stream, edge_scratch);
    else
      edges.run_if(params.signs + 1, params.operand, params.rel, out, nullptr, stream, edge_scratch, true);
  }
  params.products = products;
  params.slices = edge_slices();
  launch("_finish", groups * p.C * p.C, false, params, cu_stream, true);
}

} // namespace jitbmm
