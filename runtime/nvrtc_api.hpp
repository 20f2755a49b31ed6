// NVRTC, loaded at run time with dlopen like the driver, so jitbmm builds against nvrtc.h alone and runs with the
// NVRTC the machine has: the pip package (nvidia-cuda-nvrtc) beside an installed jitbmm, or a CUDA toolkit.
#pragma once

#include <nvrtc.h>

#include <string>
#include <vector>

namespace jitbmm {

#define JITBMM_NVRTC_FUNCTIONS(X)                                                                                      \
  X(nvrtcVersion) X(nvrtcGetErrorString) X(nvrtcCreateProgram) X(nvrtcDestroyProgram) X(nvrtcCompileProgram)           \
      X(nvrtcGetProgramLogSize) X(nvrtcGetProgramLog) X(nvrtcGetPTXSize) X(nvrtcGetPTX) X(nvrtcGetCUBINSize)           \
          X(nvrtcGetCUBIN)

struct NvrtcApi {
#define JITBMM_DECLARE_MEMBER(name)                                                                                    \
  decltype(&::name) name = nullptr; // NOLINT(bugprone-macro-parentheses): a declaration
  JITBMM_NVRTC_FUNCTIONS(JITBMM_DECLARE_MEMBER)
#undef JITBMM_DECLARE_MEMBER
  void* handle = nullptr;
  std::string library; // the file that was loaded
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
