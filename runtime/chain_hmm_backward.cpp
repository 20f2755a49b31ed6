// The HMM form's backward of a chain plan: its arguments checked, then the plan's strategy's (the gradients of its
// three tables).
#include <cstdint>

#include "runtime/chain_plan_impl.hpp"
#include "runtime/distribution_checks.hpp"
#include "runtime/driver_api.hpp"
#include "runtime/hmm_gradients.hpp"
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
  check_alignment(grad_score, "grad_score", dtype_info(chain_output_dtype(p)).size_bytes);
  check_hmm_gradients(p, grads);
  attach(params, p, lengths, path, saved);
  // Before the first launch or memset: a refused call writes nothing.
  const CallHold hold(im, stream);
  check_workspace(workspace, im.strategy->least_backward_workspace_bytes(grads.transitions != nullptr));
  if (empty) {
    ScopedContext scope(im.device->context);
    clear_shared_hmm_gradients(p, grads, reinterpret_cast<CUstream>(stream));
    return;
  }
  params.grad_score = grad_score;
  params.grad_emissions = grads.emissions;
  params.grad = grads.transitions;
  params.grad_initial = grads.initial;
  im.strategy->backward(params, saved, stream, workspace);
}

} // namespace jitbmm
