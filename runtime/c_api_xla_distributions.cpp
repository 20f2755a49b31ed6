// The XLA FFI handlers of the chains' distributions (runtime/c_api_xla.hpp; docs/jax.md), with ragged lengths:
// jitbmm_xla_chain_expectation and its backward (the CRF form's log-partitions and one expectation E_p[F], of which
// jitbmm.jax makes the entropy, cross-entropy and KL, as jitbmm_chain_expectation computes them; the HMM form's are
// in c_api_xla_hmm_distributions.cpp, what both share in c_api_xla_expectation.hpp), and in either form
// jitbmm_xla_chain_kbest and jitbmm_xla_hmm_kbest (the k best paths' scores and states), jitbmm_xla_chain_sample and
// jitbmm_xla_hmm_sample (exact samples, their seed read on the device: a traced key's). jitbmm.jax gave every result
// its shape when it traced the call; each is checked against the plan here, so that a wrong guess is an error, not
// memory written out of bounds.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "runtime/c_api_xla.hpp"
#include "runtime/c_api_xla_expectation.hpp"

namespace jitbmm::xla_ffi {
namespace {

std::string chain_key(const Chain& c, CUcontext ctx) {
  const jitbmm_chain_problem& q = c.problem;
  return std::string(q.dtype) + "|" + (q.form ? q.form : "crf") + "|" + std::to_string(q.B) + "|" +
         std::to_string(q.T) + "|" + std::to_string(q.C) + "|" + std::to_string(q.with_lengths) + "|" +
         std::to_string(q.batched_transitions) + "|" + std::to_string(q.batched_initial) + "|" + context_key(ctx);
}

PlanTable<jitbmm_chain_expectation>& expectation_plans() {
  static auto* table = new PlanTable<jitbmm_chain_expectation>(); // lives for the process, as its modules do
  return *table;
}

PlanTable<jitbmm_chain_kbest>& kbest_plans() {
  static auto* table = new PlanTable<jitbmm_chain_kbest>();
  return *table;
}

PlanTable<jitbmm_chain_sampler>& sampler_plans() {
  static auto* table = new PlanTable<jitbmm_chain_sampler>();
  return *table;
}

// The field's data: p's potentials for the entropy (which takes no field operand), else q's of p's shape and dtype.
ffi::ErrorOr<const void*> field_of(const ffi::AnyBuffer& potentials, const ffi::AnyBuffer& field, int32_t kind) {
  if (ffi::Error e = check_kind(kind); !e.success()) return ffi::Unexpected(e);
  if (kind == kGiven) {
    if (field.element_count() != 0) return ffi::Unexpected(invalid("other: the entropy takes no second chain"));
    return static_cast<const void*>(potentials.untyped_data());
  }
  if (!alike(potentials, field)) return ffi::Unexpected(invalid("other: expected the potentials' shape and dtype"));
  return static_cast<const void*>(field.untyped_data());
}

// An expectation's chain and its field's data, read from the operands.
struct Expectation {
  Chain chain;
  const void* field = nullptr;
};

ffi::ErrorOr<Expectation> expectation_of(const ffi::AnyBuffer& potentials, const ffi::AnyBuffer& field,
                                         const ffi::AnyBuffer& lengths, int32_t kind) {
  auto c = crf("log", potentials, lengths);
  if (c.has_error()) return ffi::Unexpected(c.error());
  auto f = field_of(potentials, field, kind);
  if (f.has_error()) return ffi::Unexpected(f.error());
  return Expectation{std::move(*c), *f};
}

jitbmm_status kbest_plan(Chain& c, int32_t k, CUcontext ctx, std::shared_ptr<jitbmm_chain_kbest>& plan) {
  c.problem.semiring = c.semiring.c_str();
  return kbest_plans().get(
      chain_key(c, ctx) + "|" + std::to_string(k),
      [&](jitbmm_chain_kbest** made) { return jitbmm_chain_kbest_create(&c.problem, k, made); },
      jitbmm_chain_kbest_destroy, plan);
}

jitbmm_status sampler_plan(Chain& c, CUcontext ctx, std::shared_ptr<jitbmm_chain_sampler>& plan) {
  c.problem.semiring = c.semiring.c_str();
  return sampler_plans().get(
      chain_key(c, ctx), [&](jitbmm_chain_sampler** made) { return jitbmm_chain_sampler_create(&c.problem, made); },
      jitbmm_chain_sampler_destroy, plan);
}

ffi::Error expectation(void* stream, ffi::AnyBuffer potentials, ffi::AnyBuffer field, ffi::AnyBuffer lengths,
                       ffi::Result<ffi::AnyBuffer> log_z, ffi::Result<ffi::AnyBuffer> mean,
                       ffi::Result<ffi::AnyBuffer> saved, int32_t kind) {
  auto c = expectation_of(potentials, field, lengths, kind);
  if (c.has_error()) return c.error();
  return expectation_forward(c->chain, kind, score_type(potentials.element_type()), stream, *log_z, *mean, *saved,
                             [&](jitbmm_chain_expectation* plan, void* keep) {
                               return jitbmm_chain_expectation_run(plan, potentials.untyped_data(), c->field,
                                                                   c->chain.lengths, log_z->untyped_data(),
                                                                   mean->untyped_data(), keep, stream);
                             });
}

ffi::Error expectation_grad(void* stream, ffi::ScratchAllocator& allocator, ffi::AnyBuffer potentials,
                            ffi::AnyBuffer field, ffi::AnyBuffer lengths, ffi::AnyBuffer saved, ffi::AnyBuffer log_z,
                            ffi::AnyBuffer mean, ffi::AnyBuffer grad_log_z, ffi::AnyBuffer grad_mean,
                            ffi::Result<ffi::AnyBuffer> grad_potentials, ffi::Result<ffi::AnyBuffer> grad_field,
                            ffi::Result<ffi::AnyBuffer> declared, int32_t kind) {
  auto c = expectation_of(potentials, field, lengths, kind);
  if (c.has_error()) return c.error();
  if (ffi::Error e = expected_like(*grad_potentials, "grad_potentials", potentials); !e.success()) return e;
  if (ffi::Error e = expected(*grad_field, "grad_field", field.element_type(),
                              kind == kGiven ? 0 : static_cast<int64_t>(field.element_count()));
      !e.success())
    return e;
  return expectation_backward(
      c->chain, kind, score_type(potentials.element_type()), stream, allocator, saved, log_z, mean, grad_log_z,
      grad_mean, *declared, [&](jitbmm_chain_expectation* plan, void* ws, std::size_t bytes) {
        return jitbmm_chain_expectation_backward(
            plan, potentials.untyped_data(), c->field, c->chain.lengths, saved.untyped_data(), log_z.untyped_data(),
            mean.untyped_data(), data_or_null(grad_log_z), grad_mean.untyped_data(), grad_potentials->untyped_data(),
            data_or_null(*grad_field), ws, bytes, stream);
      });
}

// The k best paths' scores [B][k] and states [B][k][T] of chain c (either form), which run(plan, lengths, scores,
// paths, workspace, bytes) computes from its operands; `like` the operand whose dtype the scores follow.
template <class Run>
ffi::Error kbest(ffi::ErrorOr<Chain> c, const ffi::AnyBuffer& like, void* stream, ffi::ScratchAllocator& allocator,
                 ffi::Result<ffi::AnyBuffer> scores, ffi::Result<ffi::AnyBuffer> paths,
                 ffi::Result<ffi::AnyBuffer> declared, int32_t k, Run run) {
  if (c.has_error()) return c.error();
  const int64_t B = c->problem.B, T = c->problem.T;
  if (ffi::Error e = expected(*scores, "scores", score_type(like.element_type()), B * k); !e.success()) return e;
  if (ffi::Error e = expected(*paths, "paths", ffi::DataType::S32, B * k * T); !e.success()) return e;
  if (B == 0) return ffi::Error::Success();
  StreamContext context(stream);
  std::shared_ptr<jitbmm_chain_kbest> plan;
  if (const jitbmm_status s = kbest_plan(*c, k, context.context, plan)) return failed(s);
  std::size_t bytes = 0;
  if (const jitbmm_status s = jitbmm_chain_kbest_workspace_bytes(plan.get(), &bytes)) return failed(s);
  auto ws = workspace(*declared, allocator, bytes, stream);
  if (ws.has_error()) return ws.error();
  const jitbmm_status s = run(plan.get(), c->lengths, scores->untyped_data(),
                              static_cast<int32_t*>(paths->untyped_data()), ws->data, ws->bytes);
  return s ? failed(s) : ffi::Error::Success();
}

// n paths of each sequence of chain c (either form), [B][n][T] int32, their seed the 8 bytes of `seed` on the device,
// which run(plan, lengths, seed, paths, workspace, bytes) draws from its operands.
template <class Run>
ffi::Error sample(ffi::ErrorOr<Chain> c, void* stream, ffi::ScratchAllocator& allocator, ffi::AnyBuffer seed,
                  ffi::Result<ffi::AnyBuffer> paths, ffi::Result<ffi::AnyBuffer> declared, int64_t n, Run run) {
  if (c.has_error()) return c.error();
  if (n < 0) return invalid("n: the paths to draw, at least 0 (got " + std::to_string(n) + ")");
  if (seed.size_bytes() != 8)
    return invalid("seed: 8 bytes (two uint32) expected, got " + std::to_string(seed.size_bytes()));
  const int64_t B = c->problem.B, T = c->problem.T;
  if (ffi::Error e = expected(*paths, "paths", ffi::DataType::S32, B * n * T); !e.success()) return e;
  if (B == 0 || n == 0) return ffi::Error::Success();
  StreamContext context(stream);
  std::shared_ptr<jitbmm_chain_sampler> plan;
  if (const jitbmm_status s = sampler_plan(*c, context.context, plan)) return failed(s);
  std::size_t bytes = 0;
  if (const jitbmm_status s = jitbmm_chain_sampler_workspace_bytes(plan.get(), &bytes)) return failed(s);
  auto ws = workspace(*declared, allocator, bytes, stream);
  if (ws.has_error()) return ws.error();
  const jitbmm_status s = run(plan.get(), c->lengths, static_cast<const uint64_t*>(seed.untyped_data()),
                              static_cast<int32_t*>(paths->untyped_data()), ws->data, ws->bytes);
  return s ? failed(s) : ffi::Error::Success();
}

} // namespace

ffi::Error check_kind(int32_t kind) {
  if (kind < kGiven || kind > kDifference) return invalid("kind: " + std::to_string(kind) + " (expected 0, 1 or 2)");
  return ffi::Error::Success();
}

bool alike(const ffi::AnyBuffer& p, const ffi::AnyBuffer& q) {
  const auto a = p.dimensions(), b = q.dimensions();
  bool same = p.element_type() == q.element_type() && a.size() == b.size();
  for (std::size_t i = 0; same && i < a.size(); ++i) same = a[i] == b[i];
  return same;
}

jitbmm_status expectation_plan(Chain& c, int32_t kind, CUcontext ctx, std::shared_ptr<jitbmm_chain_expectation>& plan) {
  c.problem.semiring = c.semiring.c_str();
  return expectation_plans().get(
      chain_key(c, ctx) + "|" + std::to_string(kind),
      [&](jitbmm_chain_expectation** made) { return jitbmm_chain_expectation_create(&c.problem, kind, made); },
      jitbmm_chain_expectation_destroy, plan);
}

ffi::Error check_expectation_scores(int32_t kind, int64_t B, ffi::DataType score, const ffi::AnyBuffer& log_z,
                                    const ffi::AnyBuffer& mean, bool upstream) {
  const int64_t rows = kind == kGiven ? 1 : 2;
  if (!upstream || log_z.element_count() != 0)
    if (ffi::Error e = expected(log_z, upstream ? "grad_log_z" : "log_z", score, rows * B); !e.success()) return e;
  return expected(mean, upstream ? "grad_mean" : "mean", score, B);
}

ffi::Error check_saved(const jitbmm_chain_expectation* plan, const ffi::AnyBuffer& saved, std::size_t* workspace) {
  std::size_t bytes = 0;
  if (const jitbmm_status s = jitbmm_chain_expectation_bytes(plan, &bytes, workspace)) return failed(s);
  if (saved.element_count() != 0 && saved.size_bytes() != bytes)
    return invalid("saved: " + std::to_string(saved.size_bytes()) + " bytes, the plan keeps " + std::to_string(bytes));
  return ffi::Error::Success();
}

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    jitbmm_xla_chain_sample,
    [](void* stream, ffi::ScratchAllocator scratch, ffi::AnyBuffer potentials, ffi::AnyBuffer lengths,
       ffi::AnyBuffer seed, ffi::Result<ffi::AnyBuffer> paths, ffi::Result<ffi::AnyBuffer> workspace, int64_t n) {
      return guarded("chain_sample", stream, [&] {
        return sample(crf("log", potentials, lengths), stream, scratch, seed, paths, workspace, n,
                      [&](jitbmm_chain_sampler* plan, const int64_t* len, const uint64_t* at, int32_t* out, void* ws,
                          std::size_t bytes) {
                        return jitbmm_chain_sampler_run_device_seed(plan, potentials.untyped_data(), len, n, at, out,
                                                                    ws, bytes, stream);
                      });
      });
    },
    JITBMM_XLA_BUFFERS(3, 2).Attr<int64_t>("n"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    jitbmm_xla_hmm_sample,
    [](void* stream, ffi::ScratchAllocator scratch, ffi::AnyBuffer emissions, ffi::AnyBuffer transitions,
       ffi::AnyBuffer initial, ffi::AnyBuffer lengths, ffi::AnyBuffer seed, ffi::Result<ffi::AnyBuffer> paths,
       ffi::Result<ffi::AnyBuffer> workspace, int64_t n) {
      return guarded("hmm_sample", stream, [&] {
        return sample(hmm("log", emissions, transitions, initial, lengths), stream, scratch, seed, paths, workspace, n,
                      [&](jitbmm_chain_sampler* plan, const int64_t* len, const uint64_t* at, int32_t* out, void* ws,
                          std::size_t bytes) {
                        return jitbmm_chain_sampler_run_hmm_device_seed(
                            plan, emissions.untyped_data(), transitions.untyped_data(), initial.untyped_data(), len, n,
                            at, out, ws, bytes, stream);
                      });
      });
    },
    JITBMM_XLA_BUFFERS(5, 2).Attr<int64_t>("n"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    jitbmm_xla_chain_expectation,
    [](void* stream, ffi::ScratchAllocator, ffi::AnyBuffer potentials, ffi::AnyBuffer field, ffi::AnyBuffer lengths,
       ffi::Result<ffi::AnyBuffer> log_z, ffi::Result<ffi::AnyBuffer> mean, ffi::Result<ffi::AnyBuffer> saved,
       int32_t kind) {
      return guarded("chain_expectation", stream,
                     [&] { return expectation(stream, potentials, field, lengths, log_z, mean, saved, kind); });
    },
    JITBMM_XLA_BUFFERS(3, 3).Attr<int32_t>("kind"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    jitbmm_xla_chain_expectation_backward,
    [](void* stream, ffi::ScratchAllocator scratch, ffi::AnyBuffer potentials, ffi::AnyBuffer field,
       ffi::AnyBuffer lengths, ffi::AnyBuffer saved, ffi::AnyBuffer log_z, ffi::AnyBuffer mean,
       ffi::AnyBuffer grad_log_z, ffi::AnyBuffer grad_mean, ffi::Result<ffi::AnyBuffer> grad_potentials,
       ffi::Result<ffi::AnyBuffer> grad_field, ffi::Result<ffi::AnyBuffer> workspace, int32_t kind) {
      return guarded("chain_expectation_backward", stream, [&] {
        return expectation_grad(stream, scratch, potentials, field, lengths, saved, log_z, mean, grad_log_z, grad_mean,
                                grad_potentials, grad_field, workspace, kind);
      });
    },
    JITBMM_XLA_BUFFERS(8, 3).Attr<int32_t>("kind"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    jitbmm_xla_chain_kbest,
    [](void* stream, ffi::ScratchAllocator scratch, ffi::AnyBuffer potentials, ffi::AnyBuffer lengths,
       ffi::Result<ffi::AnyBuffer> scores, ffi::Result<ffi::AnyBuffer> paths, ffi::Result<ffi::AnyBuffer> workspace,
       int32_t k) {
      return guarded("chain_kbest", stream, [&] {
        return kbest(
            crf("max_plus", potentials, lengths), potentials, stream, scratch, scores, paths, workspace, k,
            [&](jitbmm_chain_kbest* plan, const int64_t* len, void* s, int32_t* out, void* ws, std::size_t bytes) {
              return jitbmm_chain_kbest_run(plan, potentials.untyped_data(), len, s, out, ws, bytes, stream);
            });
      });
    },
    JITBMM_XLA_BUFFERS(2, 3).Attr<int32_t>("k"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    jitbmm_xla_hmm_kbest,
    [](void* stream, ffi::ScratchAllocator scratch, ffi::AnyBuffer emissions, ffi::AnyBuffer transitions,
       ffi::AnyBuffer initial, ffi::AnyBuffer lengths, ffi::Result<ffi::AnyBuffer> scores,
       ffi::Result<ffi::AnyBuffer> paths, ffi::Result<ffi::AnyBuffer> workspace, int32_t k) {
      return guarded("hmm_kbest", stream, [&] {
        return kbest(
            hmm("max_plus", emissions, transitions, initial, lengths), emissions, stream, scratch, scores, paths,
            workspace, k,
            [&](jitbmm_chain_kbest* plan, const int64_t* len, void* s, int32_t* out, void* ws, std::size_t bytes) {
              return jitbmm_chain_kbest_run_hmm(plan, emissions.untyped_data(), transitions.untyped_data(),
                                                initial.untyped_data(), len, s, out, ws, bytes, stream);
            });
      });
    },
    JITBMM_XLA_BUFFERS(4, 3).Attr<int32_t>("k"));

} // namespace jitbmm::xla_ffi

namespace {
// What each jitbmm_xla_chain_*_workspace function below does: its arguments checked, then for a problem of sequences
// (its dtype, form, B, T, C, lengths and batched_* flags read; the semiring `semiring`) the plan made or found in the
// primary context of
// CUDA device `device`, and the bytes to declare for what `need(chain, context, bytes)` says the plan takes.
template <class Need>
jitbmm_status sized(int device, const jitbmm_chain_problem* problem, const char* semiring, size_t* bytes, Need need) {
  using namespace jitbmm::xla_ffi;
  if (!problem || !problem->dtype || !bytes)
    return jitbmm::c_api::fail(JITBMM_INVALID_ARGUMENT, "problem, problem.dtype, bytes: must not be NULL");
  *bytes = 0;
  return jitbmm::c_api::guarded_status([&] {
    Chain c;
    c.semiring = semiring;
    c.problem = contiguous(*problem);
    c.problem.semiring = c.semiring.c_str();
    if (problem->B == 0) return checked(c.problem); // the calls launch nothing
    return in_device_context(device, [&](jitbmm::CUcontext ctx) {
      std::size_t n = 0;
      const jitbmm_status s = need(c, ctx, n);
      *bytes = declared_bytes(n);
      return s;
    });
  });
}
} // namespace

// The bytes of the workspace result of jitbmm_xla_chain_expectation_backward and jitbmm_xla_hmm_expectation_backward
// (the forwards take none) for an expectation of `kind`, of jitbmm_xla_chain_kbest and jitbmm_xla_hmm_kbest for the k
// best paths, and of jitbmm_xla_chain_sample and jitbmm_xla_hmm_sample (`n`, the samples, unused: its scratch holds
// the chain's forward messages), of a `problem` of either form, on CUDA device `device`: by its plan, made now and
// kept for the calls.
extern "C" jitbmm_status jitbmm_xla_chain_expectation_workspace(int device, const jitbmm_chain_problem* problem,
                                                                int kind, size_t* bytes) {
  using namespace jitbmm::xla_ffi;
  return sized(device, problem, "log", bytes, [&](Chain& c, jitbmm::CUcontext ctx, std::size_t& need) {
    std::shared_ptr<jitbmm_chain_expectation> plan;
    std::size_t saved = 0;
    const jitbmm_status s = expectation_plan(c, kind, ctx, plan);
    return s ? s : jitbmm_chain_expectation_bytes(plan.get(), &saved, &need);
  });
}

extern "C" jitbmm_status jitbmm_xla_chain_kbest_workspace(int device, const jitbmm_chain_problem* problem, int k,
                                                          size_t* bytes) {
  using namespace jitbmm::xla_ffi;
  return sized(device, problem, "max_plus", bytes, [&](Chain& c, jitbmm::CUcontext ctx, std::size_t& need) {
    std::shared_ptr<jitbmm_chain_kbest> plan;
    const jitbmm_status s = kbest_plan(c, k, ctx, plan);
    return s ? s : jitbmm_chain_kbest_workspace_bytes(plan.get(), &need);
  });
}

extern "C" jitbmm_status jitbmm_xla_chain_sample_workspace(int device, const jitbmm_chain_problem* problem, int n,
                                                           size_t* bytes) {
  using namespace jitbmm::xla_ffi;
  static_cast<void>(n);
  return sized(device, problem, "log", bytes, [&](Chain& c, jitbmm::CUcontext ctx, std::size_t& need) {
    std::shared_ptr<jitbmm_chain_sampler> plan;
    const jitbmm_status s = sampler_plan(c, ctx, plan);
    return s ? s : jitbmm_chain_sampler_workspace_bytes(plan.get(), &need);
  });
}
