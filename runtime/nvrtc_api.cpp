#include "runtime/nvrtc_api.hpp"

#include <dlfcn.h>
#include <link.h>
#include <sys/stat.h>

#include <cstdlib>
#include <mutex>

#include "jitbmm/errors.hpp"
#include "runtime/driver_api.hpp"

namespace jitbmm {

namespace {

// `path` without ../ and links (the file itself), or "" when it cannot be resolved.
std::string real_path(const std::string& path) {
  char* real = realpath(path.c_str(), nullptr);
  const std::string out = real ? real : "";
  std::free(real);
  return out;
}

// The folder holding this code's file: libjitbmm.so, libjitbmm_c.so, or the wheel's CLI (jitbmm/jitbmm-cli, linked
// statically, for which the loader reports argv[0], so the executable's real path is read instead); "" when it
// cannot be told.
std::string own_folder() {
  Dl_info info{};
  if (!dladdr(reinterpret_cast<void*>(&own_folder), &info) || !info.dli_fname) return "";
  std::string path = info.dli_fname;
  if (path.find('/') == std::string::npos) path = "/proc/self/exe"; // the main program, started through PATH
  path = real_path(path);
  const std::size_t slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash);
}

// The CUDA major version of the driver, where one loads, else 0 (compiling needs none): an NVRTC of a newer major
// writes code that driver refuses to load.
int driver_major() {
  try {
    int version = 0;
    if (driver().cuDriverGetVersion(&version) == CUDA_SUCCESS) return version / 1000;
  } catch (const std::exception&) { // no driver: nothing to match
  }
  return 0;
}

} // namespace

std::vector<std::string> nvrtc_candidates() {
  const char* env = std::getenv("JITBMM_NVRTC_LIBRARY");
  if (env && *env) return {env};
  std::vector<std::string> out;
  const std::string here = own_folder();
  if (!here.empty()) // the wheel: site-packages/jitbmm/libjitbmm_c.so beside site-packages/nvidia/...
    for (const char* pip : {"/../nvidia/cu13/lib/libnvrtc.so.13", "/../nvidia/cuda_nvrtc/lib/libnvrtc.so.12"})
      out.push_back(here + pip);
  for (const char* soname : {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"}) out.push_back(soname);
  for (const char* var : {"CUDA_HOME", "CUDA_PATH"}) {
    const char* root = std::getenv(var);
    if (root && *root) out.push_back(std::string(root) + "/lib64/libnvrtc.so");
  }
  out.push_back("/usr/local/cuda/lib64/libnvrtc.so");
  return out;
}

NvrtcApi load_nvrtc(const std::string& path) {
  NvrtcApi api;
  api.library = path;
  api.handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!api.handle) {
    const char* why = dlerror();
    throw NoNvrtcError("could not load " + path + " (" + (why ? why : "unknown reason") + ")");
  }
#define JITBMM_RESOLVE(name, result, parameters)                                                                       \
  api.name = reinterpret_cast<decltype(api.name)>(dlsym(api.handle, #name));                                           \
  if (!api.name) {                                                                                                     \
    dlclose(api.handle);                                                                                               \
    throw NoNvrtcError(path + " lacks the entry point " #name);                                                        \
  }
  JITBMM_NVRTC_FUNCTIONS(JITBMM_RESOLVE)
#undef JITBMM_RESOLVE
  link_map* map = nullptr; // the file the loader chose for a bare soname
  if (dlinfo(api.handle, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name && *map->l_name) {
    const std::string real = real_path(map->l_name);
    api.library = real.empty() ? map->l_name : real;
  }
  struct stat st {};
  api.library_size = ::stat(api.library.c_str(), &st) == 0 ? std::to_string(st.st_size) : "size unknown";
  return api;
}

const NvrtcApi& nvrtc() {
  static std::once_flag once;
  static NvrtcApi& api = *new NvrtcApi(); // never destroyed: a background build may still use it as the process exits
  static std::string& failure = *new std::string();
  std::call_once(once, [] {
    std::string tried;
    const int driver = driver_major();
    // Of the NVRTCs found, one no newer than the driver (a CUDA 12 driver loads no CUDA 13 NVRTC's code), the first
    // in the candidates' order; JITBMM_NVRTC_LIBRARY's is taken whatever it is.
    const bool named = std::getenv("JITBMM_NVRTC_LIBRARY") && *std::getenv("JITBMM_NVRTC_LIBRARY");
    for (const std::string& path : nvrtc_candidates()) {
      try {
        NvrtcApi found = load_nvrtc(path);
        int major = 0, minor = 0;
        if (!named && driver > 0 && found.nvrtcVersion(&major, &minor) == NVRTC_SUCCESS && major > driver) {
          tried += "\n  " + found.library + ": NVRTC " + std::to_string(major) + "." + std::to_string(minor) +
                   ", whose code the CUDA " + std::to_string(driver) + " driver cannot load";
          dlclose(found.handle);
          continue;
        }
        api = found;
        return;
      } catch (const NoNvrtcError& e) {
        tried += std::string("\n  ") + e.what();
      }
    }
    failure = "no NVRTC found (jitbmm compiles its kernels with it at run time). Tried:" + tried +
              "\nInstall it with `pip install nvidia-cuda-nvrtc` (`nvidia-cuda-nvrtc-cu12` for a CUDA 12 driver), "
              "install the CUDA toolkit, or set JITBMM_NVRTC_LIBRARY to a libnvrtc.so.";
  });
  if (!failure.empty()) throw NoNvrtcError(failure);
  return api;
}

} // namespace jitbmm
