// RAII device memory for the CLI, benchmarks and tests (the library itself never allocates for the caller).
#pragma once

#include <cstddef>
#include <cstdint>

#include "runtime/device.hpp"

namespace jitbmm {

class DeviceBuffer {
public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t bytes); // in the current context
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* get() const { return reinterpret_cast<void*>(ptr_); } // NOLINT(performance-no-int-to-ptr): device address
  std::size_t size() const { return bytes_; }
  void upload(const void* host, std::size_t bytes, std::size_t offset_bytes = 0);
  void download(void* host, std::size_t bytes, std::size_t offset_bytes = 0) const;
  void fill_bytes(unsigned char value); // e.g. 0xff: NaN in every float dtype, −1 in int32: poison

private:
  CUdeviceptr ptr_ = 0;
  std::size_t bytes_ = 0;
};

} // namespace jitbmm
