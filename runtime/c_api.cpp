// The C ABI: each entry point converts C arguments, calls the C++ API, and turns every exception into a status
// and a thread-local message.
#include "jitbmm/c_api.h"

#include <dlfcn.h>
#include <execinfo.h>
#include <ucontext.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>

#include "cache/disk_cache.hpp"
#include "jitbmm/chain.hpp"
#include "jitbmm/errors.hpp"
#include "jitbmm/plan.hpp"
#include "jitbmm/reference.hpp"
#include "jitbmm/version.hpp"
#include "runtime/autotune.hpp"
#include "support/parse_number.hpp"

struct jitbmm_plan {
  jitbmm::SemiringBMM plan;
};

struct jitbmm_chain_plan {
  jitbmm::ChainPlan plan;
  std::string kernel_name; // what jitbmm_chain_plan_kernel_name points into
};

namespace {

thread_local std::string g_last_error;

// $JITBMM_CRASH_BACKTRACE=1: on SIGSEGV/SIGBUS/SIGABRT, print the native stack to stderr (for a crash inside a host
// process such as Python, where no debugger is at hand), then die with the signal as before.
void crash_backtrace(int sig, siginfo_t* info, void* context) {
  void* frames[64];
  const int n = ::backtrace(frames, 64);
  char line[256];
  const auto* uc = static_cast<const ucontext_t*>(context);
  const auto pc = reinterpret_cast<void*>(uc->uc_mcontext.gregs[REG_RIP]);
  Dl_info where{};
  ::dladdr(pc, &where);
  const int len = std::snprintf(line, sizeof line, "jitbmm: fatal signal %d at address %p, pc %p (%s+%p)\n", sig,
                                info->si_addr, pc, where.dli_fname ? where.dli_fname : "?",
                                reinterpret_cast<void*>(static_cast<char*>(pc) - static_cast<char*>(where.dli_fbase)));
  (void)!::write(2, line, static_cast<std::size_t>(len));
  if (!pc) { // a call through a null pointer: the caller's return address is on top of the stack
    void* ret = *reinterpret_cast<void* const*>(uc->uc_mcontext.gregs[REG_RSP]);
    Dl_info caller{};
    ::dladdr(ret, &caller);
    const int k = std::snprintf(line, sizeof line, "jitbmm: called from %p (%s+%p, %s)\n", ret,
                                caller.dli_fname ? caller.dli_fname : "?",
                                reinterpret_cast<void*>(static_cast<char*>(ret) - static_cast<char*>(caller.dli_fbase)),
                                caller.dli_sname ? caller.dli_sname : "?");
    (void)!::write(2, line, static_cast<std::size_t>(k));
  }
  ::backtrace_symbols_fd(frames, n, 2);
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

const bool g_backtrace_installed = [] {
  bool on = false;
  try { // a static initialiser must not throw: a bad value is a warning, and the handler stays off
    on = jitbmm::env_integer("JITBMM_CRASH_BACKTRACE", 0, 1).value_or(0) == 1;
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "jitbmm: warning: %s; crash backtraces off\n", e.what());
  }
  if (!on) return false;
  struct sigaction action {};
  action.sa_sigaction = crash_backtrace;
  action.sa_flags = SA_SIGINFO;
  for (int sig : {SIGSEGV, SIGBUS, SIGABRT}) ::sigaction(sig, &action, nullptr);
  return true;
}();

jitbmm_status fail(jitbmm_status status, const std::string& message) {
  g_last_error = message;
  return status;
}

// Runs `body`, mapping each exception type to its status.
template <class F> jitbmm_status guarded(F body) {
  try {
    body();
    g_last_error.clear();
    return JITBMM_OK;
  } catch (const std::invalid_argument& e) {
    return fail(JITBMM_INVALID_ARGUMENT, e.what());
  } catch (const jitbmm::NoDriverError& e) {
    return fail(JITBMM_NO_DRIVER, e.what());
  } catch (const jitbmm::NoNvrtcError& e) {
    return fail(JITBMM_NO_NVRTC, e.what());
  } catch (const jitbmm::UnsupportedDeviceError& e) {
    return fail(JITBMM_UNSUPPORTED_DEVICE, e.what());
  } catch (const jitbmm::CudaError& e) {
    return fail(JITBMM_CUDA_ERROR, e.what());
  } catch (const jitbmm::CompileError& e) {
    return fail(JITBMM_COMPILE_ERROR, e.what());
  } catch (const std::exception& e) {
    return fail(JITBMM_INTERNAL_ERROR, e.what());
  } catch (...) {
    return fail(JITBMM_INTERNAL_ERROR, "unknown exception");
  }
}

void require(const void* ptr, const char* name) {
  if (!ptr) throw std::invalid_argument(std::string(name) + ": null pointer");
}

jitbmm::Problem to_problem(const jitbmm_problem* c) {
  require(c, "problem");
  require(c->semiring, "problem.semiring");
  require(c->dtype, "problem.dtype");
  jitbmm::Problem p;
  p.semiring = jitbmm::parse_semiring(c->semiring);
  p.dtype = jitbmm::parse_dtype(c->dtype);
  if (c->out_dtype) p.out_dtype = jitbmm::parse_dtype(c->out_dtype);
  p.shape = {c->B, c->M, c->K, c->N};
  p.a_strides = jitbmm::Strides{c->a_strides[0], c->a_strides[1], c->a_strides[2]};
  p.b_strides = jitbmm::Strides{c->b_strides[0], c->b_strides[1], c->b_strides[2]};
  p.out_strides = jitbmm::Strides{c->out_strides[0], c->out_strides[1], c->out_strides[2]};
  p.with_argmax = c->with_argmax != 0;
  if (c->precision) p.precision = jitbmm::parse_precision(c->precision);
  jitbmm::validate(p);
  return p;
}

jitbmm::ChainProblem to_chain_problem(const jitbmm_chain_problem* c) {
  require(c, "problem");
  require(c->semiring, "problem.semiring");
  require(c->dtype, "problem.dtype");
  jitbmm::ChainProblem p;
  p.semiring = jitbmm::parse_semiring(c->semiring);
  p.dtype = jitbmm::parse_dtype(c->dtype);
  p.B = c->B, p.T = c->T, p.C = c->C;
  for (int i = 0; i < 4; ++i) p.strides[i] = c->strides[i];
  p.with_lengths = c->with_lengths != 0;
  if (c->form && std::strcmp(c->form, "hmm") == 0)
    p.form = jitbmm::ChainForm::hmm;
  else if (c->form && std::strcmp(c->form, "crf") != 0)
    throw std::invalid_argument(std::string("problem.form: '") + c->form + "' (expected crf or hmm)");
  p.batched_transitions = c->batched_transitions != 0;
  p.batched_initial = c->batched_initial != 0;
  for (int i = 0; i < 3; ++i) p.emission_strides[i] = c->emission_strides[i];
  for (int i = 0; i < 3; ++i) p.transition_strides[i] = c->transition_strides[i];
  for (int i = 0; i < 2; ++i) p.initial_strides[i] = c->initial_strides[i];
  jitbmm::check_chain_problem(p);
  return p;
}

// The table rows the listing functions read; nullptr for an index outside the table.
const jitbmm::SemiringInfo* semiring_row(int index) {
  if (index < 0 || index >= jitbmm::semiring_count()) return nullptr;
  return &jitbmm::semiring_info(static_cast<jitbmm::Semiring>(index));
}
const jitbmm::DTypeInfo* dtype_row(int index) {
  if (index < 0 || index >= jitbmm::dtype_count()) return nullptr;
  return &jitbmm::dtype_info(static_cast<jitbmm::DType>(index));
}
static_assert(JITBMM_BACKWARD_MARGINAL == static_cast<int>(jitbmm::BackwardKind::marginal));
static_assert(JITBMM_BACKWARD_ARGMAX_SCATTER == static_cast<int>(jitbmm::BackwardKind::argmax_scatter));

} // namespace

extern "C" {

const char* jitbmm_version(void) { return jitbmm::kVersion; }
const char* jitbmm_last_error(void) { return g_last_error.c_str(); }

int jitbmm_semiring_count(void) { return jitbmm::semiring_count(); }
const char* jitbmm_semiring_name(int index) { return semiring_row(index) ? semiring_row(index)->name : nullptr; }
int jitbmm_semiring_has_argmax(int index) { return semiring_row(index) ? semiring_row(index)->has_argmax : -1; }
int jitbmm_semiring_backward(int index) {
  return semiring_row(index) ? static_cast<int>(semiring_row(index)->backward) : -1;
}
int jitbmm_dtype_count(void) { return jitbmm::dtype_count(); }
const char* jitbmm_dtype_name(int index) { return dtype_row(index) ? dtype_row(index)->name : nullptr; }
int jitbmm_dtype_size(int index) { return dtype_row(index) ? dtype_row(index)->size_bytes : -1; }

jitbmm_status jitbmm_problem_row_major(jitbmm_problem* problem, const char* semiring, const char* dtype, int64_t B,
                                       int64_t M, int64_t K, int64_t N) {
  return guarded([&] {
    require(problem, "problem");
    require(semiring, "semiring");
    require(dtype, "dtype");
    jitbmm::Problem p; // its default strides are the row-major ones: the rule is written once, there
    p.semiring = jitbmm::parse_semiring(semiring);
    p.dtype = jitbmm::parse_dtype(dtype);
    p.shape = {B, M, K, N};
    jitbmm::validate(p);
    jitbmm_problem c{};
    c.semiring = semiring;
    c.dtype = dtype;
    c.B = B, c.M = M, c.K = K, c.N = N;
    const jitbmm::Strides strides[3] = {p.a(), p.b(), p.out()};
    int64_t* fields[3] = {c.a_strides, c.b_strides, c.out_strides};
    for (int i = 0; i < 3; ++i)
      fields[i][0] = strides[i].batch, fields[i][1] = strides[i].row, fields[i][2] = strides[i].col;
    *problem = c;
  });
}

jitbmm_status jitbmm_plan_create(const jitbmm_problem* problem, jitbmm_plan** plan) {
  return guarded([&] {
    require(plan, "plan");
    *plan = nullptr;
    const jitbmm::Problem p = to_problem(problem);
    *plan = new jitbmm_plan{jitbmm::SemiringBMM::get(p)};
  });
}

jitbmm_status jitbmm_plan_create_on_stream(const jitbmm_problem* problem, void* stream, jitbmm_plan** plan) {
  return guarded([&] {
    require(plan, "plan");
    *plan = nullptr;
    const jitbmm::Problem p = to_problem(problem);
    *plan = new jitbmm_plan{jitbmm::SemiringBMM::get(p, static_cast<jitbmm::Stream>(stream))};
  });
}

jitbmm_status jitbmm_plan_run(const jitbmm_plan* plan, const void* a, const void* b, void* out, int32_t* argmax,
                              void* stream) {
  return guarded([&] {
    require(plan, "plan");
    plan->plan(a, b, out, argmax, static_cast<jitbmm::Stream>(stream));
  });
}

jitbmm_status jitbmm_plan_backward(const jitbmm_plan* plan, const void* a, const void* b, const void* out,
                                   const int32_t* argmax, const void* grad_out, void* grad_a, void* grad_b,
                                   void* stream) {
  return guarded([&] {
    require(plan, "plan");
    plan->plan.backward(a, b, out, argmax, grad_out, grad_a, grad_b, static_cast<jitbmm::Stream>(stream));
  });
}

jitbmm_status jitbmm_plan_workspace_bytes(const jitbmm_plan* plan, size_t* bytes) {
  return guarded([&] {
    require(plan, "plan");
    require(bytes, "bytes");
    *bytes = plan->plan.workspace_bytes();
  });
}

jitbmm_status jitbmm_plan_backward_workspace_bytes(const jitbmm_plan* plan, int grad_a, int grad_b, int argmax_given,
                                                   size_t* bytes) {
  return guarded([&] {
    require(plan, "plan");
    require(bytes, "bytes");
    *bytes = plan->plan.backward_workspace_bytes(grad_a != 0, grad_b != 0, argmax_given != 0);
  });
}

jitbmm_status jitbmm_plan_backward_workspace_bytes_on_stream(const jitbmm_plan* plan, int grad_a, int grad_b,
                                                             int argmax_given, void* stream, size_t* bytes) {
  return guarded([&] {
    require(plan, "plan");
    require(bytes, "bytes");
    *bytes = plan->plan.backward_workspace_bytes(grad_a != 0, grad_b != 0, argmax_given != 0,
                                                 static_cast<jitbmm::Stream>(stream));
  });
}

jitbmm_status jitbmm_plan_run_with_workspace(const jitbmm_plan* plan, const void* a, const void* b, void* out,
                                             int32_t* argmax, void* workspace, size_t workspace_bytes, void* stream) {
  return guarded([&] {
    require(plan, "plan");
    plan->plan(a, b, out, argmax, static_cast<jitbmm::Stream>(stream), jitbmm::Workspace{workspace, workspace_bytes});
  });
}

jitbmm_status jitbmm_plan_backward_with_workspace(const jitbmm_plan* plan, const void* a, const void* b,
                                                  const void* out, const int32_t* argmax, const void* grad_out,
                                                  void* grad_a, void* grad_b, void* workspace, size_t workspace_bytes,
                                                  void* stream) {
  return guarded([&] {
    require(plan, "plan");
    plan->plan.backward(a, b, out, argmax, grad_out, grad_a, grad_b, static_cast<jitbmm::Stream>(stream),
                        jitbmm::Workspace{workspace, workspace_bytes});
  });
}

jitbmm_status jitbmm_release_pool_memory(void) {
  return guarded([] { jitbmm::release_pool_memory(); });
}

jitbmm_status jitbmm_set_tune_policy(const char* policy) {
  return guarded([&] {
    if (policy)
      jitbmm::set_tune_policy(jitbmm::parse_tune_policy(policy));
    else
      jitbmm::set_tune_policy(std::nullopt);
  });
}

jitbmm_status jitbmm_plan_kernel_name(const jitbmm_plan* plan, const char** name) {
  return guarded([&] {
    require(plan, "plan");
    require(name, "name");
    *name = plan->plan.kernel_name().c_str();
  });
}

void jitbmm_plan_destroy(jitbmm_plan* plan) { delete plan; }

jitbmm_status jitbmm_chain_plan_create(const jitbmm_chain_problem* problem, jitbmm_chain_plan** plan) {
  return guarded([&] {
    require(plan, "plan");
    *plan = nullptr;
    const jitbmm::ChainProblem p = to_chain_problem(problem);
    const jitbmm::ChainPlan chain = jitbmm::ChainPlan::get(p);
    *plan = new jitbmm_chain_plan{chain, chain.kernel_name()};
  });
}

jitbmm_status jitbmm_chain_plan_saved_bytes(const jitbmm_chain_plan* plan, size_t* bytes) {
  return guarded([&] {
    require(plan, "plan");
    require(bytes, "bytes");
    *bytes = plan->plan.saved_bytes();
  });
}

jitbmm_status jitbmm_chain_problem_saved_bytes(const jitbmm_chain_problem* problem, size_t* bytes) {
  return guarded([&] {
    require(bytes, "bytes");
    *bytes = jitbmm::chain_saved_bytes(to_chain_problem(problem));
  });
}

jitbmm_status jitbmm_chain_plan_workspace_bytes(const jitbmm_chain_plan* plan, int with_path, size_t* bytes) {
  return guarded([&] {
    require(plan, "plan");
    require(bytes, "bytes");
    *bytes = plan->plan.workspace_bytes(with_path != 0);
  });
}

jitbmm_status jitbmm_chain_plan_run(const jitbmm_chain_plan* plan, const void* potentials, const int64_t* lengths,
                                    void* score, void* saved, void* alpha, int32_t* path, void* workspace,
                                    size_t workspace_bytes, void* stream) {
  return guarded([&] {
    require(plan, "plan");
    plan->plan(potentials, lengths, score, saved, alpha, path, static_cast<jitbmm::Stream>(stream),
               jitbmm::Workspace{workspace, workspace_bytes});
  });
}

jitbmm_status jitbmm_chain_plan_backward(const jitbmm_chain_plan* plan, const void* potentials, const int64_t* lengths,
                                         const void* saved, const int32_t* path, const void* grad_score,
                                         void* grad_potentials, void* stream) {
  return jitbmm_chain_plan_backward_with_workspace(plan, potentials, lengths, saved, path, grad_score,
                                                   grad_potentials, nullptr, 0, stream);
}

jitbmm_status jitbmm_chain_plan_backward_with_workspace(const jitbmm_chain_plan* plan, const void* potentials,
                                                        const int64_t* lengths, const void* saved,
                                                        const int32_t* path, const void* grad_score,
                                                        void* grad_potentials, void* workspace,
                                                        size_t workspace_bytes, void* stream) {
  return guarded([&] {
    require(plan, "plan");
    plan->plan.backward(potentials, lengths, saved, path, grad_score, grad_potentials,
                        static_cast<jitbmm::Stream>(stream), jitbmm::Workspace{workspace, workspace_bytes});
  });
}

jitbmm_status jitbmm_chain_plan_run_hmm(const jitbmm_chain_plan* plan, const void* emissions, const void* transitions,
                                        const void* initial, const int64_t* lengths, void* score, void* saved,
                                        void* alpha, int32_t* path, void* workspace, size_t workspace_bytes,
                                        void* stream) {
  return guarded([&] {
    require(plan, "plan");
    plan->plan(jitbmm::HmmInputs{emissions, transitions, initial}, lengths, score, saved, alpha, path,
               static_cast<jitbmm::Stream>(stream), jitbmm::Workspace{workspace, workspace_bytes});
  });
}

jitbmm_status jitbmm_chain_plan_backward_workspace_bytes(const jitbmm_chain_plan* plan, size_t* bytes) {
  return guarded([&] {
    require(plan, "plan");
    require(bytes, "bytes");
    *bytes = plan->plan.backward_workspace_bytes();
  });
}

jitbmm_status jitbmm_chain_plan_backward_hmm(const jitbmm_chain_plan* plan, const void* emissions,
                                             const void* transitions, const void* initial, const int64_t* lengths,
                                             const void* saved, const int32_t* path, const void* grad_score,
                                             void* grad_emissions, void* grad_transitions, void* grad_initial,
                                             void* workspace, size_t workspace_bytes, void* stream) {
  return guarded([&] {
    require(plan, "plan");
    plan->plan.backward(jitbmm::HmmInputs{emissions, transitions, initial}, lengths, saved, path, grad_score,
                        jitbmm::HmmGradients{grad_emissions, grad_transitions, grad_initial},
                        static_cast<jitbmm::Stream>(stream), jitbmm::Workspace{workspace, workspace_bytes});
  });
}

jitbmm_status jitbmm_chain_plan_kernel_name(const jitbmm_chain_plan* plan, const char** name) {
  return guarded([&] {
    require(plan, "plan");
    require(name, "name");
    *name = plan->kernel_name.c_str();
  });
}

void jitbmm_chain_plan_destroy(jitbmm_chain_plan* plan) { delete plan; }

jitbmm_status jitbmm_reference(const jitbmm_problem* problem, const void* a, const void* b, double* out,
                               int32_t* argmax) {
  return guarded([&] {
    const jitbmm::Problem p = to_problem(problem);
    const bool empty = p.shape.B == 0 || p.shape.M == 0 || p.shape.N == 0; // no product: B*M may overflow
    if (!empty) require(out, "out");
    if (!empty && p.shape.K > 0) {
      require(a, "a");
      require(b, "b");
    }
    const auto elements = jitbmm::reference::compute(p, a, b);
    for (std::size_t i = 0; i < elements.size(); ++i) {
      out[i] = elements[i].value;
      if (argmax) argmax[i] = elements[i].argmax;
    }
  });
}

jitbmm_status jitbmm_export_choices(const char** text) {
  return guarded([&] {
    require(text, "text");
    thread_local std::string exported;
    exported = jitbmm::export_choices();
    *text = exported.c_str();
  });
}

jitbmm_status jitbmm_import_choices(const char* text, size_t* stored) {
  return guarded([&] {
    require(text, "text");
    const std::size_t n = jitbmm::import_choices(text);
    if (stored) *stored = n;
  });
}

jitbmm_status jitbmm_cache_dir(const char** dir) {
  return guarded([&] {
    require(dir, "dir");
    const jitbmm::DiskCache* cache = jitbmm::DiskCache::process_cache();
    *dir = cache ? cache->dir().c_str() : "";
  });
}

} // extern "C"
