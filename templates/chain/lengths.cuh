// A sequence's length as the chain kernels read it, and what a bad one means.
#pragma once

namespace jb {

// Sequence b's length, from an argument block with `lengths` and `T` (ChainParams, ChunkParams); a length outside
// [1, T] (the host cannot check device memory without waiting) is `bad`: the sequence's score and gradients are NaN,
// its path −1.
__device__ __forceinline__ long long chain_length_of(long long n, long long T, bool& bad) { // n: lengths[b], or T
  bad = n < 1 || n > T;
  return bad ? 1 : n;
}
template <class Params> __device__ __forceinline__ long long chain_length(const Params& p, long long b, bool& bad) {
  return chain_length_of(p.lengths ? p.lengths[b] : p.T, p.T, bad);
}

} // namespace jb
