// NVRTC, loaded at run time with dlopen like the driver, so jitbmm runs with the NVRTC the machine has: the pip
// package (nvidia-cuda-nvrtc) beside an installed jitbmm, or a CUDA toolkit.
//
// The part of NVRTC's C interface that jitbmm calls is declared below, written from the NVRTC reference, so building
// jitbmm needs no CUDA header; tests/abi/check_cuda_abi.cpp checks it against nvrtc.h where the toolkit is installed.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

struct _nvrtcProgram; // NVRTC's opaque program, under its own tag

namespace jitbmm {

using nvrtcProgram = _nvrtcProgram*;

// A fixed underlying type, so any value NVRTC returns is a valid nvrtcResult.
enum nvrtcResult : int { NVRTC_SUCCESS = 0 };

// X(name, result, parameters): every NVRTC entry point jitbmm calls.
#define JITBMM_NVRTC_FUNCTIONS(X)                                                                                      \
  X(nvrtcVersion, nvrtcResult, (int* major, int* minor))                                                               \
  X(nvrtcGetErrorString, const char*, (nvrtcResult result))                                                            \
  X(nvrtcGetNumSupportedArchs, nvrtcResult, (int* count))                                                              \
  X(nvrtcGetSupportedArchs, nvrtcResult, (int* archs))                                                                 \
  X(nvrtcCreateProgram, nvrtcResult,                                                                                   \
    (nvrtcProgram * program, const char* source, const char* name, int header_count, const char* const* headers,      \
     const char* const* include_names))                                                                                \
  X(nvrtcDestroyProgram, nvrtcResult, (nvrtcProgram * program))                                                        \
  X(nvrtcCompileProgram, nvrtcResult, (nvrtcProgram program, int option_count, const char* const* options))            \
  X(nvrtcGetProgramLogSize, nvrtcResult, (nvrtcProgram program, std::size_t* bytes))                                   \
  X(nvrtcGetProgramLog, nvrtcResult, (nvrtcProgram program, char* log))                                                \
  X(nvrtcGetPTXSize, nvrtcResult, (nvrtcProgram program, std::size_t* bytes))                                          \
  X(nvrtcGetPTX, nvrtcResult, (nvrtcProgram program, char* ptx))                                                       \
  X(nvrtcGetCUBINSize, nvrtcResult, (nvrtcProgram program, std::size_t* bytes))                                        \
  X(nvrtcGetCUBIN, nvrtcResult, (nvrtcProgram program, char* cubin))

struct NvrtcApi {
#define JITBMM_DECLARE_MEMBER(name, result, parameters)                                                                \
  result(*name) parameters = nullptr; // NOLINT(bugprone-macro-parentheses): a declaration
  JITBMM_NVRTC_FUNCTIONS(JITBMM_DECLARE_MEMBER)
#undef JITBMM_DECLARE_MEMBER
  void* handle = nullptr;
  std::string library; // the file that was loaded
  // Its size in bytes when it was loaded ("size unknown" where it could not be read): part of nvrtc_build(), taken
  // then, so that a newer NVRTC installed over it meanwhile is not named for the code of the one loaded.
  std::string library_size;
};

// Where NVRTC is looked for, in order: $JITBMM_NVRTC_LIBRARY alone when it is set; else the pip packages' layout
// beside this library (site-packages/nvidia/cu13/lib, nvidia/cuda_nvrtc/lib for CUDA 12), the dynamic linker's
// search (LD_LIBRARY_PATH, the system's library cache) for libnvrtc.so.13, .so.12, .so, then $CUDA_HOME/lib64,
// $CUDA_PATH/lib64 and /usr/local/cuda/lib64.
std::vector<std::string> nvrtc_candidates();

// The process-wide NVRTC: the first candidate that loads with every entry point. Throws NoNvrtcError naming every
// place tried, and why each failed, when none does.
const NvrtcApi& nvrtc();

// Loads NVRTC from `path` without caching it (tests); NoNvrtcError when it cannot be loaded or lacks an entry point.
NvrtcApi load_nvrtc(const std::string& path);

} // namespace jitbmm
