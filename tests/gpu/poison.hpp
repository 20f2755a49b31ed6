// What the GPU tests fill outputs with before a kernel writes them: a large finite value in every dtype and an int32
// that is no state and no index, so that an element a kernel leaves unwritten differs from every result it could be,
// NaN and −1 included (a NaN poison passes wherever the reference is NaN, and a path's −1 is a result).
#pragma once

#include "jitbmm/types.hpp"

namespace jitbmm::test {

inline unsigned char poison_byte(DType dtype) { return dtype == DType::f16 ? 0x7b : 0x7f; } // f16's 0x7f7f is NaN
constexpr unsigned char kIndexPoison = 0x7f;                                                  // 2139062143

} // namespace jitbmm::test
