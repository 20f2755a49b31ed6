// The argument block of the sampling kernel (templates/chain/samples.cuh). Plain C++ with no device code, so the host
// (runtime/chain_samples.cpp) includes this same file.
#pragma once

namespace jb {

// n paths of each of B chains, drawn backward from the chain's forward messages: alpha [B][T][C] and score [B] (log Z)
// in the accumulator type, as the chain plan's forward writes them, and each step's rows of scores, the (to, from)
// element of step t of sequence b at rows + b·row_strides[0] + t·row_strides[1] + to·row_strides[2] +
// from·row_strides[3] in the storage type: in the CRF form the potentials, contiguous [B][T − 1][C][C]; in the HMM
// form the transitions, the same at every step (its stride 0), whose step also adds the emission of the state it
// goes to, which is the same for every state it comes from and so changes no draw. paths [B][n][T], int32.
struct SampleParams {
  const void* rows;
  long long row_strides[4];
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
