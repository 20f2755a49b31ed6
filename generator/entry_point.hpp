// One extern "C" entry point of a generated kernel, apart from the emitter (generator/emit_source.hpp frames a
// unit's entry points) so that the strategy table, whose renderings name entry points, and the emitter, which
// renders through the table, need not include each other.
#pragma once

#include <string>

namespace jitbmm {

// <kernel name><suffix>(const jb::<params> p) { <call>(p); }
struct EntryPoint {
  std::string suffix; // "" for the main entry, e.g. "_combine", "_prepare", "_repair", "_store"
  int threads = 256;  // __launch_bounds__(threads, min_blocks)
  int min_blocks = 1;
  std::string call; // the device function, e.g. "jb::tiled_kernel<...>"
  int cluster = 1;  // blocks of a cluster (__cluster_dims__), where more than one
};

} // namespace jitbmm
