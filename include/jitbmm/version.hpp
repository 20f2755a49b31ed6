#pragma once

namespace jitbmm {

// Part of every generated source (and so of every cache key): a new release never reuses an old binary.
constexpr const char* kVersion = "0.2.0";

} // namespace jitbmm
