// The edge every C entry point shares: it runs the C++ API and turns each exception into a status, keeping the
// message per thread for jitbmm_last_error (exceptions carry the whole story inside the library; codes exist only
// here).
#pragma once

#include <exception>
#include <stdexcept>
#include <string>

#include "jitbmm/c_api.h"
#include "jitbmm/errors.hpp"
#include "jitbmm/types.hpp"

namespace jitbmm::c_api {

// Keeps `message` as this thread's last error and returns `status`.
jitbmm_status fail(jitbmm_status status, const std::string& message);
// A call that succeeded leaves no message behind.
void clear_last_error();

// Runs `body`, mapping each exception type to its status.
template <class F> jitbmm_status guarded(F body) {
  try {
    body();
    clear_last_error();
    return JITBMM_OK;
  } catch (const std::invalid_argument& e) {
    return fail(JITBMM_INVALID_ARGUMENT, e.what());
  } catch (const NoDriverError& e) {
    return fail(JITBMM_NO_DRIVER, e.what());
  } catch (const NoNvrtcError& e) {
    return fail(JITBMM_NO_NVRTC, e.what());
  } catch (const UnsupportedDeviceError& e) {
    return fail(JITBMM_UNSUPPORTED_DEVICE, e.what());
  } catch (const CudaError& e) {
    return fail(JITBMM_CUDA_ERROR, e.what());
  } catch (const CompileError& e) {
    return fail(JITBMM_COMPILE_ERROR, e.what());
  } catch (const std::exception& e) {
    return fail(JITBMM_INTERNAL_ERROR, e.what());
  } catch (...) {
    return fail(JITBMM_INTERNAL_ERROR, "unknown exception");
  }
}

// Throws std::invalid_argument naming the argument when `ptr` is null.
void require(const void* ptr, const char* name);

// The part of a C problem (jitbmm_problem, jitbmm_chain_problem) that both kinds share: the problem itself, its
// semiring and its dtype, checked and parsed into `p`.
template <class CProblem, class Problem> void read_semiring_and_dtype(const CProblem* c, Problem& p) {
  require(c, "problem");
  require(c->semiring, "problem.semiring");
  require(c->dtype, "problem.dtype");
  p.semiring = parse_semiring(c->semiring);
  p.dtype = parse_dtype(c->dtype);
}

} // namespace jitbmm::c_api
