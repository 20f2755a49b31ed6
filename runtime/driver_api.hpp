// The CUDA Driver API, loaded at run time with dlopen("libcuda.so.1"), so jitbmm starts on machines without a
// driver and reports that as NoDriverError. cuda.h supplies the types and the versioned entry-point names.
#pragma once

#include <cuda.h>

#include <string>

namespace jitbmm {

// X(name): every driver entry point jitbmm calls. cuda.h maps some names to versioned symbols (cuMemAlloc →
// cuMemAlloc_v2); the member keeps the plain name and the loader asks for the versioned symbol.
#define JITBMM_DRIVER_FUNCTIONS(X)                                                                                     \
  X(cuInit)                                                                                                            \
  X(cuDriverGetVersion)                                                                                                \
  X(cuGetErrorName)                                                                                                    \
  X(cuGetErrorString)                                                                                                  \
  X(cuDeviceGetCount)                                                                                                  \
  X(cuDeviceGet) X(cuDeviceGetName) X(cuDeviceGetAttribute) X(cuDevicePrimaryCtxRetain) X(cuCtxGetCurrent)             \
      X(cuCtxSetCurrent) X(cuCtxPushCurrent) X(cuCtxPopCurrent) X(cuCtxGetDevice) X(cuCtxSynchronize)                  \
          X(cuModuleLoadData) X(cuModuleUnload) X(cuModuleGetFunction) X(cuFuncGetAttribute) X(cuFuncSetAttribute)     \
              X(cuLaunchKernel) X(cuMemAlloc) X(cuMemFree) X(cuMemcpyHtoD) X(cuMemcpyDtoH) X(cuMemsetD32)              \
                  X(cuMemsetD8) X(cuMemsetD8Async) X(cuStreamSynchronize) X(cuStreamCreate) X(cuStreamDestroy)         \
                      X(cuMemFreeAsync) X(cuMemPoolCreate) X(cuMemPoolSetAttribute) X(cuMemPoolGetAttribute)           \
                          X(cuMemPoolTrimTo) X(cuMemAllocFromPoolAsync) X(cuEventCreate) X(cuEventDestroy)             \
                              X(cuEventRecord) X(cuEventSynchronize) X(cuEventElapsedTime)                             \
                                  X(cuOccupancyMaxActiveBlocksPerMultiprocessor)

struct DriverApi {
#define JITBMM_DECLARE_MEMBER(name)                                                                                    \
  decltype(&::name) name = nullptr; // NOLINT(bugprone-macro-parentheses): a declaration
  JITBMM_DRIVER_FUNCTIONS(JITBMM_DECLARE_MEMBER)
#undef JITBMM_DECLARE_MEMBER
  void* handle = nullptr;
  std::string library; // the path that was loaded
};

// The process-wide driver: loaded and cuInit-ed on first use. Throws NoDriverError ("no CUDA driver found ...")
// when libcuda cannot be loaded or initialised. $JITBMM_LIBCUDA overrides the library path (tests use it).
const DriverApi& driver();

// Loads a driver library from `path` without caching it (for tests of the failure path).
DriverApi load_driver(const std::string& path);

// Throws CudaError naming `what` and the CUresult when `result` is not CUDA_SUCCESS.
void check(CUresult result, const char* what);

// "CUDA_ERROR_OUT_OF_MEMORY" for a result, or "CUresult <n>" when the driver cannot name it.
std::string result_name(CUresult result);

} // namespace jitbmm
