// Limits CUDA sets on every GPU jitbmm runs on. Plain C++ with no device code: the generator's fit rules, the
// launcher and the tuner include this same file, so host and device read one number.
#pragma once

namespace jb {

// The shared memory a block gets without opting in, on every architecture: it bounds static (__shared__) memory
// outright, and dynamic shared memory beyond it must be opted in per kernel
// (CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES), up to the device's own limit. An enumerator, not a constexpr
// variable: NVRTC would emit that as a global variable in every module.
enum : int { kMaxStaticSharedBytes = 48 * 1024 };

} // namespace jb
