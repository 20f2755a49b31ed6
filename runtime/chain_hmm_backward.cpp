// The HMM form's backward of a chain plan: its arguments checked, then the plan's strategy's (the gradients of its
// three tables).
#include <cstdint>

#include "runtime/chain_plan_impl.hpp"
#include "runtime/driver_api.hpp"
#include "runtime/plan_impl.hpp" // check_pointer, check_alignment
#include "runtime/scratch.hpp"

namespace jitbmm {

using namespace chain_detail;

std::size_t ChainPlan::backward_workspace_bytes() const { return impl_->strategy->backward_workspace_bytes(true); }

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
  // Before the first launch or memset: a refused call writes nothing.
  const CallHold hold(im, stream);
  check_workspace(workspace, im.strategy->least_backward_workspace_bytes(grads.transitions != nullptr));
  if (empty) {
    // No sequence: a shared table's gradient is a sum of nothing.
    ScopedContext scope(im.device->context);
    const auto cu_stream = reinterpret_cast<CUstream>(stream);
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
  im.strategy->backward(params, saved, stream, workspace);
}

} // namespace jitbmm
