// The argument block of the expectation kernels (templates/chain/expectation.cuh). Plain C++ with no device code,
// so the host (runtime/chain_expectation.cpp) includes this same file.
#pragma once

#include "core/host_device.cuh"

namespace jb {

// What the field is, a module's compile-time choice: a field f of its own (kExpectGiven: F a path's sum of f), a second
// chain q's potentials (kExpectChain: F = q's path score, and log Z_q beside), or q's potentials read as the
// difference f = p − q (kExpectDifference: F = p's score − q's, formed in the accumulator type, and log Z_q beside).
enum ExpectField : int { kExpectGiven = 0, kExpectChain = 1, kExpectDifference = 2 };

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
  // Where the field is a second chain q's potentials (kExpectChain, kExpectDifference): q's forward and backward
  // messages ([B][T][C], the accumulator type; alpha_q null: not kept) and log Z_q ([B]).
  void* alpha_q;
  void* beta_q;
  void* log_z_q;
  // "_edges": the upstream gradients of log_z, mean and log_z_q ([B], the accumulator type; null: 0) and the
  // gradients [B][T − 1][C][C] in the storage type (null: not asked for).
  const void* grad_log_z;
  const void* grad_mean;
  const void* grad_log_z_q;
  void* grad_potentials;
  void* grad_field;
  long long B, T;
  // The HMM form (the kernels' HMM instances): potentials and field are p's and the field's transitions, beside
  // their emissions and initial tables, both sets at the element strides below (emissions (b, t, c), transitions (b,
  // to, from), initial (b, c); a shared table's b stride 0). The gradients, contiguous in the storage type (null:
  // not asked for): of the emissions [B][T][C] ("_nodes"), the transitions ([C][C], or [B][C][C] where
  // batched_transitions; "_transitions", then "_reduce" for a shared table) and initial ([C] or [B][C]).
  const void* emissions;
  const void* initial;
  const void* field_emissions;
  const void* field_initial;
  long long emission_strides[3], transition_strides[3], initial_strides[2];
  int batched_transitions, batched_initial;
  void* grad_emissions;
  void* grad_transitions;
  void* grad_initial;
  void* grad_field_emissions;
  void* grad_field_transitions;
  void* grad_field_initial;
  // Scratch of the HMM form's shared tables' gradients, the accumulator type: the transitions' partial sums
  // [parts][2][C][C] (p's, then the field's), a part a range of the flattened (b, t) steps; and the gradients of
  // every sequence's first position [2][B][C], which a shared initial table sums.
  void* partials;
  void* first;
  long long parts;
  // Scratch of "_transpose" (null: not made): p's transition tables, then the field's where it has its own, each
  // [tables][from][to] contiguous in the storage type (tables: B where batched_transitions, else 1).
  void* transposed;
};

// Lanes a target state's sum is split over in the forward and backward messages (templates/chain/expectation.cuh), a
// power of two ≤ 32: about 16 sources a lane from 128 states, 8 from 64 and 4 below, so that small chains still
// spread a step over a few warps.
JB_HD constexpr int expect_lanes(int states) {
  const int per_lane = states >= 128 ? 16 : states >= 64 ? 8 : 4;
  int lanes = 1;
  while (lanes < 32 && lanes * per_lane < states) lanes *= 2;
  return lanes;
}
// Threads of a block of the forward and the backward messages: a group of lanes for every target state of the
// block (a cluster's blocks split the states), at least 64 and at most 512 (the states past them take rounds), 256
// for 8-byte accumulators, whose terms take twice the registers. "_edges" takes kExpectEdgeThreads, a block a step.
JB_HD constexpr int expect_threads(int states, bool wide, int cluster = 1) {
  const int targets = (states + cluster - 1) / cluster;
  const int all = (targets * expect_lanes(states) + 31) / 32 * 32, most = wide ? 256 : 512;
  return all < 64 ? 64 : all > most ? most : all;
}
// kMaxExpectStates: the most states the expectation kernels take (a sequence's messages live in one block's shared
// memory); kMaxExpectCluster: the most blocks a sequence's cluster takes. Enumerators, which a unit that reads
// neither does not warn of.
enum ExpectLimits : int { kExpectEdgeThreads = 256, kMaxExpectStates = 1024, kMaxExpectCluster = 8 };

// The HMM form's "_transitions": a block a tile of kExpectTileRows target states × kExpectTileSources sources of the
// table (kExpectEdgeThreads threads, kExpectEntriesPerThread sources of one row each, interleaved with the row's
// other threads', so that a warp's lanes read distinct banks) and a part of the steps, staged kExpectTileSteps at a
// time (two a warp, their loads in flight together), so that every thread sums its entries over many steps.
enum ExpectTiles : int {
  kExpectTileRows = 32,
  kExpectTileSources = 32,
  kExpectEntriesPerThread = 4,
  kExpectTileSteps = 2 * kExpectEdgeThreads / 32
};
static_assert(kExpectTileRows * kExpectTileSources == kExpectEdgeThreads * kExpectEntriesPerThread,
              "a tile's entries, kExpectEntriesPerThread a thread");
// A step's terms are formed from factors where no factor of a row exceeds e^expect_factor_bound (accumulators of
// `bytes` bytes; templates/chain/expect_hmm.cuh): a term the factors flush is then below e^(bound − 87) in 4 bytes,
// e^(bound − 708) in 8, of a step whose marginals sum to 1.
JB_HD constexpr int expect_factor_bound(int bytes) { return bytes > 4 ? 300 : 40; }
JB_HD constexpr long long expect_tiles(int states) {
  const long long side = (states + kExpectTileRows - 1) / kExpectTileRows;
  return side * side;
}
// The threads of "_reduce": the table's entries, rounded up to whole warps, then a warp an initial state.
JB_HD constexpr long long expect_reduce_items(int states) {
  return ((long long)states * states + 31) / 32 * 32 + 32LL * states;
}
// The parts a shared transition table's steps are split into: about eight blocks an SM in all, but at least
// kExpectTileSteps steps a part (a batch's worth; staged in batches of up to that many).
JB_HD constexpr long long expect_parts(int states, long long steps, int sms) {
  const long long tiles = expect_tiles(states), want = (8LL * sms + tiles - 1) / tiles,
                  most = steps / kExpectTileSteps < 1 ? 1 : steps / kExpectTileSteps;
  return want < 1 ? 1 : want > most ? most : want;
}

} // namespace jb
