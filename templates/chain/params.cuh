// The argument block of the chain kernels. Plain C++ with no device code, so the host (runtime/chain_plan.cpp)
// includes this same file.
#pragma once

namespace jb {

// One linear chain per sequence b: potentials[b][t][c][p] (t < T − 1) scores the edge from state p at position t to
// state c at position t + 1. Strides are in elements.
//
// The messages are kept as a value near 0 plus an offset in double, so that long chains, whose messages grow with
// t, keep the dtype's precision in what a step adds: alpha_t[c] = offset[t] + rel[t][c], where each step's offset
// is the previous messages' maximum. The backward messages beta are kept the same way. `saved` holds both for the
// backward: rel and beta_rel [B][T][C] (accumulator type), then offset and beta_offset [B][T] and the score[B] in
// double.
struct ChainParams {
  const void* potentials;   // storage dtype, laid out by the strides below
  const long long* lengths; // [B], each in [1, T], or null: every sequence has T positions
  void* score;              // [B]
  void* rel;                // saved: [B][T][C], or null (with offset and logz)
  double* offset;           // saved: [B][T]
  double* logz;             // saved: [B]
  void* beta_rel;           // saved: [B][T][C], the backward messages (with rel)
  double* beta_offset;      // saved: [B][T]
  void* alpha;              // [B][T][C] contiguous, or null: the forward messages
  int* path;                // [B][T] contiguous, or null: the best path (max_plus)
  unsigned short* back;     // [B][T][C] contiguous: the back-pointers the best path is read from (with path)
  const void* grad_score;   // [B]: the backward's dL/dscore
  void* grad;               // [B][T − 1][C][C] contiguous: the backward's dL/dpotentials
  long long B, T;
  long long s_b, s_t, s_c, s_p;
};

} // namespace jb
