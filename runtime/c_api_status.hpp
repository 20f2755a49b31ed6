// The edge every C entry point shares: it runs the C++ API and turns each exception into a status, keeping the
// message per thread for jitbmm_last_error (exceptions carry the whole story inside the library; codes exist only
// here).
#pragma once

#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <typeinfo>

#include "jitbmm/c_api.h"
#include "jitbmm/errors.hpp"
#include "jitbmm/types.hpp"

namespace jitbmm::c_api {

// Keeps `message` as this thread's last error and returns `status`. Never throws, so that no exception leaves a C
// entry point (memory to keep the message in may run out: a fixed message then says so).
jitbmm_status fail(jitbmm_status status, const char* message) noexcept;
// A call that succeeded leaves no message behind.
void clear_last_error() noexcept;

// The status of the exception being handled (called inside a catch block), its message kept as the last error.
jitbmm_status status_of_current_exception() noexcept;

// Runs `body`, mapping each exception type to its status; a body that returns leaves no message behind.
template <class F> jitbmm_status guarded(F body) {
  try {
    body();
    clear_last_error();
    return JITBMM_OK;
  } catch (...) {
    return status_of_current_exception();
  }
}

// Runs `body`, which returns a status of C calls it made (each keeping its own message), mapping each exception it
// throws besides (building a key, a table's memory) to its status as guarded() does.
template <class F> jitbmm_status guarded_status(F body) {
  try {
    return body();
  } catch (...) {
    return status_of_current_exception();
  }
}

// Throws std::invalid_argument naming the argument when `ptr` is null.
void require(const void* ptr, const char* name);

// The handles the C ABI gave out and has not destroyed, each with its type, so that a handle destroyed already (used
// again, destroyed twice) or a pointer to another kind of handle is refused instead of being read. (A new handle may
// take a destroyed one's address: that is not detectable.) IsHandle<H> marks the handle types, each where it is
// defined.
template <class H> struct IsHandle : std::false_type {};
void handle_made(const void* handle, const std::type_info& type);
// Whether `handle` was a live handle of `type`; it is not any more.
bool handle_destroyed(const void* handle, const std::type_info& type) noexcept;
bool handle_live(const void* handle, const std::type_info& type);

// A handle argument: null, or not a live handle of its type, is std::invalid_argument naming it.
template <class H, std::enable_if_t<IsHandle<H>::value, int> = 0> void require(const H* handle, const char* name) {
  require(static_cast<const void*>(handle), name);
  if (!handle_live(handle, typeid(H)))
    throw std::invalid_argument(std::string(name) + ": not a live handle of its kind (destroyed already, or a " +
                                "pointer to something else)");
}

// Gives the new handle `made` to the caller's *out, where the ABI's create functions hand it out.
template <class H> void hand_out(H* made, H** out) {
  std::unique_ptr<H> owned(made);
  handle_made(made, typeid(H));
  *out = owned.release();
}

// The destroy functions' body: deletes a live handle; anything else (null, destroyed already) is left alone.
template <class H> void destroy(H* handle) noexcept {
  if (handle && handle_destroyed(handle, typeid(H))) delete handle;
}

// parse()'s value; its std::invalid_argument (which names what it parses: "dtype", "JITBMM_TUNE") named after the
// argument `name` first, so that the message says which argument of the call it was.
template <class F> auto parsed(const char* name, F parse) {
  try {
    return parse();
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string(name) + ": " + e.what());
  }
}

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
