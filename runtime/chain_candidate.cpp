#include "runtime/chain_candidate.hpp"

namespace jitbmm {

ChainCandidate chain_candidate(const ChainPlan& plan) {
  ChainCandidate c;
  c.saved_bytes = plan.saved_bytes();
  c.workspace_bytes = plan.workspace_bytes(true);
  c.backward_workspace_bytes = plan.backward_workspace_bytes();
  if (plan.problem().form == ChainForm::hmm) {
    c.forward = [plan](const ChainTrialBuffers& t, void* saved, int32_t* path, Stream stream, const Workspace& ws) {
      plan(t.hmm, nullptr, t.score, saved, nullptr, path, stream, ws);
    };
    c.backward = [plan](const ChainTrialBuffers& t, const void* saved, const int32_t* path, Stream stream,
                        const Workspace& ws) {
      plan.backward(t.hmm, nullptr, saved, path, t.grad_score, t.grad_hmm, stream, ws);
    };
  } else {
    c.forward = [plan](const ChainTrialBuffers& t, void* saved, int32_t* path, Stream stream, const Workspace& ws) {
      plan(t.potentials, nullptr, t.score, saved, nullptr, path, stream, ws);
    };
    c.backward = [plan](const ChainTrialBuffers& t, const void* saved, const int32_t* path, Stream stream,
                        const Workspace& ws) {
      plan.backward(t.potentials, nullptr, saved, path, t.grad_score, t.grad_potentials, stream, ws);
    };
  }
  return c;
}

} // namespace jitbmm
