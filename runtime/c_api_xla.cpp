// The C library's face for JAX: XLA FFI handlers (docs/jax.md) over the C ABI, built where XLA's FFI headers were
// found (they come with jaxlib; CMake's JITBMM_XLA_FFI_INCLUDE). Each handler folds its operands' leading
// dimensions into the batch, takes a plan from a process-wide table (made on the stream's context the first time a
// problem is seen, tuned unless the stream is being captured), its scratch from XLA's allocator, and launches on
// XLA's stream. Shapes and dtypes were checked when jitbmm.jax traced the call; what reaches here is checked again
// and refused with an error naming the operand, never run on a guess.
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "jitbmm/c_api.h"
#include "runtime/device.hpp"
#include "runtime/driver_api.hpp"
#include <xla/ffi/api/ffi.h> // jaxlib's, found by CMake (never shipped with jitbmm)

namespace ffi = xla::ffi;
using jitbmm::CUcontext;
using jitbmm::CUdeviceptr;
using jitbmm::CUstream;

namespace {

// The FFI API version these handlers were compiled against (jitbmm.jax compares it with jaxlib's on registration).
static_assert(XLA_FFI_API_MAJOR == 0, "jitbmm's handlers are written for XLA FFI API major version 0");

const char* dtype_name(ffi::DataType t) {
  switch (t) {
  case ffi::DataType::F32:
    return "f32";
  case ffi::DataType::F64:
    return "f64";
  case ffi::DataType::F16:
    return "f16";
  case ffi::DataType::BF16:
    return "bf16";
  default:
    return nullptr;
  }
}

ffi::Error failed(jitbmm_status status) {
  const std::string message = std::string("jitbmm: ") + jitbmm_last_error();
  return status == JITBMM_INVALID_ARGUMENT ? ffi::Error::InvalidArgument(message) : ffi::Error::Internal(message);
}

ffi::Error invalid(const std::string& message) { return ffi::Error::InvalidArgument("jitbmm: " + message); }

// The product of the dimensions before the last `inner` (the folded batch); -1 if the rank is below `inner`.
int64_t leading(const ffi::AnyBuffer& x, std::size_t inner) {
  const auto dims = x.dimensions();
  if (dims.size() < inner) return -1;
  int64_t n = 1;
  for (std::size_t i = 0; i + inner < dims.size(); ++i) n *= dims[i];
  return n;
}

int64_t dim(const ffi::AnyBuffer& x, std::size_t from_end) {
  const auto dims = x.dimensions();
  return dims[dims.size() - from_end];
}

// Optional operands are passed as arrays of no elements.
template <class T = void> T* data_or_null(const ffi::AnyBuffer& x) {
  return x.element_count() == 0 ? nullptr : static_cast<T*>(x.untyped_data());
}

// Makes the stream's context current for a call (XLA's host threads need not have it).
class StreamContext {
public:
  explicit StreamContext(void* stream) : context(context_of(stream)), scope_(context) {}
  const CUcontext context;

private:
  static CUcontext context_of(void* stream) {
    CUcontext ctx = nullptr;
    jitbmm::check(jitbmm::driver().cuStreamGetCtx(static_cast<CUstream>(stream), &ctx), "cuStreamGetCtx");
    return ctx;
  }
  jitbmm::ScopedContext scope_;
};

// Plans by problem and context, for the process: a handler's plan is made once and shared by every call of it.
template <class Plan> class PlanTable {
public:
  using Pointer = std::shared_ptr<Plan>;
  template <class Make> jitbmm_status get(const std::string& key, Make make, void (*destroy)(Plan*), Pointer& out) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = plans_.find(key);
      if (it != plans_.end()) {
        out = it->second;
        return JITBMM_OK;
      }
    }
    Plan* plan = nullptr;
    if (const jitbmm_status s = make(&plan); s != JITBMM_OK) return s;
    Pointer made(plan, destroy);
    std::lock_guard<std::mutex> lock(mutex_);
    if (plans_.size() >= kEntries) plans_.clear(); // a caller holding a plan keeps it alive
    out = plans_.emplace(key, made).first->second;
    return JITBMM_OK;
  }

private:
  static constexpr std::size_t kEntries = 512;
  std::mutex mutex_;
  std::map<std::string, Pointer> plans_;
};

std::string context_key(CUcontext ctx) { return std::to_string(reinterpret_cast<std::uintptr_t>(ctx)); }

// Scratch from XLA's allocator, 256-byte aligned as the plans ask: XLA takes alignments up to 16 only, so the request
// is 255 bytes longer and its start rounded up. Null for none.
ffi::ErrorOr<void*> scratch(ffi::ScratchAllocator& allocator, std::size_t bytes) {
  if (bytes == 0) return static_cast<void*>(nullptr);
  auto memory = allocator.Allocate(bytes + 255, 16);
  if (!memory.has_value())
    return ffi::Unexpected(ffi::Error(ffi::ErrorCode::kResourceExhausted, "jitbmm: XLA's scratch allocator refused " +
                                                                              std::to_string(bytes + 255) + " bytes"));
  const auto start = (reinterpret_cast<std::uintptr_t>(*memory) + 255) & ~std::uintptr_t(255);
  return reinterpret_cast<void*>(start);
}

// ---- Semiring products: out[..., M, N] = ⊕_k a[..., M, K] ⊗ b[..., K, N], the batches equal after jitbmm.jax's
// broadcast.

struct Product {
  std::string semiring, precision;
  jitbmm_problem problem{};
  bool empty = false;
};

ffi::ErrorOr<Product> product(std::string_view semiring, std::string_view precision, const ffi::AnyBuffer& a,
                              const ffi::AnyBuffer& b, bool with_argmax) {
  Product p;
  p.semiring = std::string(semiring), p.precision = std::string(precision);
  const char* dtype = dtype_name(a.element_type());
  if (!dtype) return ffi::Unexpected(invalid("a: unsupported dtype (expected float32, float64, float16 or bfloat16)"));
  if (b.element_type() != a.element_type()) return ffi::Unexpected(invalid("b: its dtype differs from a's"));
  const int64_t B = leading(a, 2);
  if (B < 0 || leading(b, 2) != B)
    return ffi::Unexpected(invalid("a, b: expected [..., M, K] and [..., K, N] of one batch"));
  if (dim(b, 2) != dim(a, 1)) return ffi::Unexpected(invalid("b: its rows differ from a's columns (K)"));
  const int64_t M = dim(a, 2), K = dim(a, 1), N = dim(b, 1);
  if (const jitbmm_status s = jitbmm_problem_row_major(&p.problem, p.semiring.c_str(), dtype, B, M, K, N); s)
    return ffi::Unexpected(failed(s));
  p.problem.precision = p.precision.c_str(); // the strings live in p; product_plan points at them again after moves
  p.problem.with_argmax = with_argmax;
  p.empty = B == 0 || M == 0 || N == 0;
  return p;
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
                          std::to_string(q.with_argmax) + "|" + context_key(ctx);
  return product_plans().get(
      key, [&](jitbmm_plan** made) { return jitbmm_plan_create_on_stream(&q, stream, made); }, jitbmm_plan_destroy,
      plan);
}

ffi::Error bmm(void* stream, ffi::ScratchAllocator allocator, ffi::AnyBuffer a, ffi::AnyBuffer b,
               ffi::Result<ffi::AnyBuffer> out, ffi::Result<ffi::AnyBuffer> argmax, std::string_view semiring,
               std::string_view precision) {
  const bool with_argmax = argmax->element_count() != 0;
  auto p = product(semiring, precision, a, b, with_argmax);
  if (p.has_error()) return p.error();
  if (p->empty) return ffi::Error::Success();
  StreamContext context(stream);
  std::shared_ptr<jitbmm_plan> plan;
  if (const jitbmm_status s = product_plan(*p, stream, context.context, plan)) return failed(s);
  std::size_t bytes = 0;
  if (const jitbmm_status s = jitbmm_plan_workspace_bytes(plan.get(), &bytes)) return failed(s);
  auto workspace = scratch(allocator, bytes);
  if (workspace.has_error()) return workspace.error();
  const jitbmm_status s = jitbmm_plan_run_with_workspace(
      plan.get(), a.untyped_data(), b.untyped_data(), out->untyped_data(),
      with_argmax ? static_cast<int32_t*>(argmax->untyped_data()) : nullptr, *workspace, bytes, stream);
  return s ? failed(s) : ffi::Error::Success();
}

ffi::Error bmm_backward(void* stream, ffi::ScratchAllocator allocator, ffi::AnyBuffer a, ffi::AnyBuffer b,
                        ffi::AnyBuffer out, ffi::AnyBuffer argmax, ffi::AnyBuffer grad_out,
                        ffi::Result<ffi::AnyBuffer> grad_a, ffi::Result<ffi::AnyBuffer> grad_b,
                        std::string_view semiring, std::string_view precision) {
  const bool with_argmax = argmax.element_count() != 0;
  auto p = product(semiring, precision, a, b, with_argmax);
  if (p.has_error()) return p.error();
  if (grad_out.element_type() != out.element_type()) return invalid("grad_out: its dtype differs from out's");
  if (p->empty || a.element_count() == 0 || b.element_count() == 0) {
    // Nothing flows: the gradients of what is there are 0.
    StreamContext context(stream);
    for (ffi::AnyBuffer* g : {&*grad_a, &*grad_b})
      if (g->size_bytes())
        jitbmm::check(jitbmm::driver().cuMemsetD8Async(reinterpret_cast<CUdeviceptr>(g->untyped_data()), 0,
                                                       g->size_bytes(), static_cast<CUstream>(stream)),
                      "cuMemsetD8Async");
    return ffi::Error::Success();
  }
  StreamContext context(stream);
  std::shared_ptr<jitbmm_plan> plan;
  if (const jitbmm_status s = product_plan(*p, stream, context.context, plan)) return failed(s);
  std::size_t bytes = 0;
  if (const jitbmm_status s =
          jitbmm_plan_backward_workspace_bytes_on_stream(plan.get(), 1, 1, with_argmax, stream, &bytes))
    return failed(s);
  auto workspace = scratch(allocator, bytes);
  if (workspace.has_error()) return workspace.error();
  const jitbmm_status s = jitbmm_plan_backward_with_workspace(
      plan.get(), a.untyped_data(), b.untyped_data(), out.untyped_data(), data_or_null<const int32_t>(argmax),
      grad_out.untyped_data(), grad_a->untyped_data(), grad_b->untyped_data(), *workspace, bytes, stream);
  return s ? failed(s) : ffi::Error::Success();
}

// ---- Chains. lengths arrive as int32 pairs [..., 2] (each the low and high half of an int64, so that a JAX
// program without 64-bit types can pass them), or as no elements for none.

struct Chain {
  std::string semiring;
  jitbmm_chain_problem problem{};
  const int64_t* lengths = nullptr;
};

ffi::ErrorOr<const int64_t*> lengths_of(const ffi::AnyBuffer& lengths, int64_t B) {
  if (lengths.element_count() == 0) return static_cast<const int64_t*>(nullptr);
  if (lengths.element_type() != ffi::DataType::S32 || dim(lengths, 1) != 2 || leading(lengths, 1) != B)
    return ffi::Unexpected(invalid("lengths: expected int32 pairs [..., 2] of the batch's sequences"));
  return static_cast<const int64_t*>(lengths.untyped_data());
}

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

// The CRF form: potentials [..., T - 1, C, C].
ffi::ErrorOr<Chain> crf(std::string_view semiring, const ffi::AnyBuffer& potentials, const ffi::AnyBuffer& lengths) {
  Chain c;
  c.semiring = std::string(semiring);
  const char* dtype = dtype_name(potentials.element_type());
  if (!dtype)
    return ffi::Unexpected(invalid("potentials: unsupported dtype (expected float32, float64, float16 or bfloat16)"));
  const int64_t B = leading(potentials, 3);
  if (B < 0 || dim(potentials, 1) != dim(potentials, 2))
    return ffi::Unexpected(invalid("potentials: expected [..., T - 1, C, C]"));
  auto l = lengths_of(lengths, B);
  if (l.has_error()) return ffi::Unexpected(l.error());
  c.lengths = *l;
  c.problem.semiring = c.semiring.c_str(), c.problem.dtype = dtype;
  c.problem.B = B, c.problem.T = dim(potentials, 3) + 1, c.problem.C = dim(potentials, 1);
  c.problem.with_lengths = c.lengths != nullptr;
  return c;
}

// The HMM form: emissions [..., T, C], transitions [C, C] or [..., C, C], initial [C] or [..., C].
ffi::ErrorOr<Chain> hmm(std::string_view semiring, const ffi::AnyBuffer& emissions, const ffi::AnyBuffer& transitions,
                        const ffi::AnyBuffer& initial, const ffi::AnyBuffer& lengths) {
  Chain c;
  c.semiring = std::string(semiring);
  const char* dtype = dtype_name(emissions.element_type());
  if (!dtype)
    return ffi::Unexpected(invalid("emissions: unsupported dtype (expected float32, float64, float16 or bfloat16)"));
  if (transitions.element_type() != emissions.element_type() || initial.element_type() != emissions.element_type())
    return ffi::Unexpected(invalid("transitions, initial: their dtype differs from the emissions'"));
  const int64_t B = leading(emissions, 2);
  if (B < 0) return ffi::Unexpected(invalid("emissions: expected [..., T, C]"));
  const int64_t C = dim(emissions, 1);
  const bool batched_transitions = transitions.dimensions().size() > 2,
             batched_initial = initial.dimensions().size() > 1;
  if (leading(transitions, 2) < 0 || dim(transitions, 1) != C || dim(transitions, 2) != C ||
      (batched_transitions && leading(transitions, 2) != B))
    return ffi::Unexpected(invalid("transitions: expected [C, C] or [..., C, C] of the emissions' batch and states"));
  if (dim(initial, 1) != C || (batched_initial && leading(initial, 1) != B))
    return ffi::Unexpected(invalid("initial: expected [C] or [..., C] of the emissions' batch and states"));
  auto l = lengths_of(lengths, B);
  if (l.has_error()) return ffi::Unexpected(l.error());
  c.lengths = *l;
  c.problem.semiring = c.semiring.c_str(), c.problem.dtype = dtype, c.problem.form = "hmm";
  c.problem.B = B, c.problem.T = dim(emissions, 2), c.problem.C = C;
  c.problem.with_lengths = c.lengths != nullptr;
  c.problem.batched_transitions = batched_transitions, c.problem.batched_initial = batched_initial;
  return c;
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

// A forward of either form; `run` launches it given the plan, the workspace and the outputs.
template <class Run>
ffi::Error chain_forward(ffi::ErrorOr<Chain> c, void* stream, ffi::ScratchAllocator& allocator, ffi::AnyBuffer& saved,
                         ffi::AnyBuffer& path, Run run) {
  if (c.has_error()) return c.error();
  if (c->problem.B == 0) return ffi::Error::Success();
  StreamContext context(stream);
  std::shared_ptr<jitbmm_chain_plan> plan;
  if (const jitbmm_status s = chain_plan(*c, context.context, plan)) return failed(s);
  const bool with_path = path.element_count() != 0;
  if (ffi::Error e = check_saved(plan.get(), saved, saved.element_count() != 0); !e.success()) return e;
  std::size_t bytes = 0;
  if (const jitbmm_status s = jitbmm_chain_plan_workspace_bytes(plan.get(), with_path, &bytes)) return failed(s);
  auto workspace = scratch(allocator, bytes);
  if (workspace.has_error()) return workspace.error();
  const jitbmm_status s = run(plan.get(), *c, data_or_null(saved), data_or_null<int32_t>(path), *workspace, bytes);
  return s ? failed(s) : ffi::Error::Success();
}

template <class Run>
ffi::Error chain_backward(ffi::ErrorOr<Chain> c, void* stream, ffi::ScratchAllocator& allocator,
                          const ffi::AnyBuffer& saved, Run run) {
  if (c.has_error()) return c.error();
  if (c->problem.B == 0) return ffi::Error::Success();
  StreamContext context(stream);
  std::shared_ptr<jitbmm_chain_plan> plan;
  if (const jitbmm_status s = chain_plan(*c, context.context, plan)) return failed(s);
  if (ffi::Error e = check_saved(plan.get(), saved, c->semiring == "log"); !e.success()) return e;
  std::size_t bytes = 0;
  if (const jitbmm_status s = jitbmm_chain_plan_backward_workspace_bytes(plan.get(), &bytes)) return failed(s);
  auto workspace = scratch(allocator, bytes);
  if (workspace.has_error()) return workspace.error();
  const jitbmm_status s = run(plan.get(), *c, *workspace, bytes);
  return s ? failed(s) : ffi::Error::Success();
}

ffi::Error chain(void* stream, ffi::ScratchAllocator allocator, ffi::AnyBuffer potentials, ffi::AnyBuffer lengths,
                 ffi::Result<ffi::AnyBuffer> score, ffi::Result<ffi::AnyBuffer> saved, ffi::Result<ffi::AnyBuffer> path,
                 std::string_view semiring) {
  return chain_forward(
      crf(semiring, potentials, lengths), stream, allocator, *saved, *path,
      [&](jitbmm_chain_plan* plan, const Chain& c, void* keep, int32_t* best, void* ws, std::size_t bytes) {
        return jitbmm_chain_plan_run(plan, potentials.untyped_data(), c.lengths, score->untyped_data(), keep, nullptr,
                                     best, ws, bytes, stream);
      });
}

ffi::Error chain_grad(void* stream, ffi::ScratchAllocator allocator, ffi::AnyBuffer potentials, ffi::AnyBuffer lengths,
                      ffi::AnyBuffer saved, ffi::AnyBuffer path, ffi::AnyBuffer grad_score,
                      ffi::Result<ffi::AnyBuffer> grad_potentials, std::string_view semiring) {
  return chain_backward(crf(semiring, potentials, lengths), stream, allocator, saved,
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
                     ffi::Result<ffi::AnyBuffer> path, std::string_view semiring) {
  return chain_forward(
      hmm(semiring, emissions, transitions, initial, lengths), stream, allocator, *saved, *path,
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
                    std::string_view semiring) {
  return chain_backward(hmm(semiring, emissions, transitions, initial, lengths), stream, allocator, saved,
                        [&](jitbmm_chain_plan* plan, const Chain& c, void* ws, std::size_t bytes) {
                          return jitbmm_chain_plan_backward_hmm(
                              plan, emissions.untyped_data(), transitions.untyped_data(), initial.untyped_data(),
                              c.lengths, data_or_null(saved), data_or_null<const int32_t>(path),
                              grad_score.untyped_data(), grad_emissions->untyped_data(),
                              grad_transitions->untyped_data(), grad_initial->untyped_data(), ws, bytes, stream);
                        });
}

// A handler's body with the library's exceptions (a failed driver call in StreamContext) turned into FFI errors.
template <class F> ffi::Error guarded(F body) {
  try {
    return body();
  } catch (const std::exception& e) {
    return ffi::Error::Internal(std::string("jitbmm: ") + e.what());
  }
}

} // namespace

extern "C" int jitbmm_xla_ffi_api_version(int* major, int* minor) {
  if (major) *major = XLA_FFI_API_MAJOR;
  if (minor) *minor = XLA_FFI_API_MINOR;
  return 0;
}

#define JITBMM_XLA_STREAM_AND_SCRATCH ffi::Ffi::Bind().Ctx<ffi::PlatformStream<void*>>().Ctx<ffi::ScratchAllocator>()

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    jitbmm_xla_bmm,
    [](void* stream, ffi::ScratchAllocator scratch, ffi::AnyBuffer a, ffi::AnyBuffer b, ffi::Result<ffi::AnyBuffer> out,
       ffi::Result<ffi::AnyBuffer> argmax, std::string_view semiring, std::string_view precision) {
      return guarded([&] { return bmm(stream, std::move(scratch), a, b, out, argmax, semiring, precision); });
    },
    JITBMM_XLA_STREAM_AND_SCRATCH.Arg<ffi::AnyBuffer>()
        .Arg<ffi::AnyBuffer>()
        .Ret<ffi::AnyBuffer>()
        .Ret<ffi::AnyBuffer>()
        .Attr<std::string_view>("semiring")
        .Attr<std::string_view>("precision"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    jitbmm_xla_bmm_backward,
    [](void* stream, ffi::ScratchAllocator scratch, ffi::AnyBuffer a, ffi::AnyBuffer b, ffi::AnyBuffer out,
       ffi::AnyBuffer argmax, ffi::AnyBuffer grad_out, ffi::Result<ffi::AnyBuffer> grad_a,
       ffi::Result<ffi::AnyBuffer> grad_b, std::string_view semiring, std::string_view precision) {
      return guarded([&] {
        return bmm_backward(stream, std::move(scratch), a, b, out, argmax, grad_out, grad_a, grad_b, semiring,
                            precision);
      });
    },
    JITBMM_XLA_STREAM_AND_SCRATCH.Arg<ffi::AnyBuffer>()
        .Arg<ffi::AnyBuffer>()
        .Arg<ffi::AnyBuffer>()
        .Arg<ffi::AnyBuffer>()
        .Arg<ffi::AnyBuffer>()
        .Ret<ffi::AnyBuffer>()
        .Ret<ffi::AnyBuffer>()
        .Attr<std::string_view>("semiring")
        .Attr<std::string_view>("precision"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    jitbmm_xla_chain,
    [](void* stream, ffi::ScratchAllocator scratch, ffi::AnyBuffer potentials, ffi::AnyBuffer lengths,
       ffi::Result<ffi::AnyBuffer> score, ffi::Result<ffi::AnyBuffer> saved, ffi::Result<ffi::AnyBuffer> path,
       std::string_view semiring) {
      return guarded(
          [&] { return chain(stream, std::move(scratch), potentials, lengths, score, saved, path, semiring); });
    },
    JITBMM_XLA_STREAM_AND_SCRATCH.Arg<ffi::AnyBuffer>()
        .Arg<ffi::AnyBuffer>()
        .Ret<ffi::AnyBuffer>()
        .Ret<ffi::AnyBuffer>()
        .Ret<ffi::AnyBuffer>()
        .Attr<std::string_view>("semiring"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    jitbmm_xla_chain_backward,
    [](void* stream, ffi::ScratchAllocator scratch, ffi::AnyBuffer potentials, ffi::AnyBuffer lengths,
       ffi::AnyBuffer saved, ffi::AnyBuffer path, ffi::AnyBuffer grad_score,
       ffi::Result<ffi::AnyBuffer> grad_potentials, std::string_view semiring) {
      return guarded([&] {
        return chain_grad(stream, std::move(scratch), potentials, lengths, saved, path, grad_score, grad_potentials,
                          semiring);
      });
    },
    JITBMM_XLA_STREAM_AND_SCRATCH.Arg<ffi::AnyBuffer>()
        .Arg<ffi::AnyBuffer>()
        .Arg<ffi::AnyBuffer>()
        .Arg<ffi::AnyBuffer>()
        .Arg<ffi::AnyBuffer>()
        .Ret<ffi::AnyBuffer>()
        .Attr<std::string_view>("semiring"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    jitbmm_xla_hmm,
    [](void* stream, ffi::ScratchAllocator scratch, ffi::AnyBuffer emissions, ffi::AnyBuffer transitions,
       ffi::AnyBuffer initial, ffi::AnyBuffer lengths, ffi::Result<ffi::AnyBuffer> score,
       ffi::Result<ffi::AnyBuffer> saved, ffi::Result<ffi::AnyBuffer> path, std::string_view semiring) {
      return guarded([&] {
        return hmm_chain(stream, std::move(scratch), emissions, transitions, initial, lengths, score, saved, path,
                         semiring);
      });
    },
    JITBMM_XLA_STREAM_AND_SCRATCH.Arg<ffi::AnyBuffer>()
        .Arg<ffi::AnyBuffer>()
        .Arg<ffi::AnyBuffer>()
        .Arg<ffi::AnyBuffer>()
        .Ret<ffi::AnyBuffer>()
        .Ret<ffi::AnyBuffer>()
        .Ret<ffi::AnyBuffer>()
        .Attr<std::string_view>("semiring"));

XLA_FFI_DEFINE_HANDLER_SYMBOL(
    jitbmm_xla_hmm_backward,
    [](void* stream, ffi::ScratchAllocator scratch, ffi::AnyBuffer emissions, ffi::AnyBuffer transitions,
       ffi::AnyBuffer initial, ffi::AnyBuffer lengths, ffi::AnyBuffer saved, ffi::AnyBuffer path,
       ffi::AnyBuffer grad_score, ffi::Result<ffi::AnyBuffer> grad_emissions,
       ffi::Result<ffi::AnyBuffer> grad_transitions, ffi::Result<ffi::AnyBuffer> grad_initial,
       std::string_view semiring) {
      return guarded([&] {
        return hmm_grad(stream, std::move(scratch), emissions, transitions, initial, lengths, saved, path, grad_score,
                        grad_emissions, grad_transitions, grad_initial, semiring);
      });
    },
    JITBMM_XLA_STREAM_AND_SCRATCH.Arg<ffi::AnyBuffer>()
        .Arg<ffi::AnyBuffer>()
        .Arg<ffi::AnyBuffer>()
        .Arg<ffi::AnyBuffer>()
        .Arg<ffi::AnyBuffer>()
        .Arg<ffi::AnyBuffer>()
        .Arg<ffi::AnyBuffer>()
        .Ret<ffi::AnyBuffer>()
        .Ret<ffi::AnyBuffer>()
        .Ret<ffi::AnyBuffer>()
        .Attr<std::string_view>("semiring"));
