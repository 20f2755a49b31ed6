// The argument block of the expectation semiring's product (templates/structured/entropy_product.cuh). Plain C++
// with no device code, so the host (runtime/entropy_product.cpp) includes this same file.
#pragma once

namespace jb {

// Pairs of B batches, contiguous in the storage type (f32 or f64, its own accumulator): a [2][B][M][K] (the log
// weights a0, then the values a1), b [2][B][K][N], out [2][B][M][N]. The backward reads grad_out [2][B][M][N] and
// writes grad_a and grad_b (either may be null: not asked for) in the layouts of a and b.
struct EntropyProductParams {
  const void* a;
  const void* b;
  void* out;
  const void* grad_out;
  void* grad_a;
  void* grad_b;
  long long B, M, K, N;
};

// A block's threads: kEntropyTile × kEntropyTile outputs (or inputs, for a gradient), one each.
enum EntropyProductShape : int { kEntropyTile = 16 };

} // namespace jb
