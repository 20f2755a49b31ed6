// How much memory the host can still give this process, for sizing work the library does on its own account
// (the tuner's trial buffers) before anything is drawn.
#pragma once

#include <cstddef>
#include <optional>

namespace jitbmm {

// The host's available memory now: MemAvailable of /proc/meminfo (what can be allocated without swapping), lowered to
// the room left under a cgroup memory limit when the process runs under one; nothing when neither can be read.
std::optional<std::size_t> host_available_bytes();

} // namespace jitbmm
