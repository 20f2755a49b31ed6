// What the C library's XLA FFI handlers share (runtime/c_api_xla_products.cpp, c_api_xla_chains.cpp; docs/jax.md):
// the dtypes they take, errors that name the operand, the folded batch, the stream's context made current, the
// process-wide tables of their plans, and scratch from XLA's allocator. Built only where XLA's FFI headers were found
// (they come with jaxlib; CMake's JITBMM_XLA_FFI_INCLUDE).
#pragma once

#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "jitbmm/c_api.h"
#include "runtime/c_api_status.hpp"
#include "runtime/device.hpp"
#include "runtime/driver_api.hpp"
#include "runtime/repair_watch.hpp"
#include <xla/ffi/api/ffi.h> // jaxlib's, found by CMake (never shipped with jitbmm)

namespace jitbmm::xla_ffi {

namespace ffi = xla::ffi;

// "f32", "f64", "f16", "bf16", or null for a type jitbmm has no kernels for.
const char* dtype_name(ffi::DataType t);
// The library's last error as an FFI error (InvalidArgument where the status says so).
ffi::Error failed(jitbmm_status status);
ffi::Error invalid(const std::string& message);

// The product of the dimensions before the last `inner` (the folded batch); -1 if the rank is below `inner`.
int64_t leading(const ffi::AnyBuffer& x, std::size_t inner);
// The dimension `from_end` places from the last (1: the last); -1 where the rank is lower.
int64_t dim(const ffi::AnyBuffer& x, std::size_t from_end);
// Success where x holds `elements` of `type` (what the plan reads or writes there), else an error naming it.
ffi::Error expected(const ffi::AnyBuffer& x, const char* name, ffi::DataType type, int64_t elements);
// The same for a gradient, which has its input's dtype and elements.
ffi::Error expected_like(const ffi::AnyBuffer& grad, const char* name, const ffi::AnyBuffer& input);
// Zeros written to `results` on `stream` (the gradients where nothing flows into them); success.
ffi::Error zeroed(void* stream, std::initializer_list<ffi::AnyBuffer*> results);

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
  static CUcontext context_of(void* stream);
  ScopedContext scope_;
};

// How many times a table of plans below has started again: jitbmm.jax keys what it learnt of the plans it made as it
// traced by this count (jitbmm_xla_plan_tables_emptied), so that a trace after one asks again and makes its plan anew.
std::atomic<unsigned long long>& plan_tables_emptied();

// Plans by problem and context, for the process: a handler's plan is made once and shared by every call of it. Past
// kEntries the table starts again (problems that vary without end, e.g. every sequence length), as jitbmm.torch's do.
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
    if (plans_.size() >= kEntries) { // a caller holding a plan keeps it alive
      plans_.clear();
      ++plan_tables_emptied();
    }
    out = plans_.emplace(key, made).first->second;
    return JITBMM_OK;
  }

private:
  static constexpr std::size_t kEntries = 4096;
  std::mutex mutex_;
  std::map<std::string, Pointer> plans_;
};

// A chain problem read from a handler's operands. problem.semiring points at `semiring`: set it again after the
// value moves (a short string's characters move with it).
struct Chain {
  std::string semiring;
  jitbmm_chain_problem problem{};
  const int64_t* lengths = nullptr;
};
// What a handler's plan reads of a caller's `problem`: its semiring, dtype, form, B, T, C, with_lengths and batched_*
// flags; the strides zero (contiguous), as the handlers' buffers are.
jitbmm_chain_problem contiguous(const jitbmm_chain_problem& problem);
// `problem` checked as a plan checks it, without making one (an empty batch's, whose calls launch nothing): OK, or the
// status with a message naming what is wrong.
jitbmm_status checked(const jitbmm_chain_problem& problem);
// lengths as jitbmm.jax passes them, int32 pairs [..., 2] of the batch (each an int64's halves), or no elements for
// none.
ffi::ErrorOr<const int64_t*> lengths_of(const ffi::AnyBuffer& lengths, int64_t B);
// The CRF form: potentials [..., T - 1, C, C] and their lengths.
ffi::ErrorOr<Chain> crf(std::string_view semiring, const ffi::AnyBuffer& potentials, const ffi::AnyBuffer& lengths);
// The HMM form: emissions [..., T, C], transitions [C, C] or [..., C, C], initial [C] or [..., C], and their lengths.
ffi::ErrorOr<Chain> hmm(std::string_view semiring, const ffi::AnyBuffer& emissions, const ffi::AnyBuffer& transitions,
                        const ffi::AnyBuffer& initial, const ffi::AnyBuffer& lengths);
// The dtype of a chain's scores: f32 for half potentials, else theirs.
ffi::DataType score_type(ffi::DataType potentials);

// The part of a plan's key that names the context: its id (DeviceInfo::context_id), never its reused address.
std::string context_key(CUcontext ctx);

// The primary context of CUDA device `ordinal` (XLA's), current for a scope: where jitbmm.jax asks for a call's
// workspace as it traces the call (the jitbmm_xla_*_workspace functions), the plan is made in it, so that the
// handler's calls on XLA's streams find that plan in the table.
class DeviceContext {
public:
  explicit DeviceContext(int ordinal) : context(primary(ordinal)), scope_(context) {}
  const CUcontext context;

private:
  static CUcontext primary(int ordinal);
  ScopedContext scope_;
};

// Runs `size(context)` (a status, as the C calls it makes return one) in the primary context of CUDA device
// `ordinal`: what each jitbmm_xla_*_workspace function does. Failing to make that context current is a status too.
template <class F> jitbmm_status in_device_context(int ordinal, F size) {
  std::optional<DeviceContext> context;
  if (const jitbmm_status s = c_api::guarded([&] { context.emplace(ordinal); })) return s;
  return size(context->context);
}

// The bytes a call's workspace result is declared with, for a plan that takes `bytes`: 255 more, so that its start
// can be rounded up to the 256 bytes the plans ask for (XLA aligns buffers less). 0 for none.
std::size_t declared_bytes(std::size_t bytes);

// A call's workspace, 256-byte aligned, for a plan that now says it takes `bytes`: the workspace result jitbmm.jax
// declared for it when it traced the call, sized by the plan made then (so that XLA owns it and may record the call
// into a CUDA graph), all of it: what a plan said then holds for every later call, though it may say less now (a
// chain's stand-in's backward of a `saved` it wrote). Where that holds less than `bytes` (a plan made since on another
// device takes more), XLA's scratch, unless the stream is being captured: scratch taken while XLA records a command
// buffer is freed before the graph replays, so that is an error naming the sizes. None (null, 0 bytes) where
// neither is taken.
struct CallWorkspace {
  void* data = nullptr;
  std::size_t bytes = 0;
};
ffi::ErrorOr<CallWorkspace> workspace(ffi::AnyBuffer& declared, ffi::ScratchAllocator& allocator, std::size_t bytes,
                                      void* stream);

// At JITBMM_LOG=debug, that a call of handler jitbmm_<target> is being recorded into a CUDA graph (one of XLA's
// command buffers, whose replays call no handler): how a user, and the GPU tests, see that XLA put the call in one.
void note_recorded(const char* target, void* stream);

// Handler jitbmm_<target>'s body with the library's exceptions (a failed driver call in StreamContext) turned into
// FFI errors. XLA's execute may only launch: no product the body runs (a chain's too) watches its repairs, which
// allocates and may move to another variant (compile, load).
template <class F> ffi::Error guarded(const char* target, void* stream, F body) {
  try {
    const UnwatchedCalls unwatched;
    note_recorded(target, stream);
    return body();
  } catch (const std::exception& e) {
    return ffi::Error::Internal(std::string("jitbmm: ") + e.what());
  }
}

// A binding of `Operands` buffer operands, then `Results` buffer results (at least one), after the context. Each step
// returns the binding Arg or Ret made, never the one it was given, which XLA's Binding cannot move.
template <std::size_t Operands, std::size_t Results, class Binding> auto buffers(Binding&& binding) {
  static_assert(Operands + Results > 0, "a handler has a result");
  if constexpr (Operands + Results == 1 && Operands == 1)
    return std::move(binding).template Arg<ffi::AnyBuffer>();
  else if constexpr (Operands > 0)
    return buffers<Operands - 1, Results>(std::move(binding).template Arg<ffi::AnyBuffer>());
  else if constexpr (Results == 1)
    return std::move(binding).template Ret<ffi::AnyBuffer>();
  else
    return buffers<0, Results - 1>(std::move(binding).template Ret<ffi::AnyBuffer>());
}

} // namespace jitbmm::xla_ffi

// Every handler's binding: XLA's stream, its scratch allocator, then `operands` buffers and `results` buffers, the
// last of them the workspace where the handler's plan takes scratch (the attributes follow).
#define JITBMM_XLA_BUFFERS(operands, results)                                                                          \
  ::jitbmm::xla_ffi::buffers<operands, results>(                                                                       \
      ::xla::ffi::Ffi::Bind().Ctx<::xla::ffi::PlatformStream<void*>>().Ctx<::xla::ffi::ScratchAllocator>())
