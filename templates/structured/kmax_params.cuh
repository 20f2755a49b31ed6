// The argument block of the k-max semiring's product (templates/structured/kmax_product.cuh). Plain C++ with no
// device code, so the host (runtime/kmax_product.cpp) includes this same file.
#pragma once

namespace jb {

// k-vectors of B batches, contiguous in the storage type (f32 or f64): a [k][B][M][K], b [k][B][K][N], out
// [k][B][M][N] and index [k][B][M][N] (int32: where each output came from, (kk·k + r1)·k + r2, or −1).
struct KMaxProductParams {
  const void* a;
  const void* b;
  void* out;
  int* index;
  long long B, M, K, N;
};

// The most values a k-vector holds; a block's threads, kKMaxTile × kKMaxTile outputs.
enum KMaxProductShape : int { kMaxKMax = 16, kKMaxTile = 16 };

} // namespace jb
