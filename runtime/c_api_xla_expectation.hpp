// What the chain expectations' XLA FFI handlers share, in either form (runtime/c_api_xla_distributions.cpp holds the
// CRF form's, c_api_xla_hmm_distributions.cpp the HMM form's; docs/jax.md): the field's kind, the process-wide table
// of their plans, and a forward and a backward that check the results, the upstream gradients and the saved messages
// against the plan before the form's call launches.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "runtime/c_api_xla.hpp"

namespace jitbmm::xla_ffi {

// What the field of an expectation is (ExpectationField): p's own potentials or tables (the entropy), a second chain
// q (the cross-entropy: log Z_q beside), or q read as the difference p - q (KL).
constexpr int32_t kGiven = 0, kDifference = 2;

// Success for a kind of field the library has, else an error naming it.
ffi::Error check_kind(int32_t kind);
// Whether q's operand has p's dtype and dimensions (a field's operand is laid out as the chain's).
bool alike(const ffi::AnyBuffer& p, const ffi::AnyBuffer& q);

// The plan of an expectation of `kind` of chain c (either form) in context ctx, made once and kept for the process.
jitbmm_status expectation_plan(Chain& c, int32_t kind, CUcontext ctx, std::shared_ptr<jitbmm_chain_expectation>& plan);

// log_z ([B], [2][B] where the field is a chain) and mean ([B]) in the score dtype `score`: a forward's results, or
// with `upstream` a backward's gradients of them (named grad_log_z and grad_mean; grad_log_z may be absent).
ffi::Error check_expectation_scores(int32_t kind, int64_t B, ffi::DataType score, const ffi::AnyBuffer& log_z,
                                    const ffi::AnyBuffer& mean, bool upstream);

// The saved operand (the forward's messages) must be the plan's size where it is given; *workspace receives the
// backward's scratch bytes.
ffi::Error check_saved(const jitbmm_chain_expectation* plan, const ffi::AnyBuffer& saved, std::size_t* workspace);

// The forward of an expectation of chain c (either form): its results checked, its plan found, then run(plan,
// saved) launches it (saved null where the call keeps nothing). An empty batch launches nothing.
template <class Run>
ffi::Error expectation_forward(Chain& c, int32_t kind, ffi::DataType score, void* stream, const ffi::AnyBuffer& log_z,
                               const ffi::AnyBuffer& mean, ffi::AnyBuffer& saved, Run run) {
  const int64_t B = c.problem.B;
  if (ffi::Error e = check_expectation_scores(kind, B, score, log_z, mean, false); !e.success()) return e;
  if (B == 0) return ffi::Error::Success();
  StreamContext context(stream);
  std::shared_ptr<jitbmm_chain_expectation> plan;
  if (const jitbmm_status s = expectation_plan(c, kind, context.context, plan)) return failed(s);
  std::size_t workspace = 0;
  if (ffi::Error e = check_saved(plan.get(), saved, &workspace); !e.success()) return e;
  const jitbmm_status s = run(plan.get(), data_or_null(saved));
  return s ? failed(s) : ffi::Error::Success();
}

// Its backward: the forward's saved messages and results and the upstream gradients checked (the gradients' results
// the caller checks), then run(plan, workspace, bytes) launches it with the scratch of the declared workspace. An
// empty batch launches nothing.
template <class Run>
ffi::Error expectation_backward(Chain& c, int32_t kind, ffi::DataType score, void* stream,
                                ffi::ScratchAllocator& allocator, const ffi::AnyBuffer& saved,
                                const ffi::AnyBuffer& log_z, const ffi::AnyBuffer& mean,
                                const ffi::AnyBuffer& grad_log_z, const ffi::AnyBuffer& grad_mean,
                                ffi::AnyBuffer& declared, Run run) {
  const int64_t B = c.problem.B;
  if (saved.element_count() == 0 && B != 0) return invalid("saved: the forward kept no messages");
  if (ffi::Error e = check_expectation_scores(kind, B, score, log_z, mean, false); !e.success()) return e;
  if (ffi::Error e = check_expectation_scores(kind, B, score, grad_log_z, grad_mean, true); !e.success()) return e;
  if (B == 0) return ffi::Error::Success();
  StreamContext context(stream);
  std::shared_ptr<jitbmm_chain_expectation> plan;
  if (const jitbmm_status s = expectation_plan(c, kind, context.context, plan)) return failed(s);
  std::size_t bytes = 0;
  if (ffi::Error e = check_saved(plan.get(), saved, &bytes); !e.success()) return e;
  auto ws = workspace(declared, allocator, bytes, stream);
  if (ws.has_error()) return ws.error();
  const jitbmm_status s = run(plan.get(), ws->data, ws->bytes);
  return s ? failed(s) : ffi::Error::Success();
}

} // namespace jitbmm::xla_ffi
