// The argument block of the chain kernels. Plain C++ with no device code (its functions JB_HD), so the host
// (runtime/chain_plan.cpp) includes this same file.
#pragma once

#include "core/host_device.cuh"

namespace jb {

// One linear chain per sequence b: potentials[b][t][c][p] (t < T − 1) scores the edge from state p at position t to
// state c at position t + 1. Strides are in elements.
//
// The messages are kept as a value near 0 plus an offset in double, so that long chains, whose messages grow with
// t, keep the dtype's precision in what a step adds: alpha_t[c] = offset[t] + rel[t][c], where each step's offset
// is the previous messages' maximum. The backward messages beta are kept the same way. `saved` holds both for the
// backward: rel and beta_rel [B][T][C] (accumulator type), then offset and beta_offset [B][T] and the score[B] in
// double.
//
// The HMM form reads potentials[b][t][c][p] as transitions[c][p] (potentials with s_t = 0, s_b = 0 for a shared
// table) plus emissions[b][t + 1][c], with initial[p] + emissions[b][0][p] as the first messages. Its backward
// writes grad_emissions [B][T][C], grad (the transitions' gradient: [B][C][C] with batched_transitions, else
// [C][C]) and grad_initial ([B][C] with batched_initial, else [C]), all contiguous; the transitions' partial sums
// go through `partials` ([groups][chunks][C][C] in the accumulator type) when one block does not see every step.
// The most parts a stepped log step sums its sources in (ChainParams::parts): the position's kernel keeps a
// state's parts in registers. An enumerator, as a constant of every chain unit that most of them do not read: NVRTC
// warns of an unused constexpr variable.
enum StepParts : int { kMaxStepParts = 8 };

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
  const void* emissions;    // hmm: [B][T][C] by e_b, e_t, e_c
  const void* initial;      // hmm: [C] or [B][C] by i_b, i_c
  void* grad_emissions;     // hmm backward: [B][T][C], or null
  void* grad_initial;       // hmm backward: [C] or [B][C], or null
  void* partials;           // hmm backward: [groups][chunks][C][C], with chunks > 1
  long long B, T;
  long long s_b, s_t, s_c, s_p;
  long long e_b, e_t, e_c, i_b, i_c;
  // hmm backward: the transitions' gradient is summed over `groups` groups of `steps` steps (groups = B and steps =
  // T − 1 with batched_transitions, else 1 and B·(T − 1)), each cut into `chunks` ranges of `chunk` steps.
  long long chunk, chunks;
  int batched_transitions, batched_initial;
  // The stepped strategy (templates/chain/steps.cuh), whose one module serves every C: position `t` of every
  // sequence at once, forward (beta = 0) or backward (beta = 1). The product that reached it, prod [parts][B][C] (⊕
  // over the sources of msg ⊗ the step; log may sum the sources in `parts` ranges, each a batch of the product, whose
  // results the position adds), becomes the position's relative messages in msg [B][C] (rows msg_row apart: 2C
  // where the two passes' messages of a sequence lie side by side, their steps one product), the next product's
  // operand, with the offsets so far in running [B]; max_plus's winning sources of each position are argmax
  // [T][B][C]. The log backward forms the transitions' gradient's left operand in `operand` ([B][T][C]) for the
  // grad_score's of one sign, and reads the products of it, `products` ([2][slices][groups][C][C]). `signs` [2]
  // holds each of the two operands' sign (+1, −1, or 0: no operand, its product not run), as "_signs" reads them
  // off grad_score; `edge` picks the operand a launch forms. `widened`: a table copied into the accumulator type.
  long long states, t, slices, parts; // parts ≤ kMaxStepParts
  long long msg_row;
  void* msg;
  const void* prod;
  double* running;
  int* argmax;
  void* operand;
  const void* products;
  int* signs;
  int beta, edge;
  // The stepped strategy's fused forms (templates/chain/fused_tiles.cuh), one direction's pass in one launch: its
  // widened table [k][n], its column maxima col_max [C] and (log) the factors made of it [k][n]; scratch: msg as two
  // buffers, the tiles' row maxima [2][B][tiles], the last position's parts of the score row_sums [B][tiles] (and
  // max_plus's states row_args [B][tiles]), its largest message `ends` [B] and offset `end_offsets` [B], the running
  // `offsets` [2][B], and the grid barrier's two words (at 0 and 32 of 64 words). max_plus writes argmax as above.
  const void* table;
  void* factors;
  void* col_max;
  void* row_maxima;
  void* row_sums;
  int* row_args;
  void* ends;
  double* end_offsets;
  double* offsets;
  unsigned* barrier;
  // The resident log pass launched with each row of tiles as one cluster (sm_90 on): its blocks meet at the
  // cluster's barrier, and each cluster adds its own sequences' scores (no barrier of the whole grid).
  int cluster_rows;
};

// The HMM backward's element-wise kernels give a warp of kHmmLanes lanes to each row (b, t) of [B][T][C] ("_nodes",
// the stepped strategy's "_operand"): a row's sequence, offsets and index arithmetic are worked out once, and its
// states are read and written a warp-wide line at a time. "_reduce" (templates/chain/hmm_backward.cuh), in blocks of
// kHmmReduceThreads, adds the transitions' partial sums, then the initial table's gradient over the sequences: a
// block to each kHmmLanes consecutive entries, its warps sharing those entries' sums (one thread summing hundreds of
// items in turn would leave the GPU idle for its whole loop, and a warp an entry would read a word of a line an
// item), except for partial sums of fewer than kHmmLineChunks chunks, a thread an entry.
enum HmmLanes : int { kHmmLanes = 32, kHmmReduceThreads = 512, kHmmLineChunks = 32 };
// Where a warp takes a row, its lanes take its states in rounds of kHmmRowRound each: every value of a round is read
// before any is written (a state past the last reads the last and writes nothing), so that the row's loads wait for
// memory once a round, beside its sequence's and position's own, rather than once per 32 states.
enum HmmRowRound : int { kHmmRowRound = 4 };
JB_HD constexpr long long hmm_row_threads(long long rows) { return kHmmLanes * rows; }
// The sequential kernels' state marginals ("_nodes" of C states, 1 to kHmmGroupedStates) take a group of
// consecutive positions of one sequence a warp: hmm_node_lanes(C) lanes a position (a power of two: a row of fewer
// than 32 states shares the warp with others), hmm_node_rows(C) positions a lane, every value of the group read
// before any is written. So a warp works out its sequence once for several positions and keeps several lines of each
// array in flight, where a warp a row would spend more instructions on finding its sequence and position than on its
// few states. At most four positions a lane below 33 states (eight held more registers than they saved latency) and
// eight values a lane above.
enum HmmNodes : int { kHmmGroupedStates = 128 };
JB_HD constexpr int hmm_node_lanes(int states) {
  return states > 16 ? 32 : states > 8 ? 16 : states > 4 ? 8 : states > 2 ? 4 : states > 1 ? 2 : 1;
}
JB_HD constexpr int hmm_node_values(int states) { // a lane's states of a position
  return (states + hmm_node_lanes(states) - 1) / hmm_node_lanes(states);
}
JB_HD constexpr int hmm_node_rows(int states) {
  const int lanes = hmm_node_lanes(states);
  return states > 32 ? 8 / hmm_node_values(states) : lanes >= 16 ? 4 : lanes == 8 ? 2 : 1;
}
JB_HD constexpr int hmm_node_group(int states) { return 32 / hmm_node_lanes(states) * hmm_node_rows(states); }
// The threads "_nodes" takes: a warp a group, or a row (hmm_row_threads) where C is not in [1, kHmmGroupedStates].
JB_HD constexpr long long hmm_node_threads(long long B, long long T, int states) {
  return states < 1 || states > kHmmGroupedStates
             ? hmm_row_threads(B * T)
             : kHmmLanes * B * ((T + hmm_node_group(states) - 1) / hmm_node_group(states));
}
JB_HD constexpr long long hmm_line_threads(long long entries) {
  return (entries + kHmmLanes - 1) / kHmmLanes * kHmmReduceThreads;
}
// The threads "_reduce" takes for `transitions` entries of partial sums over `chunks` chunks and `initial` entries:
// the lines of both apart, or the transitions' threads an entry beside the initial table's lines.
JB_HD constexpr long long hmm_reduce_threads(long long transitions, long long chunks, long long initial) {
  const long long lines = hmm_line_threads(initial);
  if (chunks >= kHmmLineChunks) return hmm_line_threads(transitions) + lines;
  return transitions > lines ? transitions : lines;
}

// Viterbi's back-pointers a sequential forward stages in shared memory at a time to walk its best path
// (templates/chain/chain_outputs.cuh): whole steps of C states, about 4096; and their bytes (16-bit each).
JB_HD constexpr int chain_path_rows(int states) { return (4096 + states - 1) / states; }
JB_HD constexpr unsigned chain_path_bytes(int states) { return 2u * unsigned(chain_path_rows(states) * states); }

// Whether a sequential loop that holds its steps' potentials in registers (templates/chain/sequential.cuh) loads them
// two steps ahead, three steps' in registers, and asks L2 for them further ahead: the CRF form's log in one block per
// sequence of 64 to 128 states, where a step's reads on one SM wait for memory (measured on an H100: at 32 states
// and in clusters it was slower, and Viterbi's forward did not gain). Elsewhere a step ahead, two steps' in
// registers.
JB_HD constexpr bool chain_loads_deep(bool log, bool hmm, int states, int cluster) {
  return log && !hmm && cluster == 1 && states >= 64 && states <= 128;
}

// A staged loop's slab (templates/chain/step_terms.cuh): a step's terms of the block's `targets` target states from
// all `states` sources, copied by the whole block a step ahead into shared memory, [source][target] with a row's
// pitch in elements such that the `lanes` lanes of a group (one target, sources lane, lane + lanes, …) and the warp's
// other groups (the next targets) read 32 different banks: the pitch is 32 / lanes modulo 32. Two steps' slabs, one
// filled while the other is read; their bytes in the accumulator type.
JB_HD constexpr int chain_slab_pitch(int targets, int lanes) {
  return targets + ((32 / lanes - targets) % 32 + 32) % 32;
}
JB_HD constexpr unsigned chain_slab_bytes(int states, int targets, int lanes, int acc_bytes) {
  return 2u * unsigned(states) * unsigned(chain_slab_pitch(targets, lanes)) * unsigned(acc_bytes);
}

// The fused steps' tiles: a block computes kFusedRows sequences × kFusedCols states of a position, kFusedK sources at
// a time, in kFusedSplit groups of kFusedThreads threads that sum alternate chunks of the sources. Enumerators, not
// constexpr variables: NVRTC would emit those as globals in every chain module.
enum FusedTiles : int {
  kFusedRows = 32,
  kFusedCols = 64,
  kFusedK = 32,
  kFusedThreads = 128,
  kFusedSplit = 2,
  kFusedBlock = kFusedThreads * kFusedSplit,
  kFusedResidentSplit = 4, // the resident form's groups at most (below)
  // The most sources a resident block's product takes (more than 227 KiB of shared memory holds): its log pass reads
  // a row's previous messages into registers, sixteen threads a row and at most nine fours a thread
  // (templates/chain/fused_resident.cuh).
  kFusedResidentSources = 576,
  // The most sources of the resident log entries compiled for two blocks an SM (64 registers a thread), which read a
  // row's messages in at most two fours a thread: a block's shared memory is then at most 80 KiB, so that two blocks
  // share an SM and both passes of a saving forward can be resident at once where one pass's tiles take more than
  // half the SMs.
  kFusedPairedSources = 128
};

// The resident form of the fused steps (templates/chain/fused_tiles.cuh), for a block that owns one tile for a whole
// pass: its dynamic shared memory holds the table's side of the tile,
// [sources][kFusedCols], then all of a position's messages of its rows, [kFusedRows][sources + 4], where sources is
// the states rounded up to kFusedK; once a product is formed, the groups' results meet where the messages were (two
// words an output from each other group at least).
// The groups of a fused pass's block: the resident entries' kFusedResidentSplit for log; max_plus's two, whose
// winners and their sources would not fit in the 128 registers a thread of four groups has; the streaming entries'
// kFusedSplit.
JB_HD constexpr int fused_groups(bool log, bool resident) { return log && resident ? kFusedResidentSplit : kFusedSplit; }
JB_HD constexpr int fused_resident_threads(bool log) { return kFusedThreads * fused_groups(log, true); }
JB_HD long long fused_sources(long long states) { return (states + kFusedK - 1) / kFusedK * kFusedK; }
// Whether resident log passes of `states` states have entries compiled for two blocks an SM (which a saving forward
// takes to run its passes side by side: runtime/chain_fused_steps.cpp).
JB_HD bool fused_paired(long long states) { return fused_sources(states) <= kFusedPairedSources; }
JB_HD long long fused_resident_floats(long long states) {
  const long long messages = kFusedRows * (fused_sources(states) + 4),
                  meet = 2 * (kFusedResidentSplit - 1) * kFusedRows * kFusedCols;
  return fused_sources(states) * kFusedCols + (messages > meet ? messages : meet);
}

} // namespace jb
