// The XLA FFI handlers of the semiring products (runtime/c_api_xla.hpp; docs/jax.md): jitbmm_xla_bmm and
// jitbmm_xla_bmm_backward, out[..., M, N] = ⊕_k a[..., M, K] ⊗ b[..., K, N] with the batches equal after jitbmm.jax's
// broadcast, and their gradients. An operand of two dimensions is one matrix for every batch (a batch stride of 0,
// its gradient the sum over the batch), so that a shared weight is not copied per batch.
#include <memory>
#include <string>
#include <string_view>

#include "runtime/c_api_xla.hpp"

namespace jitbmm::xla_ffi {
namespace {

struct Product {
  std::string semiring, precision;
  jitbmm_problem problem{};
  bool empty = false;
};

// The problem of B products [M, K] ⊗ [K, N]; a_shared / b_shared: that operand is one matrix for every batch.
jitbmm_status problem_of(Product& p, const char* dtype, int64_t B, int64_t M, int64_t K, int64_t N, bool a_shared,
                         bool b_shared, bool with_argmax) {
  if (const jitbmm_status s = jitbmm_problem_row_major(&p.problem, p.semiring.c_str(), dtype, B, M, K, N)) return s;
  p.problem.precision = p.precision.c_str(); // the strings live in p; product_plan points at them again after moves
  p.problem.with_argmax = with_argmax;
  if (a_shared) p.problem.a_strides[0] = 0;
  if (b_shared) p.problem.b_strides[0] = 0;
  p.empty = B == 0 || M == 0 || N == 0;
  return JITBMM_OK;
}

ffi::ErrorOr<Product> product(std::string_view semiring, std::string_view precision, const ffi::AnyBuffer& a,
                              const ffi::AnyBuffer& b, bool with_argmax) {
  Product p;
  p.semiring = std::string(semiring), p.precision = std::string(precision);
  const char* dtype = dtype_name(a.element_type());
  if (!dtype) return ffi::Unexpected(invalid("a: unsupported dtype (expected float32, float64, float16 or bfloat16)"));
  if (b.element_type() != a.element_type()) return ffi::Unexpected(invalid("b: its dtype differs from a's"));
  const bool a_shared = a.dimensions().size() == 2, b_shared = b.dimensions().size() == 2;
  const int64_t B = a_shared ? (b_shared ? 1 : leading(b, 2)) : leading(a, 2);
  if (B < 0 || (!a_shared && leading(a, 2) != B) || (!b_shared && leading(b, 2) != B))
    return ffi::Unexpected(invalid("a, b: expected [..., M, K] and [..., K, N] of one batch (or either of two "
                                   "dimensions, one matrix for every batch)"));
  if (dim(b, 2) != dim(a, 1)) return ffi::Unexpected(invalid("b: its rows differ from a's columns (K)"));
  const int64_t M = dim(a, 2), K = dim(a, 1), N = dim(b, 1);
  if (const jitbmm_status s = problem_of(p, dtype, B, M, K, N, a_shared, b_shared, with_argmax))
    return ffi::Unexpected(failed(s));
  return p;
}

// out [..., M, N] in a's dtype and, where wanted, its argmax in int32.
ffi::Error outputs_of(const Product& p, const ffi::AnyBuffer& a, const ffi::AnyBuffer& out,
                      const ffi::AnyBuffer& argmax, bool with_argmax) {
  const int64_t outputs = p.problem.B * p.problem.M * p.problem.N; // within int64: validated in product()
  if (ffi::Error e = expected(out, "out", a.element_type(), outputs); !e.success()) return e;
  return with_argmax ? expected(argmax, "argmax", ffi::DataType::S32, outputs) : ffi::Error::Success();
}

PlanTable<jitbmm_plan>& product_plans() {
  static auto* table = new PlanTable<jitbmm_plan>(); // lives for the process, as the modules it holds do
  return *table;
}

jitbmm_status product_plan(Product& p, void* stream, CUcontext ctx, std::shared_ptr<jitbmm_plan>& plan) {
  p.problem.semiring = p.semiring.c_str(), p.problem.precision = p.precision.c_str();
  const jitbmm_problem& q = p.problem;
  const std::string key = p.semiring + "|" + p.precision + "|" + q.dtype + "|" + std::to_string(q.B) + "|" +
                          std::to_string(q.M) + "|" + std::to_string(q.K) + "|" + std::to_string(q.N) + "|" +
                          std::to_string(q.with_argmax) + "|" + std::to_string(q.a_strides[0] == 0) +
                          std::to_string(q.b_strides[0] == 0) + "|" + context_key(ctx);
  return product_plans().get(
      key, [&](jitbmm_plan** made) { return jitbmm_plan_create_on_stream(&q, stream, made); }, jitbmm_plan_destroy,
      plan);
}

ffi::Error bmm(void* stream, ffi::ScratchAllocator allocator, ffi::AnyBuffer a, ffi::AnyBuffer b,
               ffi::Result<ffi::AnyBuffer> out, ffi::Result<ffi::AnyBuffer> argmax,
               ffi::Result<ffi::AnyBuffer> declared, std::string_view semiring, std::string_view precision) {
  const bool with_argmax = argmax->element_count() != 0;
  auto p = product(semiring, precision, a, b, with_argmax);
  if (p.has_error()) return p.error();
  if (ffi::Error e = outputs_of(*p, a, *out, *argmax, with_argmax); !e.success()) return e;
  if (p->empty) return ffi::Error::Success();
  StreamContext context(stream);
  std::shared_ptr<jitbmm_plan> plan;
  if (const jitbmm_status s = product_plan(*p, stream, context.context, plan)) return failed(s);
  std::size_t bytes = 0;
  if (const jitbmm_status s = jitbmm_plan_workspace_bytes(plan.get(), &bytes)) return failed(s);
  auto ws = workspace(*declared, allocator, bytes, stream);
  if (ws.has_error()) return ws.error();
  const jitbmm_status s = jitbmm_plan_run_with_workspace(
      plan.get(), a.untyped_data(), b.untyped_data(), out->untyped_data(),
      with_argmax ? static_cast<int32_t*>(argmax->untyped_data()) : nullptr, ws->data, ws->bytes, stream);
  return s ? failed(s) : ffi::Error::Success();
}

ffi::Error bmm_backward(void* stream, ffi::ScratchAllocator allocator, ffi::AnyBuffer a, ffi::AnyBuffer b,
                        ffi::AnyBuffer out, ffi::AnyBuffer argmax, ffi::AnyBuffer grad_out,
                        ffi::Result<ffi::AnyBuffer> grad_a, ffi::Result<ffi::AnyBuffer> grad_b,
                        ffi::Result<ffi::AnyBuffer> declared, std::string_view semiring, std::string_view precision) {
  const bool with_argmax = argmax.element_count() != 0;
  auto p = product(semiring, precision, a, b, with_argmax);
  if (p.has_error()) return p.error();
  if (ffi::Error e = outputs_of(*p, a, out, argmax, with_argmax); !e.success()) return e;
  if (ffi::Error e = expected_like(grad_out, "grad_out", out); !e.success()) return e;
  if (ffi::Error e = expected_like(*grad_a, "grad_a", a); !e.success()) return e;
  if (ffi::Error e = expected_like(*grad_b, "grad_b", b); !e.success()) return e;
  if (p->empty || a.element_count() == 0 || b.element_count() == 0) // nothing flows: the gradients there are 0
    return zeroed(stream, {&*grad_a, &*grad_b});
  StreamContext context(stream);
  std::shared_ptr<jitbmm_plan> plan;
  if (const jitbmm_status s = product_plan(*p, stream, context.context, plan)) return failed(s);
  std::size_t bytes = 0;
  if (const jitbmm_status s =
          jitbmm_plan_backward_workspace_bytes_on_stream(plan.get(), 1, 1, with_argmax, stream, &bytes))
    return failed(s);
  auto ws = workspace(*declared, allocator, bytes, stream);
  if (ws.has_error()) return ws.error();
  const jitbmm_status s = jitbmm_plan_backward_with_workspace(
      plan.get(), a.untyped_data(), b.untyped_data(), out.untyped_data(), data_or_null<const int32_t>(argmax),
      grad_out.untyped_data(), grad_a->untyped_data(), grad_b->untyped_data(), ws->data, ws->bytes, stream);
  return s ? failed(s) : ffi::Error::Success();
}

} // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    jitbmm_xla_bmm,
    [](void* stream, ffi::ScratchAllocator scratch, ffi::AnyBuffer a, ffi::AnyBuffer b, ffi::Result<ffi::AnyBuffer> out,
       ffi::Result<ffi::AnyBuffer> argmax, ffi::Result<ffi::AnyBuffer> workspace, std::string_view semiring,
       std::string_view precision) {
      return guarded("bmm", stream, [&] {
        return bmm(stream, std::move(scratch), a, b, out, argmax, workspace, semiring, precision);
      });
    },
    JITBMM_XLA_BUFFERS(2, 3).Attr<std::string_view>("semiring").Attr<std::string_view>("precision"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    jitbmm_xla_bmm_backward,
    [](void* stream, ffi::ScratchAllocator scratch, ffi::AnyBuffer a, ffi::AnyBuffer b, ffi::AnyBuffer out,
       ffi::AnyBuffer argmax, ffi::AnyBuffer grad_out, ffi::Result<ffi::AnyBuffer> grad_a,
       ffi::Result<ffi::AnyBuffer> grad_b, ffi::Result<ffi::AnyBuffer> workspace, std::string_view semiring,
       std::string_view precision) {
      return guarded("bmm_backward", stream, [&] {
        return bmm_backward(stream, std::move(scratch), a, b, out, argmax, grad_out, grad_a, grad_b, workspace,
                            semiring, precision);
      });
    },
    JITBMM_XLA_BUFFERS(5, 3).Attr<std::string_view>("semiring").Attr<std::string_view>("precision"));

} // namespace jitbmm::xla_ffi

// The bytes of the workspace result of jitbmm_xla_bmm (backward 0) or jitbmm_xla_bmm_backward (1) for a problem on
// CUDA device `device`, by its plan, made now (tuned as the process's policy allows) and kept for the calls.
// a_shared / b_shared: that operand has two dimensions, one matrix for every batch.
extern "C" jitbmm_status jitbmm_xla_bmm_workspace(int device, const char* semiring, const char* precision,
                                                  const char* dtype, int64_t B, int64_t M, int64_t K, int64_t N,
                                                  int a_shared, int b_shared, int with_argmax, int backward,
                                                  size_t* bytes) {
  using namespace jitbmm::xla_ffi;
  if (!semiring || !precision || !dtype || !bytes)
    return jitbmm::c_api::fail(JITBMM_INVALID_ARGUMENT, "semiring, precision, dtype, bytes: must not be NULL");
  *bytes = 0;
  return jitbmm::c_api::guarded_status([&] {
    Product p;
    p.semiring = semiring, p.precision = precision;
    if (const jitbmm_status s = problem_of(p, dtype, B, M, K, N, a_shared != 0, b_shared != 0, with_argmax != 0))
      return s;
    if (B == 0 || M == 0 || N == 0 || (backward && K == 0)) return JITBMM_OK; // the calls launch nothing
    return in_device_context(device, [&](jitbmm::CUcontext ctx) {
      std::shared_ptr<jitbmm_plan> plan;
      std::size_t need = 0;
      jitbmm_status s = product_plan(p, nullptr, ctx, plan);
      if (!s)
        s = backward ? jitbmm_plan_backward_workspace_bytes(plan.get(), 1, 1, with_argmax, &need)
                     : jitbmm_plan_workspace_bytes(plan.get(), &need);
      *bytes = declared_bytes(need);
      return s;
    });
  });
}
