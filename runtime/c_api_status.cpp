#include "runtime/c_api_status.hpp"

namespace jitbmm::c_api {
namespace {
thread_local std::string g_last_error;
} // namespace

jitbmm_status fail(jitbmm_status status, const std::string& message) {
  g_last_error = message;
  return status;
}

void clear_last_error() { g_last_error.clear(); }

void require(const void* ptr, const char* name) {
  if (!ptr) throw std::invalid_argument(std::string(name) + ": null pointer");
}

} // namespace jitbmm::c_api

extern "C" const char* jitbmm_last_error(void) { return jitbmm::c_api::g_last_error.c_str(); }
