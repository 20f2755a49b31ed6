// The C library's face for JAX: XLA FFI handlers (docs/jax.md) over the C ABI, built where XLA's FFI headers were
// found (they come with jaxlib; CMake's JITBMM_XLA_FFI_INCLUDE): the products' in c_api_xla_products.cpp, the chains'
// in c_api_xla_chains.cpp, their distributions' in c_api_xla_distributions.cpp and (the HMM form's expectations)
// c_api_xla_hmm_distributions.cpp, what they share here (c_api_xla.hpp) with the FFI API version they were compiled
// against.
// Each handler folds its operands' leading dimensions into the batch and takes its plan from a process-wide table:
// the plan jitbmm.jax made on the device's primary context as it traced the call, asking for the bytes of the call's
// workspace result (the jitbmm_xla_*_workspace functions). A call takes its workspace from that result and launches
// on XLA's stream: it tunes, compiles and allocates nothing, so XLA may record it into a CUDA graph (jitbmm.jax
// registers the handlers as command-buffer compatible). Only a call on a device the call was not traced for makes
// its plan there, untuned while the stream is being captured. Shapes and dtypes were checked when jitbmm.jax traced
// the call; what reaches here is checked again and refused with an error naming the operand, never run on a guess.
#include "runtime/c_api_xla.hpp"

#include <string>
#include <string_view>

#include "support/log.hpp"

namespace jitbmm::xla_ffi {

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

int64_t leading(const ffi::AnyBuffer& x, std::size_t inner) {
  const auto dims = x.dimensions();
  if (dims.size() < inner) return -1;
  int64_t n = 1;
  for (std::size_t i = 0; i + inner < dims.size(); ++i) n *= dims[i];
  return n;
}

int64_t dim(const ffi::AnyBuffer& x, std::size_t from_end) {
  const auto dims = x.dimensions();
  return from_end >= 1 && from_end <= dims.size() ? dims[dims.size() - from_end] : -1;
}

ffi::Error expected(const ffi::AnyBuffer& x, const char* name, ffi::DataType type, int64_t elements) {
  if (x.element_type() == type && static_cast<int64_t>(x.element_count()) == elements) return ffi::Error::Success();
  return invalid(std::string(name) + ": " + std::to_string(x.element_count()) +
                 " elements of the wrong shape or dtype; the plan reads or writes " + std::to_string(elements));
}

ffi::Error expected_like(const ffi::AnyBuffer& grad, const char* name, const ffi::AnyBuffer& input) {
  return expected(grad, name, input.element_type(), static_cast<int64_t>(input.element_count()));
}

ffi::Error zeroed(void* stream, std::initializer_list<ffi::AnyBuffer*> results) {
  StreamContext context(stream);
  for (ffi::AnyBuffer* r : results)
    if (r->size_bytes())
      check(driver().cuMemsetD8Async(reinterpret_cast<CUdeviceptr>(r->untyped_data()), 0, r->size_bytes(),
                                     static_cast<CUstream>(stream)),
            "cuMemsetD8Async");
  return ffi::Error::Success();
}

ffi::ErrorOr<const int64_t*> lengths_of(const ffi::AnyBuffer& lengths, int64_t B) {
  if (lengths.element_count() == 0) return static_cast<const int64_t*>(nullptr);
  if (lengths.element_type() != ffi::DataType::S32 || dim(lengths, 1) != 2 || leading(lengths, 1) != B)
    return ffi::Unexpected(invalid("lengths: expected int32 pairs [..., 2] of the batch's sequences"));
  return static_cast<const int64_t*>(lengths.untyped_data());
}

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

jitbmm_chain_problem contiguous(const jitbmm_chain_problem& problem) {
  jitbmm_chain_problem q{};
  q.semiring = problem.semiring, q.dtype = problem.dtype, q.form = problem.form;
  q.B = problem.B, q.T = problem.T, q.C = problem.C;
  q.with_lengths = problem.with_lengths;
  q.batched_transitions = problem.batched_transitions, q.batched_initial = problem.batched_initial;
  return q;
}

jitbmm_status checked(const jitbmm_chain_problem& problem) {
  std::size_t unused = 0;
  return jitbmm_chain_problem_saved_bytes(&problem, &unused);
}

ffi::DataType score_type(ffi::DataType potentials) {
  return potentials == ffi::DataType::F16 || potentials == ffi::DataType::BF16 ? ffi::DataType::F32 : potentials;
}

std::string context_key(CUcontext ctx) { return std::to_string(context_id(ctx)); }

std::size_t declared_bytes(std::size_t bytes) { return bytes ? bytes + 255 : 0; }

namespace {
void* aligned(void* start) {
  return reinterpret_cast<void*>((reinterpret_cast<std::uintptr_t>(start) + 255) & ~std::uintptr_t(255));
}
} // namespace

ffi::ErrorOr<CallWorkspace> workspace(ffi::AnyBuffer& declared, ffi::ScratchAllocator& allocator, std::size_t bytes,
                                      void* stream) {
  const std::size_t size = declared.size_bytes();
  if (size > 255 && size >= declared_bytes(bytes)) {
    void* data = aligned(declared.untyped_data());
    return CallWorkspace{data,
                         size - std::size_t(static_cast<char*>(data) - static_cast<char*>(declared.untyped_data()))};
  }
  if (bytes == 0) return CallWorkspace{};
  if (stream_is_capturing(static_cast<CUstream>(stream)))
    return ffi::Unexpected(invalid("workspace: " + std::to_string(declared.size_bytes()) +
                                   " bytes declared when jitbmm.jax traced the call, but its plan on this device "
                                   "takes " +
                                   std::to_string(declared_bytes(bytes)) +
                                   ", and no other scratch can be taken while XLA records a CUDA graph: trace the "
                                   "call again for this device"));
  auto memory = allocator.Allocate(declared_bytes(bytes), 16);
  if (!memory.has_value())
    return ffi::Unexpected(ffi::Error(ffi::ErrorCode::kResourceExhausted, "jitbmm: XLA's scratch allocator refused " +
                                                                              std::to_string(bytes + 255) + " bytes"));
  return CallWorkspace{aligned(*memory), bytes};
}

void note_recorded(const char* target, void* stream) {
  if (!log_enabled(LogLevel::debug)) return;
  bool capturing = false;
  try { // a diagnostic: a driver that cannot say (no context current yet) fails no call
    capturing = stream_is_capturing(static_cast<CUstream>(stream));
  } catch (const std::exception&) {
    return;
  }
  if (capturing)
    log_message(LogLevel::debug, std::string("xla: a call of jitbmm_") + target + " recorded into a CUDA graph");
}

CUcontext DeviceContext::primary(int ordinal) {
  // Retained once a device, for the process, as XLA retains it: the plans made in it live as long.
  static std::mutex mutex;
  static auto* retained = new std::map<int, CUcontext>();
  std::lock_guard<std::mutex> lock(mutex);
  if (const auto it = retained->find(ordinal); it != retained->end()) return it->second;
  CUdevice device = 0;
  check(driver().cuDeviceGet(&device, ordinal), "cuDeviceGet");
  CUcontext ctx = nullptr;
  check(driver().cuDevicePrimaryCtxRetain(&ctx, device), "cuDevicePrimaryCtxRetain");
  return (*retained)[ordinal] = ctx;
}

CUcontext StreamContext::context_of(void* stream) {
  CUcontext ctx = nullptr;
  check(driver().cuStreamGetCtx(static_cast<CUstream>(stream), &ctx), "cuStreamGetCtx");
  return ctx;
}

std::atomic<unsigned long long>& plan_tables_emptied() {
  static std::atomic<unsigned long long> count{0};
  return count;
}

} // namespace jitbmm::xla_ffi

extern "C" unsigned long long jitbmm_xla_plan_tables_emptied(void) {
  return jitbmm::xla_ffi::plan_tables_emptied().load();
}

extern "C" int jitbmm_xla_ffi_api_version(int* major, int* minor) {
  if (major) *major = XLA_FFI_API_MAJOR;
  if (minor) *minor = XLA_FFI_API_MINOR;
  return 0;
}
