// Chain kernels: a ChainSpec (what decides the text of a chain module) → CUDA source from templates/chain/.
#pragma once

#include <string>
#include <vector>

#include "generator/emit_source.hpp"
#include "jitbmm/chain_problem.hpp"
#include "templates/chain/edge_params.cuh"

namespace jitbmm {

// One sequence's recursion along the chain (templates/chain/sequential.cuh: chain_forward): `threads` per block,
// `lanes` per target state (a power of two ≤ 32), and `cluster` blocks (a power of two ≤ 8; more than one needs
// sm_90) that split the target states. `blocks`: the blocks an SM its kernel is compiled for (__launch_bounds__),
// which bounds its registers; the loop's code (its step in registers or not) is what one block an SM allows, so
// more than one may spill.
struct ChainLoop {
  int threads = 32;
  int lanes = 1;
  int cluster = 1;
  int blocks = 1;
  bool operator==(const ChainLoop& o) const {
    return threads == o.threads && lanes == o.lanes && cluster == o.cluster && blocks == o.blocks;
  }
};
constexpr int kMaxChainCluster = 8;

// A spec's kernels (templates/chain/), in units compiled apart (at once, where a plan builds them): the forward (a
// block or a cluster per sequence), log's saving forward (the forward that saves its messages for a backward, with a
// second block or cluster per sequence computing its backward messages), and the backward: for the CRF form a block
// per step (the edge marginals for log, the best path's indicator for max_plus), for the HMM form the emissions'
// gradient (the main entry), "_edges" (the transitions' gradient, or its partial sums over ranges of steps) and
// "_reduce" (those sums, and the initial table's gradient). Each unit's text depends on the spec's fields its
// name says, so specs that differ elsewhere share it.
struct ChainSpec {
  Semiring semiring = Semiring::log;
  DType dtype = DType::f32;
  ChainForm form = ChainForm::crf;
  int C = 1;                 // states: the messages' size and every loop's bound are compile-time
  ChainLoop forward;         // the forward's block
  ChainLoop saving;          // log: "_saving"'s forward-message blocks; its block and cluster are saving's
  int beta_lanes = 1;        // log: "_saving"'s backward-message blocks' lanes per state
  int backward_threads = 32; // the backward's block (a multiple of 32, at most 1024)
  // The most shared memory a block may take on the device the kernels are made for (its opt-in limit, bytes), which
  // bounds the ring's stages; 0: sm_90's (227 KiB). The device's, not the decision's: no part of the spec's text.
  int shared_limit = 0;

  bool operator==(const ChainSpec& o) const;
  // A loop's potentials sit in registers, a whole step loaded a step ahead, when they are few enough; otherwise
  // they come round by round through a ring of stages(loop) slots of shared memory (0: none, where two slots do
  // not fit, and for half types, which cp.async cannot copy: a round then loads its own terms).
  // dynamic_bytes(loop): the loop's dynamic shared memory, the ring's and, for the HMM form without prefetch, two
  // steps' emissions; with the kernel's own (static) shared memory within shared_limit.
  bool prefetch(const ChainLoop& loop) const;
  // Whether every loop's registers fit its block, its step held in registers (prefetch) or read through the ring
  // (what the rule makes sure of before it splits a sequence over a cluster).
  bool registers_fit() const;
  // What a tuned decision may choose: one block per sequence always; clusters where every loop's registers fit.
  bool clusters_fit() const { return (forward.cluster == 1 && saving.cluster == 1) || registers_fit(); }
  int stages(const ChainLoop& loop) const;
  unsigned dynamic_bytes(const ChainLoop& loop) const;
  // log's saving forward: whether its backward messages' blocks stage each step's potentials through shared memory
  // (the CRF form's, whose rows they read along the targets), and the launch's dynamic shared memory.
  bool beta_staged() const;
  unsigned saving_dynamic_bytes() const;
  ChainLoop beta() const { return {saving.threads, beta_lanes, saving.cluster}; }
  // The HMM form's "_edges" block of a kind (jb::EdgeKind: "_edges", "_edges_wide", "_edges_mma"): rows of the
  // transitions' table per block, and its threads; whether the unit has the wide block (log, an f32 accumulator, 64
  // to 256 states in multiples of 32) and the mma block (log, an f32 accumulator, 128 to 256 states in multiples of
  // 32); the entry's name.
  int edge_rows(int kind = jb::kEdgeNarrow) const;
  int edge_threads(int kind = jb::kEdgeNarrow) const;
  bool wide_edges() const;
  bool mma_edges() const;
  static const char* edge_entry(int kind);
};
// The threads of the HMM form's "_nodes" and "_reduce" blocks.
constexpr int kHmmNodeThreads = 256;

// The spec for a problem: about eight terms per lane and target state, as many threads as a step has work for.
// `cluster_sms`: the multiprocessors a device lends to clusters of blocks (its count from sm_90 on, else 0): where
// one block per sequence would leave most of them idle, the CRF form's blocks split each step's target states
// over a cluster.
ChainSpec default_chain_spec(const ChainProblem& problem, int cluster_sms = 0);
// The same rule with both forwards split over clusters of `cluster` blocks (a power of two ≤ kMaxChainCluster), or
// the forward over `forward_cluster` and the saving forward over `saving_cluster` (what a tuned decision names).
ChainSpec clustered_chain_spec(const ChainProblem& problem, int cluster);
ChainSpec clustered_chain_spec(const ChainProblem& problem, int forward_cluster, int saving_cluster);
// `spec` with the saving forward compiled for the blocks an SM the rule gives a batch of B sequences on a device
// lending `cluster_sms` SMs (0: none known, one block): two for the HMM form's log f32 loop of 64 terms a lane (its
// block takes more than half an SM's registers) where its launch, two blocks a sequence, outnumbers the SMs, so
// that a sequence's two recursions run at once rather than in turns. default_chain_spec applies it; so does a plan
// taking a stored decision, and `jitbmm tune --chain` for what it times.
ChainSpec with_rule_saving_blocks(ChainSpec spec, int64_t B, int cluster_sms);
// clustered_chain_spec with the forward's groups of `lanes` lanes (a power of two ≤ 32) in place of the rule's, and
// as many threads as the rule gives such groups (max_plus's forward with the path is that loop too): what `jitbmm
// tune --chain` times beside the rule's lanes, and a decision may name.
ChainSpec chain_spec_with_forward_lanes(const ChainProblem& problem, int forward_cluster, int saving_cluster,
                                        int lanes);
// The backward messages' lanes for spec.saving's block: four, or as many as leave every group a state, more where
// their registers would spill (their potentials are read transposed: fewer lanes read more of each row at once).
int default_beta_lanes(const ChainSpec& spec);
// Throws std::invalid_argument naming the field when the spec cannot compute the problem or describes no kernel.
void check_chain_spec(const ChainSpec& spec, const ChainProblem& problem);
// "semiring=log dtype=f32 C=64 forward=512x8 saving=512x8 beta_lanes=8 backward_threads=256" (a loop split over a
// cluster: "512x8x4"), printed into the source.
std::string to_string(const ChainSpec& spec);

// Each unit's main entry is its kernel; the forward unit's name is a plan's kernel_name().
enum class ChainUnit { forward, saving, backward };
// std::invalid_argument for max_plus's saving unit (its forward with the path is the forward).
GeneratedKernel emit_chain_kernel(const ChainSpec& spec, ChainUnit unit = ChainUnit::forward);
// The units a spec's plan loads: the forward, log's saving forward, the backward.
std::vector<GeneratedKernel> emit_chain_units(const ChainSpec& spec);

// The chunked strategy's module for chains of a semiring (log or max_plus) and C states whose inputs are `dtype`
// (templates/chain/chunks.cuh): the main entry copies the steps into chunks (chunk_pad), then "_normalize" and
// "_offsets"; log's "_restore", "_score" and "_unpad", and for the HMM form's tables "_hmm_nodes", "_hmm_edges",
// "_hmm_sums" and "_hmm_cast" (templates/chain/chunk_hmm.cuh); max_plus's "_chain", "_rerun", "_compose" and
// "_expand" (templates/chain/chunk_viterbi.cuh). Blocks of kChunkThreads.
constexpr int kChunkThreads = 256;
// The longest chunk the chunked strategy takes: 2^20 steps.
constexpr int64_t kMaxChainChunk = int64_t(1) << 20;
GeneratedKernel emit_chunk_kernel(Semiring semiring, DType dtype, int C);

} // namespace jitbmm
