// A sequence's length as the chain kernels read it, and what a bad one means.
#pragma once

namespace jb {

// Sequence b's length, from an argument block with `lengths` and `T` (ChainParams, ChunkParams); a length outside
// [1, T] (the host cannot check device memory without waiting) is `bad`: the sequence's score and gradients are NaN,
// its path −1.
template <class Params> __device__ __forceinline__ long long chain_length(const Params& p, long long b, bool& bad) {
  const long long n = p.lengths ? p.lengths[b] : p.T;
  bad = n < 1 || n > p.T;
  return bad ? 1 : n;
}

} // namespace jb
