// Exceptions thrown by jitbmm. Bad arguments are std::invalid_argument naming the argument; everything that
// goes wrong below the API is one of these, carrying the whole story.
#pragma once

#include <stdexcept>
#include <string>

namespace jitbmm {

// libcuda.so.1 could not be loaded (no NVIDIA driver on this machine) or lacks an entry point we need.
class NoDriverError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

// NVRTC (libnvrtc, which compiles the kernels) could not be found or lacks an entry point; what() names every place
// tried (runtime/nvrtc_api.hpp: $JITBMM_NVRTC_LIBRARY, the pip package, the toolkit).
class NoNvrtcError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

// The GPU is older than the architectures jitbmm compiles for with this NVRTC (sm_75 with NVRTC 13, sm_70 with
// 12.x); what() names the device, its architecture and that floor. Every plan checks it before it compiles.
class UnsupportedDeviceError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

// A CUDA Driver API call failed; what() names the call and the CUresult (e.g. CUDA_ERROR_LAUNCH_FAILED).
class CudaError : public std::runtime_error {
public:
  CudaError(const std::string& what, int result, std::string result_name)
      : std::runtime_error(what), result_(result), result_name_(std::move(result_name)) {}
  int result() const { return result_; }
  const std::string& result_name() const { return result_name_; }

private:
  int result_;
  std::string result_name_;
};

// NVRTC rejected a generated (or overridden) kernel; what() carries the kernel name, the options and the log.
class CompileError : public std::runtime_error {
public:
  CompileError(const std::string& what, std::string log) : std::runtime_error(what), log_(std::move(log)) {}
  const std::string& log() const { return log_; }

private:
  std::string log_;
};

} // namespace jitbmm
