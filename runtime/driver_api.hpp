// The CUDA Driver API, loaded at run time with dlopen("libcuda.so.1"), so jitbmm starts on machines without a
// driver and reports that as NoDriverError.
//
// The part of the driver's C interface that jitbmm calls is declared below, written from the CUDA Driver API
// reference: the handle types, the constants it passes or compares, and every entry point with the symbol the
// loader asks for and its signature. So building jitbmm needs no CUDA header. tests/abi/check_cuda_abi.cpp, built
// wherever the toolkit is installed, checks each of these facts against cuda.h at compile time.
#pragma once

#include <cstddef>
#include <string>

// The driver's opaque handles, under the driver's own struct tags: a CUstream (or cudaStream_t) from the caller's
// code is the same type as jitbmm's.
struct CUctx_st;
struct CUmod_st;
struct CUfunc_st;
struct CUstream_st;
struct CUevent_st;
struct CUmemPoolHandle_st;

namespace jitbmm {

using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = CUctx_st*;
using CUmodule = CUmod_st*;
using CUfunction = CUfunc_st*;
using CUstream = CUstream_st*;
using CUevent = CUevent_st*;
using CUmemoryPool = CUmemPoolHandle_st*;

// A fixed underlying type, so any value the driver returns is a valid CUresult; only the codes jitbmm names.
enum CUresult : int {
  CUDA_SUCCESS = 0,
  CUDA_ERROR_INVALID_VALUE = 1,
  CUDA_ERROR_OUT_OF_MEMORY = 2,
  CUDA_ERROR_INVALID_IMAGE = 200,
  CUDA_ERROR_NOT_READY = 600,
  CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE = 720,
  CUDA_ERROR_STREAM_CAPTURE_IMPLICIT = 906,
};

enum CUdevice_attribute : int {
  CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 1,
  CU_DEVICE_ATTRIBUTE_CLOCK_RATE = 13,
  CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
  CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR = 81,
  CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97,
};

enum CUfunction_attribute : int {
  CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES = 1,
  CU_FUNC_ATTRIBUTE_NUM_REGS = 4,
  CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8,
};

enum CUmemPool_attribute : int {
  CU_MEMPOOL_ATTR_RELEASE_THRESHOLD = 4,
  CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT = 5,
};

enum CUstreamCaptureStatus : int {
  CU_STREAM_CAPTURE_STATUS_NONE = 0,
  CU_STREAM_CAPTURE_STATUS_ACTIVE = 1,
  CU_STREAM_CAPTURE_STATUS_INVALIDATED = 2,
};

enum CUstreamCaptureMode : int {
  CU_STREAM_CAPTURE_MODE_GLOBAL = 0,
  CU_STREAM_CAPTURE_MODE_RELAXED = 2,
};

enum CUmemAllocationType : int { CU_MEM_ALLOCATION_TYPE_PINNED = 1 };
enum CUmemAllocationHandleType : int { CU_MEM_HANDLE_TYPE_NONE = 0 };
enum CUmemLocationType : int { CU_MEM_LOCATION_TYPE_DEVICE = 1 };

struct CUmemLocation {
  CUmemLocationType type;
  int id;
};

// cuMemPoolCreate's properties, laid out as the driver reads them (88 bytes); zero what jitbmm does not set.
struct CUmemPoolProps {
  CUmemAllocationType allocType;
  CUmemAllocationHandleType handleTypes;
  CUmemLocation location;
  void* win32SecurityAttributes;
  std::size_t maxSize;
  unsigned short usage;
  unsigned char reserved[54];
};

// cuLaunchKernelEx's launch attributes: jitbmm sets whether the launch may overlap the previous kernel of its stream
// (programmatic stream serialization) and, for a kernel with no cluster of its own, the blocks of a cluster. The
// value is a 64-byte union.
enum CUlaunchAttributeID : int {
  CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = 4,
  CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6
};

union CUlaunchAttributeValue {
  char pad[64];
  struct {
    unsigned int x, y, z;
  } clusterDim;
  int programmaticStreamSerializationAllowed;
};

struct CUlaunchAttribute {
  CUlaunchAttributeID id;
  char pad[8 - sizeof(CUlaunchAttributeID)];
  CUlaunchAttributeValue value;
};

struct CUlaunchConfig {
  unsigned int gridDimX, gridDimY, gridDimZ;
  unsigned int blockDimX, blockDimY, blockDimZ;
  unsigned int sharedMemBytes;
  CUstream hStream;
  CUlaunchAttribute* attrs;
  unsigned int numAttrs;
};

constexpr unsigned int CU_STREAM_NON_BLOCKING = 1;
constexpr unsigned int CU_EVENT_DEFAULT = 0;
constexpr unsigned int CU_EVENT_DISABLE_TIMING = 2;

// X(member, symbol, parameters): every driver entry point jitbmm calls, each returning CUresult. The symbol is the
// versioned one where the driver exports several (cuMemAlloc → cuMemAlloc_v2), and the default-stream (not
// per-thread) form.
#define JITBMM_DRIVER_FUNCTIONS(X)                                                                                     \
  X(cuInit, cuInit, (unsigned int flags))                                                                              \
  X(cuDriverGetVersion, cuDriverGetVersion, (int* version))                                                            \
  X(cuGetErrorName, cuGetErrorName, (CUresult error, const char** name))                                               \
  X(cuGetErrorString, cuGetErrorString, (CUresult error, const char** text))                                           \
  X(cuDeviceGetCount, cuDeviceGetCount, (int* count))                                                                  \
  X(cuDeviceGet, cuDeviceGet, (CUdevice * device, int ordinal))                                                        \
  X(cuDeviceGetName, cuDeviceGetName, (char* name, int length, CUdevice device))                                       \
  X(cuDeviceGetAttribute, cuDeviceGetAttribute, (int* value, CUdevice_attribute attribute, CUdevice device))           \
  X(cuDeviceTotalMem, cuDeviceTotalMem_v2, (std::size_t * bytes, CUdevice device))                                    \
  X(cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain, (CUcontext * context, CUdevice device))                        \
  X(cuCtxGetCurrent, cuCtxGetCurrent, (CUcontext * context))                                                           \
  X(cuCtxSetCurrent, cuCtxSetCurrent, (CUcontext context))                                                             \
  X(cuCtxPushCurrent, cuCtxPushCurrent_v2, (CUcontext context))                                                        \
  X(cuCtxPopCurrent, cuCtxPopCurrent_v2, (CUcontext * context))                                                        \
  X(cuCtxGetDevice, cuCtxGetDevice, (CUdevice * device))                                                               \
  X(cuCtxGetId, cuCtxGetId, (CUcontext context, unsigned long long* id))                                               \
  X(cuCtxSynchronize, cuCtxSynchronize, ())                                                                            \
  X(cuModuleLoadData, cuModuleLoadData, (CUmodule * module, const void* image))                                        \
  X(cuModuleUnload, cuModuleUnload, (CUmodule module))                                                                 \
  X(cuModuleGetFunction, cuModuleGetFunction, (CUfunction * function, CUmodule module, const char* name))              \
  X(cuFuncGetAttribute, cuFuncGetAttribute, (int* value, CUfunction_attribute attribute, CUfunction function))         \
  X(cuFuncSetAttribute, cuFuncSetAttribute, (CUfunction function, CUfunction_attribute attribute, int value))          \
  X(cuLaunchKernel, cuLaunchKernel,                                                                                    \
    (CUfunction function, unsigned int grid_x, unsigned int grid_y, unsigned int grid_z, unsigned int block_x,         \
     unsigned int block_y, unsigned int block_z, unsigned int shared_bytes, CUstream stream, void** parameters,        \
     void** extra))                                                                                                    \
  X(cuLaunchKernelEx, cuLaunchKernelEx,                                                                                \
    (const CUlaunchConfig* config, CUfunction function, void** parameters, void** extra))                              \
  X(cuLaunchCooperativeKernel, cuLaunchCooperativeKernel,                                                              \
    (CUfunction function, unsigned int grid_x, unsigned int grid_y, unsigned int grid_z, unsigned int block_x,         \
     unsigned int block_y, unsigned int block_z, unsigned int shared_bytes, CUstream stream, void** parameters))       \
  X(cuMemAlloc, cuMemAlloc_v2, (CUdeviceptr * pointer, std::size_t bytes))                                             \
  X(cuMemFree, cuMemFree_v2, (CUdeviceptr pointer))                                                                    \
  X(cuMemGetInfo, cuMemGetInfo_v2, (std::size_t * free_bytes, std::size_t * total_bytes))                             \
  X(cuMemcpyHtoD, cuMemcpyHtoD_v2, (CUdeviceptr destination, const void* source, std::size_t bytes))                   \
  X(cuMemcpyDtoH, cuMemcpyDtoH_v2, (void* destination, CUdeviceptr source, std::size_t bytes))                         \
  X(cuMemcpyDtoHAsync, cuMemcpyDtoHAsync_v2,                                                                           \
    (void* destination, CUdeviceptr source, std::size_t bytes, CUstream stream))                                       \
  X(cuMemAllocHost, cuMemAllocHost_v2, (void** pointer, std::size_t bytes))                                            \
  X(cuMemFreeHost, cuMemFreeHost, (void* pointer))                                                                     \
  X(cuMemsetD32, cuMemsetD32_v2, (CUdeviceptr destination, unsigned int value, std::size_t count))                     \
  X(cuMemsetD8, cuMemsetD8_v2, (CUdeviceptr destination, unsigned char value, std::size_t count))                      \
  X(cuMemsetD8Async, cuMemsetD8Async,                                                                                  \
    (CUdeviceptr destination, unsigned char value, std::size_t count, CUstream stream))                                \
  X(cuMemsetD2D8Async, cuMemsetD2D8Async,                                                                              \
    (CUdeviceptr destination, std::size_t pitch, unsigned char value, std::size_t width, std::size_t height,           \
     CUstream stream))                                                                                                 \
  X(cuStreamSynchronize, cuStreamSynchronize, (CUstream stream))                                                       \
  X(cuStreamIsCapturing, cuStreamIsCapturing, (CUstream stream, CUstreamCaptureStatus * status))                       \
  X(cuThreadExchangeStreamCaptureMode, cuThreadExchangeStreamCaptureMode, (CUstreamCaptureMode * mode))                \
  X(cuStreamGetCtx, cuStreamGetCtx, (CUstream stream, CUcontext * context))                                             \
  X(cuStreamCreate, cuStreamCreate, (CUstream * stream, unsigned int flags))                                           \
  X(cuStreamDestroy, cuStreamDestroy_v2, (CUstream stream))                                                            \
  X(cuMemFreeAsync, cuMemFreeAsync, (CUdeviceptr pointer, CUstream stream))                                            \
  X(cuMemPoolCreate, cuMemPoolCreate, (CUmemoryPool * pool, const CUmemPoolProps* properties))                         \
  X(cuMemPoolSetAttribute, cuMemPoolSetAttribute, (CUmemoryPool pool, CUmemPool_attribute attribute, void* value))     \
  X(cuMemPoolGetAttribute, cuMemPoolGetAttribute, (CUmemoryPool pool, CUmemPool_attribute attribute, void* value))     \
  X(cuMemPoolTrimTo, cuMemPoolTrimTo, (CUmemoryPool pool, std::size_t keep_bytes))                                     \
  X(cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync,                                                                  \
    (CUdeviceptr * pointer, std::size_t bytes, CUmemoryPool pool, CUstream stream))                                    \
  X(cuEventCreate, cuEventCreate, (CUevent * event, unsigned int flags))                                               \
  X(cuEventDestroy, cuEventDestroy_v2, (CUevent event))                                                                \
  X(cuEventRecord, cuEventRecord, (CUevent event, CUstream stream))                                                    \
  X(cuStreamWaitEvent, cuStreamWaitEvent, (CUstream stream, CUevent event, unsigned int flags))                        \
  X(cuEventSynchronize, cuEventSynchronize, (CUevent event))                                                           \
  X(cuEventQuery, cuEventQuery, (CUevent event))                                                                       \
  X(cuEventElapsedTime, cuEventElapsedTime_v2, (float* milliseconds, CUevent start, CUevent end))                      \
  X(cuOccupancyMaxActiveBlocksPerMultiprocessor, cuOccupancyMaxActiveBlocksPerMultiprocessor,                          \
    (int* blocks, CUfunction function, int block_size, std::size_t dynamic_shared_bytes))                              \
  X(cuOccupancyMaxActiveClusters, cuOccupancyMaxActiveClusters,                                                        \
    (int* clusters, CUfunction function, const CUlaunchConfig* config))

struct DriverApi {
#define JITBMM_DECLARE_MEMBER(member, symbol, parameters)                                                              \
  CUresult(*member) parameters = nullptr; // NOLINT(bugprone-macro-parentheses): a declaration
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
