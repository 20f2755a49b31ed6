// What the HMM form's GPU tests share beside chain_arrays.hpp: its tables as the kernels read them.
#pragma once

#include "chain_arrays.hpp"
#include "host/chain_paths.hpp"

namespace jitbmm::test {

// The tables rounded to `dtype`: the values the kernels read, for the reference.
inline HmmTables rounded(DType dtype, const HmmTables& h) {
  return {rounded(dtype, h.emissions), rounded(dtype, h.transitions), rounded(dtype, h.initial)};
}

} // namespace jitbmm::test
