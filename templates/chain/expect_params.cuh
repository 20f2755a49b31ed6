// The argument block of the expectation kernels (templates/chain/expectation.cuh). Plain C++ with no device code,
// so the host (runtime/chain_expectation.cpp) includes this same file.
#pragma once

#include "core/host_device.cuh"

namespace jb {

// B chains of T positions over C states in the CRF form, p's potentials and a field f of the same layout,
// contiguous [B][T − 1][C][C] in the storage type, index order (to, from). The forward gives p's log-partition and
// E_p[F], F a path's sum of f; the messages a backward reads are [B][T][C] in the accumulator type: alpha and
// before (p's forward messages, and F's expectation over the edges before a position given its state), beta and
// after (the same from the end).
struct ExpectParams {
  const void* potentials;
  const void* field;
  const long long* lengths; // [B], each in [1, T], or null
  void* alpha;
  void* before;
  void* beta;
  void* after;
  void* log_z; // [B], the accumulator type
  void* mean;  // [B], E_p[F]
  // "_edges": the upstream gradients of log_z and mean ([B], the accumulator type; null: 0) and the gradients
  // [B][T − 1][C][C] in the storage type (null: not asked for).
  const void* grad_log_z;
  const void* grad_mean;
  void* grad_potentials;
  void* grad_field;
  long long B, T;
};

// Threads of a block of the forward and the backward messages: 32 a state up to 32 states (each state's sum split
// over as many threads), and fewer for 8-byte accumulators, whose messages and partial sums must fit 48 KiB of static
// shared memory at 1,024 states. "_edges" takes kExpectEdgeThreads, a block a step.
JB_HD constexpr int expect_threads(int states, bool wide) {
  return states >= 32 ? (wide ? 512 : 1024) : (states * 32 < 64 ? 64 : states * 32);
}
// kMaxExpectStates: the most states the expectation kernels take (a sequence's messages live in one block's shared
// memory). Enumerators, which a unit that reads neither does not warn of.
enum ExpectLimits : int { kExpectEdgeThreads = 256, kMaxExpectStates = 1024 };

} // namespace jb
