// The argument block of the sampling kernel (templates/chain/samples.cuh). Plain C++ with no device code, so the host
// (runtime/chain_samples.cpp) includes this same file.
#pragma once

namespace jb {

// n paths of each of B chains in the CRF form (potentials contiguous [B][T − 1][C][C] in the storage type, index order
// (to, from)), drawn backward from the chain's forward messages: alpha [B][T][C] and score [B] (log Z) in the
// accumulator type, as the chain plan's forward writes them. paths [B][n][T], int32.
struct SampleParams {
  const void* potentials;
  const long long* lengths; // [B], each in [1, T], or null
  const void* alpha;
  const void* score;
  int* paths;
  unsigned long long seed;
  const unsigned long long* seed_at; // where not null, the seed is read here on the device instead (a traced key's)
  long long B, T, n;
};

// Threads of a block: a warp a path.
enum SampleLimits : int { kSampleThreads = 256 };

} // namespace jb
