// The XLA FFI handlers of the chains (runtime/c_api_xla.hpp; docs/jax.md): jitbmm_xla_chain and
// jitbmm_xla_chain_backward (the CRF form), jitbmm_xla_hmm and jitbmm_xla_hmm_backward (the HMM form), log and
// max_plus, with ragged lengths. lengths arrive as int32 pairs [..., 2] (each the low and high half of an int64, so
// that a JAX program without 64-bit types can pass them), or as no elements for none.
#include <memory>
#include <string>
#include <string_view>
#include <tuple>

#include "runtime/c_api_xla.hpp"

namespace jitbmm::xla_ffi {
namespace {

PlanTable<jitbmm_chain_plan>& chain_plans() {
  static auto* table = new PlanTable<jitbmm_chain_plan>();
  return *table;
}

jitbmm_status chain_plan(Chain& c, CUcontext ctx, std::shared_ptr<jitbmm_chain_plan>& plan) {
  jitbmm_chain_problem& q = c.problem;
  q.semiring = c.semiring.c_str();
  const std::string key = c.semiring + "|" + q.dtype + "|" + (q.form ? q.form : "crf") + "|" + std::to_string(q.B) +
                          "|" + std::to_string(q.T) + "|" + std::to_string(q.C) + "|" + std::to_string(q.with_lengths) +
                          "|" + std::to_string(q.batched_transitions) + "|" + std::to_string(q.batched_initial) + "|" +
                          context_key(ctx);
  return chain_plans().get(
      key, [&](jitbmm_chain_plan** made) { return jitbmm_chain_plan_create(&q, made); }, jitbmm_chain_plan_destroy,
      plan);
}

// The saved operand's bytes must be the plan's (jitbmm.jax asked the library for them when it traced the call).
ffi::Error check_saved(const jitbmm_chain_plan* plan, const ffi::AnyBuffer& saved, bool wanted) {
  if (!wanted) return ffi::Error::Success();
  std::size_t bytes = 0;
  if (const jitbmm_status s = jitbmm_chain_plan_saved_bytes(plan, &bytes)) return failed(s);
  if (saved.size_bytes() != bytes)
    return invalid("saved: " + std::to_string(saved.size_bytes()) + " bytes, the plan keeps " + std::to_string(bytes));
  return ffi::Error::Success();
}

// A score ([...], the score dtype: a forward's result, a backward's upstream gradient) and a best path ([..., T],
// int32, where one is given) of the chain.
ffi::Error scores_of(const Chain& c, const ffi::AnyBuffer& input, const ffi::AnyBuffer& score, const char* name,
                     const ffi::AnyBuffer& path) {
  if (ffi::Error e = expected(score, name, score_type(input.element_type()), c.problem.B); !e.success()) return e;
  if (path.element_count() == 0) return ffi::Error::Success();
  return expected(path, "path", ffi::DataType::S32, c.problem.B * c.problem.T);
}

// A forward of either form; `run` launches it given the plan, the workspace and the outputs.
template <class Run>
ffi::Error chain_forward(ffi::ErrorOr<Chain> c, void* stream, ffi::ScratchAllocator& allocator, ffi::AnyBuffer& saved,
                         ffi::AnyBuffer& path, ffi::AnyBuffer& declared, Run run) {
  if (c.has_error()) return c.error();
  if (c->problem.B == 0) return ffi::Error::Success();
  StreamContext context(stream);
  std::shared_ptr<jitbmm_chain_plan> plan;
  if (const jitbmm_status s = chain_plan(*c, context.context, plan)) return failed(s);
  const bool with_path = path.element_count() != 0;
  if (ffi::Error e = check_saved(plan.get(), saved, saved.element_count() != 0); !e.success()) return e;
  std::size_t bytes = 0;
  if (const jitbmm_status s = jitbmm_chain_plan_workspace_bytes(plan.get(), with_path, &bytes)) return failed(s);
  auto ws = workspace(declared, allocator, bytes, stream);
  if (ws.has_error()) return ws.error();
  const jitbmm_status s = run(plan.get(), *c, data_or_null(saved), data_or_null<int32_t>(path), ws->data, ws->bytes);
  return s ? failed(s) : ffi::Error::Success();
}

template <class Run>
ffi::Error chain_backward(ffi::ErrorOr<Chain> c, void* stream, ffi::ScratchAllocator& allocator,
                          const ffi::AnyBuffer& saved, ffi::AnyBuffer& declared, Run run) {
  if (c.has_error()) return c.error();
  if (c->problem.B == 0) return ffi::Error::Success();
  StreamContext context(stream);
  std::shared_ptr<jitbmm_chain_plan> plan;
  if (const jitbmm_status s = chain_plan(*c, context.context, plan)) return failed(s);
  if (ffi::Error e = check_saved(plan.get(), saved, c->semiring == "log"); !e.success()) return e;
  std::size_t bytes = 0;
  if (const jitbmm_status s = jitbmm_chain_plan_backward_workspace_bytes(plan.get(), &bytes)) return failed(s);
  auto ws = workspace(declared, allocator, bytes, stream);
  if (ws.has_error()) return ws.error();
  const jitbmm_status s = run(plan.get(), *c, ws->data, ws->bytes);
  return s ? failed(s) : ffi::Error::Success();
}

ffi::Error chain(void* stream, ffi::ScratchAllocator allocator, ffi::AnyBuffer potentials, ffi::AnyBuffer lengths,
                 ffi::Result<ffi::AnyBuffer> score, ffi::Result<ffi::AnyBuffer> saved, ffi::Result<ffi::AnyBuffer> path,
                 ffi::Result<ffi::AnyBuffer> declared, std::string_view semiring) {
  auto problem = crf(semiring, potentials, lengths);
  if (problem.has_value())
    if (ffi::Error e = scores_of(*problem, potentials, *score, "score", *path); !e.success()) return e;
  return chain_forward(
      std::move(problem), stream, allocator, *saved, *path, *declared,
      [&](jitbmm_chain_plan* plan, const Chain& c, void* keep, int32_t* best, void* ws, std::size_t bytes) {
        return jitbmm_chain_plan_run(plan, potentials.untyped_data(), c.lengths, score->untyped_data(), keep, nullptr,
                                     best, ws, bytes, stream);
      });
}

ffi::Error chain_grad(void* stream, ffi::ScratchAllocator allocator, ffi::AnyBuffer potentials, ffi::AnyBuffer lengths,
                      ffi::AnyBuffer saved, ffi::AnyBuffer path, ffi::AnyBuffer grad_score,
                      ffi::Result<ffi::AnyBuffer> grad_potentials, ffi::Result<ffi::AnyBuffer> declared,
                      std::string_view semiring) {
  auto problem = crf(semiring, potentials, lengths);
  if (problem.has_value()) {
    if (ffi::Error e = scores_of(*problem, potentials, grad_score, "grad_score", path); !e.success()) return e;
    if (ffi::Error e = expected_like(*grad_potentials, "grad_potentials", potentials); !e.success()) return e;
  }
  return chain_backward(std::move(problem), stream, allocator, saved, *declared,
                        [&](jitbmm_chain_plan* plan, const Chain& c, void* ws, std::size_t bytes) {
                          return jitbmm_chain_plan_backward_with_workspace(
                              plan, potentials.untyped_data(), c.lengths, data_or_null(saved),
                              data_or_null<const int32_t>(path), grad_score.untyped_data(),
                              grad_potentials->untyped_data(), ws, bytes, stream);
                        });
}

ffi::Error hmm_chain(void* stream, ffi::ScratchAllocator allocator, ffi::AnyBuffer emissions,
                     ffi::AnyBuffer transitions, ffi::AnyBuffer initial, ffi::AnyBuffer lengths,
                     ffi::Result<ffi::AnyBuffer> score, ffi::Result<ffi::AnyBuffer> saved,
                     ffi::Result<ffi::AnyBuffer> path, ffi::Result<ffi::AnyBuffer> declared,
                     std::string_view semiring) {
  auto problem = hmm(semiring, emissions, transitions, initial, lengths);
  if (problem.has_value())
    if (ffi::Error e = scores_of(*problem, emissions, *score, "score", *path); !e.success()) return e;
  return chain_forward(
      std::move(problem), stream, allocator, *saved, *path, *declared,
      [&](jitbmm_chain_plan* plan, const Chain& c, void* keep, int32_t* best, void* ws, std::size_t bytes) {
        return jitbmm_chain_plan_run_hmm(plan, emissions.untyped_data(), transitions.untyped_data(),
                                         initial.untyped_data(), c.lengths, score->untyped_data(), keep, nullptr, best,
                                         ws, bytes, stream);
      });
}

ffi::Error hmm_grad(void* stream, ffi::ScratchAllocator allocator, ffi::AnyBuffer emissions, ffi::AnyBuffer transitions,
                    ffi::AnyBuffer initial, ffi::AnyBuffer lengths, ffi::AnyBuffer saved, ffi::AnyBuffer path,
                    ffi::AnyBuffer grad_score, ffi::Result<ffi::AnyBuffer> grad_emissions,
                    ffi::Result<ffi::AnyBuffer> grad_transitions, ffi::Result<ffi::AnyBuffer> grad_initial,
                    ffi::Result<ffi::AnyBuffer> declared, std::string_view semiring) {
  auto problem = hmm(semiring, emissions, transitions, initial, lengths);
  if (problem.has_value()) {
    if (ffi::Error e = scores_of(*problem, emissions, grad_score, "grad_score", path); !e.success()) return e;
    for (const auto& [grad, name, input] : {std::tuple{&*grad_emissions, "grad_emissions", &emissions},
                                            std::tuple{&*grad_transitions, "grad_transitions", &transitions},
                                            std::tuple{&*grad_initial, "grad_initial", &initial}})
      if (ffi::Error e = expected_like(*grad, name, *input); !e.success()) return e;
    if (problem->problem.B == 0) // no sequence: a shared table's gradient is 0 (the others have no elements)
      return zeroed(stream, {&*grad_transitions, &*grad_initial});
  }
  return chain_backward(std::move(problem), stream, allocator, saved, *declared,
                        [&](jitbmm_chain_plan* plan, const Chain& c, void* ws, std::size_t bytes) {
                          return jitbmm_chain_plan_backward_hmm(
                              plan, emissions.untyped_data(), transitions.untyped_data(), initial.untyped_data(),
                              c.lengths, data_or_null(saved), data_or_null<const int32_t>(path),
                              grad_score.untyped_data(), grad_emissions->untyped_data(),
                              grad_transitions->untyped_data(), grad_initial->untyped_data(), ws, bytes, stream);
                        });
}

} // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    jitbmm_xla_chain,
    [](void* stream, ffi::ScratchAllocator scratch, ffi::AnyBuffer potentials, ffi::AnyBuffer lengths,
       ffi::Result<ffi::AnyBuffer> score, ffi::Result<ffi::AnyBuffer> saved, ffi::Result<ffi::AnyBuffer> path,
       ffi::Result<ffi::AnyBuffer> workspace, std::string_view semiring) {
      return guarded("chain", stream, [&] {
        return chain(stream, std::move(scratch), potentials, lengths, score, saved, path, workspace, semiring);
      });
    },
    JITBMM_XLA_BUFFERS(2, 4).Attr<std::string_view>("semiring"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    jitbmm_xla_chain_backward,
    [](void* stream, ffi::ScratchAllocator scratch, ffi::AnyBuffer potentials, ffi::AnyBuffer lengths,
       ffi::AnyBuffer saved, ffi::AnyBuffer path, ffi::AnyBuffer grad_score,
       ffi::Result<ffi::AnyBuffer> grad_potentials, ffi::Result<ffi::AnyBuffer> workspace, std::string_view semiring) {
      return guarded("chain_backward", stream, [&] {
        return chain_grad(stream, std::move(scratch), potentials, lengths, saved, path, grad_score, grad_potentials,
                          workspace, semiring);
      });
    },
    JITBMM_XLA_BUFFERS(5, 2).Attr<std::string_view>("semiring"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    jitbmm_xla_hmm,
    [](void* stream, ffi::ScratchAllocator scratch, ffi::AnyBuffer emissions, ffi::AnyBuffer transitions,
       ffi::AnyBuffer initial, ffi::AnyBuffer lengths, ffi::Result<ffi::AnyBuffer> score,
       ffi::Result<ffi::AnyBuffer> saved, ffi::Result<ffi::AnyBuffer> path, ffi::Result<ffi::AnyBuffer> workspace,
       std::string_view semiring) {
      return guarded("hmm", stream, [&] {
        return hmm_chain(stream, std::move(scratch), emissions, transitions, initial, lengths, score, saved, path,
                         workspace, semiring);
      });
    },
    JITBMM_XLA_BUFFERS(4, 4).Attr<std::string_view>("semiring"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    jitbmm_xla_hmm_backward,
    [](void* stream, ffi::ScratchAllocator scratch, ffi::AnyBuffer emissions, ffi::AnyBuffer transitions,
       ffi::AnyBuffer initial, ffi::AnyBuffer lengths, ffi::AnyBuffer saved, ffi::AnyBuffer path,
       ffi::AnyBuffer grad_score, ffi::Result<ffi::AnyBuffer> grad_emissions,
       ffi::Result<ffi::AnyBuffer> grad_transitions, ffi::Result<ffi::AnyBuffer> grad_initial,
       ffi::Result<ffi::AnyBuffer> workspace, std::string_view semiring) {
      return guarded("hmm_backward", stream, [&] {
        return hmm_grad(stream, std::move(scratch), emissions, transitions, initial, lengths, saved, path, grad_score,
                        grad_emissions, grad_transitions, grad_initial, workspace, semiring);
      });
    },
    JITBMM_XLA_BUFFERS(7, 4).Attr<std::string_view>("semiring"));

} // namespace jitbmm::xla_ffi

// The bytes of the workspace result of a chain's handler for `problem` (its semiring, dtype, form, B, T, C and
// lengths, batched_transitions and batched_initial read; the strides ignored: the handlers' buffers are contiguous) on
// CUDA device `device`: pass 0 a forward, 1 a forward with the best path, 2 a backward. By the problem's plan, made now
// and kept for the calls: the sizes it gives now hold for every call, by its stand-in or its chosen strategy
// (runtime/chain_stand_in.hpp). An empty batch takes none (its problem is still checked).
extern "C" jitbmm_status jitbmm_xla_chain_workspace(int device, const jitbmm_chain_problem* problem, int pass,
                                                    size_t* bytes) {
  using namespace jitbmm::xla_ffi;
  if (!problem || !problem->semiring || !problem->dtype || !bytes)
    return jitbmm::c_api::fail(JITBMM_INVALID_ARGUMENT, "problem, problem.semiring, problem.dtype, bytes: NULL");
  *bytes = 0;
  if (pass < 0 || pass > 2)
    return jitbmm::c_api::fail(JITBMM_INVALID_ARGUMENT, "pass: expected 0, 1 or 2");
  return jitbmm::c_api::guarded_status([&] {
    Chain c;
    c.semiring = problem->semiring;
    c.problem = contiguous(*problem);
    c.problem.semiring = c.semiring.c_str();
    if (problem->B == 0) return checked(c.problem); // the calls launch nothing
    return in_device_context(device, [&](jitbmm::CUcontext ctx) {
      std::shared_ptr<jitbmm_chain_plan> plan;
      std::size_t need = 0;
      jitbmm_status s = chain_plan(c, ctx, plan);
      if (!s)
        s = pass == 2 ? jitbmm_chain_plan_backward_workspace_bytes(plan.get(), &need)
                      : jitbmm_chain_plan_workspace_bytes(plan.get(), pass == 1, &need);
      *bytes = declared_bytes(need);
      return s;
    });
  });
}
