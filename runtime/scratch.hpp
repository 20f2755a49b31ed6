// One call's scratch memory, handed out in pieces: from the caller's Workspace when one is given (checked to be
// large enough), else one allocation from the device's pool, returned in stream order when the Scratch ends.
#pragma once

#include <cstddef>

#include "jitbmm/types.hpp" // Workspace
#include "runtime/device.hpp"

namespace jitbmm {

// Every piece starts on this boundary (the caller's workspace must too): enough for any vector load.
constexpr std::size_t kScratchAlignment = 256;

// The bytes a sequence of pieces takes: each rounded up to kScratchAlignment (std::invalid_argument naming `what`
// on overflow).
class ScratchSize {
public:
  ScratchSize& add(std::size_t bytes, const char* what);
  std::size_t bytes() const { return bytes_; }

private:
  std::size_t bytes_ = 0;
};

// Throws std::invalid_argument naming "workspace" when the caller's is null (with a size), misaligned or smaller than
// `needed`; none given (null, 0 bytes) means jitbmm's pool. A call that launches before it takes its Scratch checks
// its workspace so first, for a refused call to have launched nothing.
void check_workspace(const Workspace& caller, std::size_t needed);

class Scratch {
public:
  // `needed` as ScratchSize counted it; the caller's workspace checked by check_workspace.
  Scratch(const DeviceInfo& device, const Workspace& caller, std::size_t needed, CUstream stream);
  ~Scratch();
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;

  // The next piece of `bytes` (null when bytes is 0), in the order ScratchSize counted them.
  void* take(std::size_t bytes);

private:
  CUstream stream_;
  CUdeviceptr owned_ = 0; // from the pool, when the caller gave no workspace
  char* next_ = nullptr;
  std::size_t left_ = 0;
};

} // namespace jitbmm
