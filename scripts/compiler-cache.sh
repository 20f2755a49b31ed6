# Sourced by the scripts that compile jitbmm (scripts/build, scripts/check-wheel, scripts/sanitize-host): compiler
# outputs go through ccache (scripts/deps installs it), keyed by the preprocessed source and the flags, so what a
# second build of the same objects compiles (the wheel's, a rebuild, a later CI run on the same machine) comes from
# the first. CCACHE_BASEDIR keys by paths relative to the clone, so every build directory directly inside it, and
# every clone, shares the entries. A launcher the caller chose is kept.
if command -v ccache >/dev/null 2>&1 && [ -z "${CMAKE_CXX_COMPILER_LAUNCHER:-}" ]; then
  export CMAKE_CXX_COMPILER_LAUNCHER=ccache CMAKE_C_COMPILER_LAUNCHER=ccache
  export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}" CCACHE_NOHASHDIR=1
  # The compiler's name is part of the hash: one name for every build (CMake versions pick c++ or g++ first).
  export CXX="${CXX:-c++}" CC="${CC:-cc}"
fi
