// The chunked strategy's backward (runtime/chain_chunked.hpp): for log, the tree formed again, every level kept, and
// the gradient carried down it through the products' own backward, then the steps' (or the HMM form's tables')
// gradients; max_plus's is the sequential kernels', which read the path alone.
#include <algorithm>
#include <stdexcept>
#include <vector>

#include "runtime/chain_chunked.hpp"
#include "runtime/driver_api.hpp"
#include "runtime/scratch.hpp"
#include "runtime/tuner/policy.hpp"
#include "support/checked_size.hpp"

namespace jitbmm {

namespace {

// The HMM form's log backward: the transitions' and the initial table's gradients summed in the accumulator type.
std::size_t hmm_sums_bytes(const ChainProblem& p) {
  return std::size_t(checked_product({(p.batched_transitions ? p.B : 1) * p.C + (p.batched_initial ? p.B : 1), p.C,
                                      dtype_info(p.dtype).acc_bytes},
                                     "chain: sums"));
}

} // namespace

std::size_t ChunkedChain::backward_workspace_bytes(bool transitions) const {
  if (problem_.semiring != Semiring::log) return sequential_ ? sequential_->backward_workspace_bytes(transitions) : 0;
  if (problem_.B == 0) return 0;
  const int acc = dtype_info(problem_.dtype).acc_bytes;
  ScratchSize s;
  s.add(matrix_bytes(problem_.B * chunks_), "workspace");  // the chunks' products' gradient
  s.add(matrix_bytes(group_ * (2 * L_ - 1)), "workspace"); // every level of the tree
  s.add(matrix_bytes(group_ * L_), "workspace");           // the gradients of the even levels
  s.add(matrix_bytes(group_ * L_ / 2), "workspace");       // of the odd ones
  s.add(std::size_t(group_ * 2 * L_ * acc), "workspace");  // every level's shifts
  // The products' own, forward and backward.
  s.add(std::max(product_scratch_bytes(false), product_scratch_bytes(true)), "workspace");
  if (problem_.form == ChainForm::hmm) {
    s.add(matrix_bytes(group_), "workspace");      // each chunk's sum of its steps' gradients
    s.add(hmm_sums_bytes(problem_), "workspace"); // the tables' sums
  }
  return s.bytes();
}

void ChunkedChain::backward(jb::ChainParams call, const void* saved, Stream stream, const Workspace& workspace) const {
  if (sizes_only_) throw_sizes_only(name());
  if (problem_.semiring == Semiring::log) {
    log_backward(call, saved, stream, workspace);
    return;
  }
  // max_plus's reads the path alone: the sequential kernels'.
  if (!sequential_) throw std::logic_error("chunked chain: max_plus's backward needs the sequential kernels");
  sequential_->backward(call, saved, stream, workspace);
}

void ChunkedChain::log_backward(const jb::ChainParams& call, const void* saved, Stream stream,
                                const Workspace& workspace) const {
  const ChainProblem& p = problem_;
  const bool hmm = p.form == ChainForm::hmm;
  if (p.B == 0 || (hmm && !call.grad && !call.grad_emissions && !call.grad_initial)) return; // nothing asked for
  const int acc = dtype_info(p.dtype).acc_bytes;
  const std::size_t matrix = matrix_bytes(1);
  const auto cu_stream = reinterpret_cast<CUstream>(stream);
  ScopedContext scope(device_->context);
  const TuningHold hold(!tune_products_, false); // the products' plans, and their backward passes' kernels
  const std::size_t product_bytes =
      std::max(product_scratch_bytes(false, stream), product_scratch_bytes(true, stream));
  Scratch scratch(*device_, workspace, backward_workspace_bytes(true), cu_stream);
  const int64_t total = p.B * chunks_;
  char* grad_products = static_cast<char*>(scratch.take(matrix_bytes(total)));
  char* levels = static_cast<char*>(scratch.take(matrix_bytes(group_ * (2 * L_ - 1))));
  char* grad_even = static_cast<char*>(scratch.take(matrix_bytes(group_ * L_)));
  char* grad_odd = static_cast<char*>(scratch.take(matrix_bytes(group_ * L_ / 2)));
  char* shifts = static_cast<char*>(scratch.take(std::size_t(group_ * 2 * L_ * acc)));
  const Workspace product_scratch{scratch.take(product_bytes), product_bytes};
  const char* products = static_cast<const char*>(saved) + top_saved_offset();
  // The gradient of the chunks' products, from the chain of chunks' saved messages.
  top_->backward(products, nullptr, saved, nullptr, call.grad_score, grad_products, stream);

  jb::ChunkParams params = params_for(call);
  params.grad_score = call.grad_score;
  params.grad = call.grad;
  if (hmm) {
    params.grad_emissions = call.grad_emissions;
    params.grad_initial = call.grad_initial;
    params.partials = scratch.take(matrix_bytes(group_));
    params.sums = scratch.take(hmm_sums_bytes(p));
    check(driver().cuMemsetD8Async(reinterpret_cast<CUdeviceptr>(params.sums), 0, hmm_sums_bytes(p), cu_stream),
          "cuMemsetD8Async");
  }
  for (int64_t first = 0; first < total; first += group_) {
    const int64_t count = std::min(group_, total - first);
    params.first = first;
    params.count = count;
    // The tree again, every level kept: level j's count·L / 2^j matrices after those below it, and so its shifts.
    std::vector<char*> level(std::size_t(levels_ + 1), levels);
    std::vector<char*> shift(std::size_t(levels_ + 1), shifts);
    for (int64_t j = 1; j <= levels_; ++j) {
      level[std::size_t(j)] = level[std::size_t(j - 1)] + matrix_bytes((count * L_) >> (j - 1));
      shift[std::size_t(j)] = shift[std::size_t(j - 1)] + std::size_t(((count * L_) >> (j - 1)) * acc);
    }
    form_tree(params, level, shifts, product_scratch, stream);
    // Down the tree: each product as it was formed (its shift back) is what its backward reads; its operands'
    // relative values have the gradient of the values they stand for (a shift of a whole matrix moves the score
    // by as much). The gradients of the even levels in grad_even, of the odd ones in grad_odd.
    const char* grad_out = grad_products + std::size_t(first) * matrix;
    for (int64_t j = levels_; j >= 1; --j) {
      const int64_t batch = (count * L_) >> j;
      jb::ChunkParams r = params;
      r.matrices = level[std::size_t(j)];
      r.shifts = shift[std::size_t(j)];
      r.count = batch;
      launch("_restore", batch * p.C * p.C, false, &r, cu_stream);
      const char* in = level[std::size_t(j - 1)];
      char* grad_in = (j - 1) % 2 ? grad_odd : grad_even;
      product(batch, stream)
          .backward(in + matrix, in, level[std::size_t(j)], nullptr, grad_out, grad_in + matrix, grad_in, stream,
                    product_scratch);
      grad_out = grad_in;
    }
    params.matrices = grad_even;
    if (hmm)
      hmm_gradients(params, cu_stream);
    else
      launch("_unpad", count * L_ * p.C * p.C, false, &params, cu_stream);
  }
  if (hmm && (params.grad || params.grad_initial))
    launch("_hmm_cast", hmm_sums_bytes(p) / std::size_t(acc), false, &params, cu_stream);
}

void ChunkedChain::hmm_gradients(const jb::ChunkParams& params, CUstream stream) const {
  const int64_t C = problem_.C;
  jb::ChunkParams q = params;
  if (params.grad_emissions) launch("_hmm_nodes", params.count * L_ * C, false, &q, stream);
  if (params.grad) launch("_hmm_edges", params.count * C * C, false, &q, stream);
  // At most one group a sequence the pass holds, or one for a shared table.
  const int64_t groups = std::min<int64_t>(problem_.B, params.count + 1);
  if (params.grad || params.grad_initial) launch("_hmm_sums", groups * (C * C + C), false, &q, stream);
}

} // namespace jitbmm
