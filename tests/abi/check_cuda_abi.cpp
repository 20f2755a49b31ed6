// jitbmm declares the part of the CUDA driver and NVRTC interfaces it calls (runtime/driver_api.hpp,
// runtime/nvrtc_api.hpp) instead of including cuda.h and nvrtc.h. This file holds those declarations against the
// toolkit's headers at compile time: every entry point's symbol and signature, every constant and the layout of
// every struct. A mismatch does not compile. Enums count as the 32-bit integers the ABI passes them as.
#include <cuda.h>
#include <nvrtc.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <type_traits>

#include "runtime/driver_api.hpp"
#include "runtime/nvrtc_api.hpp"

namespace jitbmm {
namespace {

// A type as the ABI sees it: enums become int32, cuda.h's structs become jitbmm's (whose layout is checked below).
template <class T, bool = std::is_enum_v<T>> struct abi {
  using type = T;
};
template <class T> using abi_t = typename abi<T>::type;
template <class T> struct abi<T, true> {
  static_assert(sizeof(T) == 4, "an enum the ABI does not pass as 32 bits");
  using type = std::int32_t;
};
template <class T> struct abi<T*, false> { using type = abi_t<T>*; };
template <class T> struct abi<const T, false> { using type = const abi_t<T>; };
template <class R, class... A> struct abi<R (*)(A...), false> { using type = abi_t<R> (*)(abi_t<A>...); };
template <> struct abi<::CUmemPoolProps, false> { using type = CUmemPoolProps; };
template <> struct abi<::CUlaunchConfig, false> { using type = CUlaunchConfig; };

constexpr bool same_text(const char* a, const char* b) {
  for (; *a && *a == *b; ++a, ++b) {
  }
  return *a == *b;
}

#define JITBMM_TEXT2(x) #x
#define JITBMM_TEXT(x) JITBMM_TEXT2(x) // after cuda.h's macros: the symbol cuda.h binds the plain name to

// Each driver entry point: cuda.h binds the plain name to our symbol, and the symbol has our signature.
#define JITBMM_CHECK_DRIVER(member, symbol, parameters)                                                                \
  static_assert(same_text(JITBMM_TEXT(member), #symbol), "cuda.h binds " #member " to another symbol than " #symbol); \
  static_assert(std::is_same_v<abi_t<decltype(&::symbol)>, abi_t<CUresult(*) parameters>>,                            \
                "the signature of " #symbol " differs from cuda.h's");
JITBMM_DRIVER_FUNCTIONS(JITBMM_CHECK_DRIVER)

#define JITBMM_CHECK_NVRTC(name, result, parameters)                                                                   \
  static_assert(std::is_same_v<abi_t<decltype(&::name)>, abi_t<result(*) parameters>>,                                \
                "the signature of " #name " differs from nvrtc.h's");
JITBMM_NVRTC_FUNCTIONS(JITBMM_CHECK_NVRTC)

#define JITBMM_CHECK_CONSTANT(name)                                                                                    \
  static_assert(static_cast<long long>(jitbmm::name) == static_cast<long long>(::name), #name " differs");
JITBMM_CHECK_CONSTANT(CUDA_SUCCESS)
JITBMM_CHECK_CONSTANT(CUDA_ERROR_INVALID_VALUE)
JITBMM_CHECK_CONSTANT(CUDA_ERROR_OUT_OF_MEMORY)
JITBMM_CHECK_CONSTANT(CUDA_ERROR_INVALID_IMAGE)
JITBMM_CHECK_CONSTANT(CUDA_ERROR_NOT_READY)
JITBMM_CHECK_CONSTANT(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT)
JITBMM_CHECK_CONSTANT(CU_STREAM_CAPTURE_STATUS_NONE)
JITBMM_CHECK_CONSTANT(CU_STREAM_CAPTURE_STATUS_ACTIVE)
JITBMM_CHECK_CONSTANT(CU_STREAM_CAPTURE_STATUS_INVALIDATED)
JITBMM_CHECK_CONSTANT(CU_STREAM_CAPTURE_MODE_GLOBAL)
JITBMM_CHECK_CONSTANT(CU_STREAM_CAPTURE_MODE_RELAXED)
JITBMM_CHECK_CONSTANT(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)
JITBMM_CHECK_CONSTANT(CU_DEVICE_ATTRIBUTE_CLOCK_RATE)
JITBMM_CHECK_CONSTANT(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
JITBMM_CHECK_CONSTANT(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
JITBMM_CHECK_CONSTANT(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)
JITBMM_CHECK_CONSTANT(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR)
JITBMM_CHECK_CONSTANT(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
JITBMM_CHECK_CONSTANT(CU_FUNC_ATTRIBUTE_NUM_REGS)
JITBMM_CHECK_CONSTANT(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)
JITBMM_CHECK_CONSTANT(CU_MEMPOOL_ATTR_RELEASE_THRESHOLD)
JITBMM_CHECK_CONSTANT(CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT)
JITBMM_CHECK_CONSTANT(CU_MEM_ALLOCATION_TYPE_PINNED)
JITBMM_CHECK_CONSTANT(CU_MEM_HANDLE_TYPE_NONE)
JITBMM_CHECK_CONSTANT(CU_MEM_LOCATION_TYPE_DEVICE)
JITBMM_CHECK_CONSTANT(CU_STREAM_NON_BLOCKING)
JITBMM_CHECK_CONSTANT(CU_EVENT_DEFAULT)
JITBMM_CHECK_CONSTANT(CU_EVENT_DISABLE_TIMING)
JITBMM_CHECK_CONSTANT(CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION)
JITBMM_CHECK_CONSTANT(NVRTC_SUCCESS)

// The handles are the driver's own types.
static_assert(std::is_same_v<CUcontext, ::CUcontext> && std::is_same_v<CUmodule, ::CUmodule> &&
              std::is_same_v<CUfunction, ::CUfunction> && std::is_same_v<CUstream, ::CUstream> &&
              std::is_same_v<CUevent, ::CUevent> && std::is_same_v<CUmemoryPool, ::CUmemoryPool> &&
              std::is_same_v<CUdevice, ::CUdevice> && std::is_same_v<CUdeviceptr, ::CUdeviceptr> &&
              std::is_same_v<nvrtcProgram, ::nvrtcProgram>);

#define JITBMM_CHECK_FIELD(type, field)                                                                                \
  static_assert(offsetof(jitbmm::type, field) == offsetof(::type, field) &&                                           \
                sizeof(jitbmm::type::field) == sizeof(::type::field), #type "::" #field " is laid out differently");
static_assert(sizeof(jitbmm::CUmemPoolProps) == sizeof(::CUmemPoolProps));
JITBMM_CHECK_FIELD(CUmemPoolProps, allocType)
JITBMM_CHECK_FIELD(CUmemPoolProps, handleTypes)
JITBMM_CHECK_FIELD(CUmemPoolProps, location)
JITBMM_CHECK_FIELD(CUmemPoolProps, win32SecurityAttributes)
JITBMM_CHECK_FIELD(CUmemPoolProps, maxSize)
JITBMM_CHECK_FIELD(CUmemPoolProps, usage)
JITBMM_CHECK_FIELD(CUmemPoolProps, reserved)
static_assert(sizeof(jitbmm::CUlaunchConfig) == sizeof(::CUlaunchConfig));
JITBMM_CHECK_FIELD(CUlaunchConfig, gridDimX)
JITBMM_CHECK_FIELD(CUlaunchConfig, gridDimY)
JITBMM_CHECK_FIELD(CUlaunchConfig, gridDimZ)
JITBMM_CHECK_FIELD(CUlaunchConfig, blockDimX)
JITBMM_CHECK_FIELD(CUlaunchConfig, blockDimY)
JITBMM_CHECK_FIELD(CUlaunchConfig, blockDimZ)
JITBMM_CHECK_FIELD(CUlaunchConfig, sharedMemBytes)
JITBMM_CHECK_FIELD(CUlaunchConfig, hStream)
JITBMM_CHECK_FIELD(CUlaunchConfig, attrs)
JITBMM_CHECK_FIELD(CUlaunchConfig, numAttrs)
static_assert(sizeof(jitbmm::CUlaunchAttribute) == sizeof(::CUlaunchAttribute));
JITBMM_CHECK_FIELD(CUlaunchAttribute, id)
JITBMM_CHECK_FIELD(CUlaunchAttribute, value)
static_assert(sizeof(jitbmm::CUlaunchAttributeValue) == sizeof(::CUlaunchAttributeValue) &&
              offsetof(::CUlaunchAttributeValue, programmaticStreamSerializationAllowed) == 0 &&
              sizeof(::CUlaunchAttributeValue::programmaticStreamSerializationAllowed) == sizeof(int));
static_assert(sizeof(jitbmm::CUmemLocation) == sizeof(::CUmemLocation));
JITBMM_CHECK_FIELD(CUmemLocation, type)
JITBMM_CHECK_FIELD(CUmemLocation, id)

} // namespace
} // namespace jitbmm

int main() {
#define JITBMM_COUNT(...) +1
  constexpr int driver = 0 JITBMM_DRIVER_FUNCTIONS(JITBMM_COUNT), nvrtc = 0 JITBMM_NVRTC_FUNCTIONS(JITBMM_COUNT);
  std::printf("jitbmm's declarations agree with cuda.h %d and nvrtc.h: %d driver and %d NVRTC entry points\n",
              CUDA_VERSION, driver, nvrtc);
}
