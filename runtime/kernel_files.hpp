// Kernel sources on disk for people: $JITBMM_DUMP_DIR receives every generated .cu (and its PTX);
// $JITBMM_OVERRIDE_DIR/<kernel name>.cu, when present, replaces the generated source (for kernel hacking; the file
// must define the same extern "C" entry point). Both are off unless the variable is set.
#pragma once

#include <string>

#include "generator/emit_source.hpp"

namespace jitbmm {

// The kernel with its source replaced by $JITBMM_OVERRIDE_DIR/<name>.cu when that file exists (announced on stderr
// once per kernel); otherwise unchanged.
GeneratedKernel with_override(GeneratedKernel kernel);

// Writes <name>.cu (and <name>.ptx when `ptx` is not empty) to $JITBMM_DUMP_DIR when it is set; warns once and goes
// on when it cannot. Returns whether a dump directory is set.
bool dump_kernel(const GeneratedKernel& kernel, const std::string& ptx);
bool dump_requested();

} // namespace jitbmm
