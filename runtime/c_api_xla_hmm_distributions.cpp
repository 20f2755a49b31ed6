// The XLA FFI handlers of the HMM form's expectations (runtime/c_api_xla_expectation.hpp; docs/jax.md), with ragged
// lengths: jitbmm_xla_hmm_expectation and its backward, log Z and E_p[F] of chains p given by their tables and of a
// field given by a second set of tables of the same shapes (q's; none for the entropy, whose field is p's own tables),
// of which jitbmm.jax makes hmm_entropy, hmm_cross_entropy and hmm_kl, as jitbmm_chain_expectation_run_hmm computes
// them. No potential is formed. Every result's shape, which jitbmm.jax gave it when it traced the call, is checked
// against the plan here.
#include <cstddef>
#include <cstdint>
#include <utility>

#include "runtime/c_api_xla.hpp"
#include "runtime/c_api_xla_expectation.hpp"

namespace jitbmm::xla_ffi {
namespace {

// An HMM expectation's chain, p's tables and its field's, read from the operands.
struct HmmExpectation {
  Chain chain;
  jitbmm_hmm_tables hmm{}, field{};
};

// The field's tables are q's, each of p's table's shape and dtype (shared where p's is), or for the entropy p's own
// (it takes no q operands: each has no elements).
ffi::ErrorOr<HmmExpectation> hmm_expectation_of(const ffi::AnyBuffer& emissions, const ffi::AnyBuffer& transitions,
                                                const ffi::AnyBuffer& initial, const ffi::AnyBuffer& q_emissions,
                                                const ffi::AnyBuffer& q_transitions, const ffi::AnyBuffer& q_initial,
                                                const ffi::AnyBuffer& lengths, int32_t kind) {
  if (ffi::Error e = check_kind(kind); !e.success()) return ffi::Unexpected(e);
  auto c = hmm("log", emissions, transitions, initial, lengths);
  if (c.has_error()) return ffi::Unexpected(c.error());
  HmmExpectation x{std::move(*c),
                   {emissions.untyped_data(), transitions.untyped_data(), initial.untyped_data()},
                   {q_emissions.untyped_data(), q_transitions.untyped_data(), q_initial.untyped_data()}};
  if (kind == kGiven) {
    if (q_emissions.element_count() != 0 || q_transitions.element_count() != 0 || q_initial.element_count() != 0)
      return ffi::Unexpected(invalid("q_emissions, q_transitions, q_initial: the entropy takes no second chain"));
    x.field = x.hmm; // the same pointers: p's tables are read once
    return x;
  }
  if (!alike(emissions, q_emissions))
    return ffi::Unexpected(invalid("q_emissions: expected the emissions' shape and dtype"));
  if (!alike(transitions, q_transitions))
    return ffi::Unexpected(
        invalid("q_transitions: expected the transitions' shape and dtype (shared where theirs is)"));
  if (!alike(initial, q_initial))
    return ffi::Unexpected(invalid("q_initial: expected the initial table's shape and dtype (shared where it is)"));
  return x;
}

ffi::Error hmm_expectation(void* stream, ffi::AnyBuffer emissions, ffi::AnyBuffer transitions, ffi::AnyBuffer initial,
                           ffi::AnyBuffer q_emissions, ffi::AnyBuffer q_transitions, ffi::AnyBuffer q_initial,
                           ffi::AnyBuffer lengths, ffi::Result<ffi::AnyBuffer> log_z, ffi::Result<ffi::AnyBuffer> mean,
                           ffi::Result<ffi::AnyBuffer> saved, int32_t kind) {
  auto x = hmm_expectation_of(emissions, transitions, initial, q_emissions, q_transitions, q_initial, lengths, kind);
  if (x.has_error()) return x.error();
  return expectation_forward(x->chain, kind, score_type(emissions.element_type()), stream, *log_z, *mean, *saved,
                             [&](jitbmm_chain_expectation* plan, void* keep) {
                               return jitbmm_chain_expectation_run_hmm(plan, &x->hmm, &x->field, x->chain.lengths,
                                                                       log_z->untyped_data(), mean->untyped_data(),
                                                                       keep, stream);
                             });
}

// The tables' operands and their gradients' results, p's then q's, in the handler's order.
constexpr int kTables = 6;
const char* const kGradNames[kTables] = {"grad_emissions",   "grad_transitions",   "grad_initial",
                                         "grad_q_emissions", "grad_q_transitions", "grad_q_initial"};

ffi::Error hmm_expectation_grad(void* stream, ffi::ScratchAllocator& allocator,
                                const ffi::AnyBuffer* (&tables)[kTables], ffi::AnyBuffer lengths, ffi::AnyBuffer saved,
                                ffi::AnyBuffer log_z, ffi::AnyBuffer mean, ffi::AnyBuffer grad_log_z,
                                ffi::AnyBuffer grad_mean, ffi::AnyBuffer* (&grads)[kTables], ffi::AnyBuffer& declared,
                                int32_t kind) {
  auto x = hmm_expectation_of(*tables[0], *tables[1], *tables[2], *tables[3], *tables[4], *tables[5], lengths, kind);
  if (x.has_error()) return x.error();
  // Each gradient is its table's shape and dtype; the entropy's absent q tables have none.
  for (int j = 0; j < kTables; ++j)
    if (ffi::Error e = expected_like(*grads[j], kGradNames[j], *tables[j]); !e.success()) return e;
  ffi::Error e = expectation_backward(
      x->chain, kind, score_type(tables[0]->element_type()), stream, allocator, saved, log_z, mean, grad_log_z,
      grad_mean, declared, [&](jitbmm_chain_expectation* plan, void* ws, std::size_t bytes) {
        const jitbmm_hmm_gradients grad_hmm{data_or_null(*grads[0]), data_or_null(*grads[1]), data_or_null(*grads[2])},
            grad_field{data_or_null(*grads[3]), data_or_null(*grads[4]), data_or_null(*grads[5])};
        return jitbmm_chain_expectation_backward_hmm(
            plan, &x->hmm, &x->field, x->chain.lengths, saved.untyped_data(), log_z.untyped_data(), mean.untyped_data(),
            data_or_null(grad_log_z), grad_mean.untyped_data(), &grad_hmm, &grad_field, ws, bytes, stream);
      });
  if (!e.success() || x->chain.problem.B != 0) return e;
  // No sequence: a shared table's gradient is 0 (the others have no elements).
  return zeroed(stream, {grads[0], grads[1], grads[2], grads[3], grads[4], grads[5]});
}

} // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    jitbmm_xla_hmm_expectation,
    [](void* stream, ffi::ScratchAllocator, ffi::AnyBuffer emissions, ffi::AnyBuffer transitions,
       ffi::AnyBuffer initial, ffi::AnyBuffer q_emissions, ffi::AnyBuffer q_transitions, ffi::AnyBuffer q_initial,
       ffi::AnyBuffer lengths, ffi::Result<ffi::AnyBuffer> log_z, ffi::Result<ffi::AnyBuffer> mean,
       ffi::Result<ffi::AnyBuffer> saved, int32_t kind) {
      return guarded("hmm_expectation", stream, [&] {
        return hmm_expectation(stream, emissions, transitions, initial, q_emissions, q_transitions, q_initial, lengths,
                               log_z, mean, saved, kind);
      });
    },
    JITBMM_XLA_BUFFERS(7, 3).Attr<int32_t>("kind"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    jitbmm_xla_hmm_expectation_backward,
    [](void* stream, ffi::ScratchAllocator scratch, ffi::AnyBuffer emissions, ffi::AnyBuffer transitions,
       ffi::AnyBuffer initial, ffi::AnyBuffer q_emissions, ffi::AnyBuffer q_transitions, ffi::AnyBuffer q_initial,
       ffi::AnyBuffer lengths, ffi::AnyBuffer saved, ffi::AnyBuffer log_z, ffi::AnyBuffer mean,
       ffi::AnyBuffer grad_log_z, ffi::AnyBuffer grad_mean, ffi::Result<ffi::AnyBuffer> grad_emissions,
       ffi::Result<ffi::AnyBuffer> grad_transitions, ffi::Result<ffi::AnyBuffer> grad_initial,
       ffi::Result<ffi::AnyBuffer> grad_q_emissions, ffi::Result<ffi::AnyBuffer> grad_q_transitions,
       ffi::Result<ffi::AnyBuffer> grad_q_initial, ffi::Result<ffi::AnyBuffer> workspace, int32_t kind) {
      return guarded("hmm_expectation_backward", stream, [&] {
        const ffi::AnyBuffer* tables[kTables] = {&emissions,   &transitions,   &initial,
                                                 &q_emissions, &q_transitions, &q_initial};
        ffi::AnyBuffer* grads[kTables] = {&*grad_emissions,   &*grad_transitions,   &*grad_initial,
                                          &*grad_q_emissions, &*grad_q_transitions, &*grad_q_initial};
        return hmm_expectation_grad(stream, scratch, tables, lengths, saved, log_z, mean, grad_log_z, grad_mean, grads,
                                    *workspace, kind);
      });
    },
    JITBMM_XLA_BUFFERS(12, 7).Attr<int32_t>("kind"));

} // namespace jitbmm::xla_ffi
