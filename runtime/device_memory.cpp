#include "runtime/device_memory.hpp"

#include <stdexcept>
#include <utility>

namespace jitbmm {

DeviceBuffer::DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
  if (bytes) check(driver().cuMemAlloc(&ptr_, bytes), ("cuMemAlloc(" + std::to_string(bytes) + " bytes)").c_str());
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_) driver().cuMemFree(ptr_);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept
    : ptr_(std::exchange(o.ptr_, 0)), bytes_(std::exchange(o.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  std::swap(ptr_, o.ptr_);
  std::swap(bytes_, o.bytes_);
  return *this;
}

void DeviceBuffer::upload(const void* host, std::size_t bytes, std::size_t offset_bytes) {
  if (offset_bytes > bytes_ || bytes > bytes_ - offset_bytes)
    throw std::invalid_argument("upload: more bytes than the buffer holds");
  if (bytes) check(driver().cuMemcpyHtoD(ptr_ + offset_bytes, host, bytes), "cuMemcpyHtoD");
}

void DeviceBuffer::download(void* host, std::size_t bytes, std::size_t offset_bytes) const {
  if (offset_bytes > bytes_ || bytes > bytes_ - offset_bytes)
    throw std::invalid_argument("download: more bytes than the buffer holds");
  if (bytes) check(driver().cuMemcpyDtoH(host, ptr_ + offset_bytes, bytes), "cuMemcpyDtoH");
}

void DeviceBuffer::fill_bytes(unsigned char value) {
  if (bytes_) check(driver().cuMemsetD8(ptr_, value, bytes_), "cuMemsetD8");
  check(driver().cuCtxSynchronize(), "cuCtxSynchronize");
}

} // namespace jitbmm
