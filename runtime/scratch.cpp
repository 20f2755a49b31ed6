#include "runtime/scratch.hpp"

#include <cstdint>
#include <stdexcept>
#include <string>

#include "runtime/device_pool.hpp"

namespace jitbmm {
namespace {

std::size_t rounded(std::size_t bytes) {
  return bytes + (kScratchAlignment - bytes % kScratchAlignment) % kScratchAlignment;
}

} // namespace

ScratchSize& ScratchSize::add(std::size_t bytes, const char* what) {
  if (bytes > SIZE_MAX - kScratchAlignment || rounded(bytes) > SIZE_MAX - bytes_)
    throw std::invalid_argument(std::string(what) + ": scratch size overflows");
  bytes_ += rounded(bytes);
  return *this;
}

void check_workspace(const Workspace& caller, std::size_t needed) {
  if (!caller.ptr && !caller.bytes) return;
  if (!caller.ptr)
    throw std::invalid_argument("workspace: " + std::to_string(caller.bytes) + " bytes at a null pointer");
  if (reinterpret_cast<uintptr_t>(caller.ptr) % kScratchAlignment != 0)
    throw std::invalid_argument("workspace: pointer not aligned to " + std::to_string(kScratchAlignment) + " bytes");
  if (caller.bytes < needed)
    throw std::invalid_argument("workspace: " + std::to_string(caller.bytes) + " bytes given, this call needs " +
                                std::to_string(needed));
}

Scratch::Scratch(const DeviceInfo& device, const Workspace& caller, std::size_t needed, CUstream stream)
    : stream_(stream) {
  check_workspace(caller, needed);
  if (caller.ptr || caller.bytes) {
    next_ = static_cast<char*>(caller.ptr);
    left_ = needed;
    return;
  }
  if (needed == 0) return;
  owned_ = pool_allocate(device, needed, stream);
  next_ = reinterpret_cast<char*>(owned_); // NOLINT(performance-no-int-to-ptr): a device address
  left_ = needed;
}

Scratch::~Scratch() {
  if (!owned_) return;
  try {
    pool_free(owned_, stream_);
  } catch (...) { // nothing to do: the driver kept the memory; a destructor must not throw
  }
}

void* Scratch::take(std::size_t bytes) {
  if (bytes == 0) return nullptr;
  if (rounded(bytes) > left_) throw std::logic_error("scratch: a piece was not counted in its ScratchSize");
  void* piece = next_;
  next_ += rounded(bytes);
  left_ -= rounded(bytes);
  return piece;
}

} // namespace jitbmm
