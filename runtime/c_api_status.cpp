#include "runtime/c_api_status.hpp"

#include <mutex>
#include <shared_mutex>
#include <typeindex>
#include <unordered_map>

namespace jitbmm::c_api {
namespace {
thread_local std::string g_last_error;
thread_local bool g_unkept = false; // the last error's message could not be kept: no memory
} // namespace

jitbmm_status fail(jitbmm_status status, const char* message) noexcept {
  try {
    g_last_error = message;
    g_unkept = false;
  } catch (...) {
    g_last_error.clear();
    g_unkept = true;
  }
  return status;
}

void clear_last_error() noexcept {
  g_last_error.clear();
  g_unkept = false;
}

jitbmm_status status_of_current_exception() noexcept {
  try {
    throw;
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

void require(const void* ptr, const char* name) {
  if (!ptr) throw std::invalid_argument(std::string(name) + ": null pointer");
}

namespace {
// Every call checks its handle: the calls of many threads share the lock, making and destroying take it alone.
struct Handles {
  std::shared_mutex mutex;
  std::unordered_map<const void*, std::type_index> live;
  // The entry of a live handle of `type`, else end().
  auto find(const void* handle, const std::type_info& type) {
    const auto it = live.find(handle);
    return it != live.end() && it->second == std::type_index(type) ? it : live.end();
  }
};
Handles& handles() {
  static auto* h = new Handles(); // never destroyed: a handle may be destroyed during the process's exit
  return *h;
}
} // namespace

void handle_made(const void* handle, const std::type_info& type) {
  Handles& h = handles();
  const std::unique_lock<std::shared_mutex> lock(h.mutex);
  h.live.insert_or_assign(handle, std::type_index(type));
}

bool handle_destroyed(const void* handle, const std::type_info& type) noexcept {
  Handles& h = handles();
  const std::unique_lock<std::shared_mutex> lock(h.mutex);
  const auto it = h.find(handle, type);
  if (it == h.live.end()) return false;
  h.live.erase(it);
  return true;
}

bool handle_live(const void* handle, const std::type_info& type) {
  Handles& h = handles();
  const std::shared_lock<std::shared_mutex> lock(h.mutex);
  return h.find(handle, type) != h.live.end();
}

} // namespace jitbmm::c_api

extern "C" const char* jitbmm_last_error(void) {
  using namespace jitbmm::c_api;
  return g_unkept ? "out of memory while keeping the error's message" : g_last_error.c_str();
}
