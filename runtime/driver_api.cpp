#include "runtime/driver_api.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>

#include "jitbmm/errors.hpp"

namespace jitbmm {

namespace {

std::string default_library() {
  const char* env = std::getenv("JITBMM_LIBCUDA");
  return env && *env ? env : "libcuda.so.1";
}

} // namespace

DriverApi load_driver(const std::string& path) {
  DriverApi api;
  api.library = path;
  api.handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!api.handle) {
    const char* why = dlerror();
    throw NoDriverError("no CUDA driver found: could not load " + path + " (" + (why ? why : "unknown reason") +
                        "). Install the NVIDIA driver, or run on a machine with a GPU.");
  }
#define JITBMM_RESOLVE(member, symbol, parameters)                                                                     \
  api.member = reinterpret_cast<decltype(api.member)>(dlsym(api.handle, #symbol));                                     \
  if (!api.member)                                                                                                     \
    throw NoDriverError("no CUDA driver found: " + path +                                                              \
                        " lacks the entry point " #symbol " (driver too old for this jitbmm build?)");
  JITBMM_DRIVER_FUNCTIONS(JITBMM_RESOLVE)
#undef JITBMM_RESOLVE
  return api;
}

const DriverApi& driver() {
  static std::once_flag once;
  static DriverApi& api = *new DriverApi(); // never destroyed: a background build may still use it as the process exits
  static std::string& failure = *new std::string();
  std::call_once(once, [] {
    try {
      api = load_driver(default_library());
      const CUresult r = api.cuInit(0);
      if (r != CUDA_SUCCESS) {
        const char* name = nullptr;
        api.cuGetErrorName(r, &name);
        failure = std::string("no CUDA driver found: cuInit failed with ") + (name ? name : "an unknown error") +
                  " (no usable GPU, or the driver and device disagree)";
      }
    } catch (const NoDriverError& e) {
      failure = e.what();
    }
  });
  if (!failure.empty()) throw NoDriverError(failure);
  return api;
}

std::string result_name(CUresult result) {
  const char* name = nullptr;
  try {
    if (driver().cuGetErrorName(result, &name) == CUDA_SUCCESS && name) return name;
  } catch (const NoDriverError&) {
  }
  return "CUresult " + std::to_string(static_cast<int>(result));
}

void check(CUresult result, const char* what) {
  if (result == CUDA_SUCCESS) return;
  const std::string name = result_name(result);
  const char* text = nullptr;
  driver().cuGetErrorString(result, &text);
  throw CudaError(std::string(what) + " failed: " + name + (text ? std::string(" (") + text + ")" : ""),
                  static_cast<int>(result), name);
}

} // namespace jitbmm
