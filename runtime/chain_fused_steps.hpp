// The stepped strategy's fused forms on the host (templates/chain/fused_steps.cuh for log, fused_viterbi.cuh for
// max_plus): whether they compute a problem and where the rule takes them, their module and the entries a grid of
// this GPU takes, their scratch, and a pass. runtime/chain_stepped.cpp runs them in place of its products.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "jitbmm/chain_problem.hpp"
#include "runtime/device.hpp"
#include "runtime/jit.hpp"
#include "templates/chain/params.cuh"

namespace jitbmm {

// Whether every sequence reads one transition table (the HMM form without batched transitions).
bool shared_table(const ChainProblem& p);
// Whether the fused forms compute the problem, and where the rule takes them on a GPU of `sm_count` SMs.
bool fused_steps_apply(const ChainProblem& p);
bool default_fused_steps(const ChainProblem& p, int sm_count);

class FusedSteps {
public:
  // The units a plan of `problem` loads first (for building ahead with the plan's other kernels): the resident
  // passes' where a tile's table side fits in this device's shared memory, unless `streamed`, else the streaming
  // ones; log's both directions.
  static std::vector<GeneratedKernel> units(const ChainProblem& problem, const DeviceInfo& device, bool streamed);

  // Loads the passes' units (the problem must be one fused_steps_apply accepts) and takes the resident ones where
  // every tile can have a block to itself with its table's side in shared memory, unless `streamed`; else the
  // streaming ones, as many blocks as are resident at once.
  FusedSteps(const ChainProblem& problem, const DeviceInfo& device, bool streamed);

  // A pass's scratch (the pieces templates/chain/fused_steps.cuh names), which both passes of a call may share where
  // they run one after the other: the same for either set of entries.
  static std::size_t workspace_bytes(const ChainProblem& problem);
  // One direction's pass on `stream`: `table` the direction's widened table ([k][n], k the source state; null where
  // T = 1), `scratch` workspace_bytes() of it; params' inputs and outputs as SteppedChain::forward takes them.
  // `beside`: a saving forward's pass that runs beside the other direction's (side_by_side), in the paired entries
  // where the plan took them for that.
  void pass(jb::ChainParams params, bool beta, const void* table, void* scratch, CUstream stream,
            bool beside = false) const;
  // The forward's unit's name.
  const std::string& name() const { return kernels_[0]->generated.name; }
  // Whether log's two passes may run side by side, each on a stream of its own with its own scratch: each row of
  // tiles is a cluster that waits on no other (no grid barrier), and the device holds both passes' clusters at once,
  // so that neither waits for the other's blocks to leave; where one pass's tiles take more than half the SMs, in
  // the entries compiled for two blocks an SM (jb::kFusedPairedSources states at most).
  bool side_by_side() const { return side_by_side_; }

private:
  ChainProblem problem_;
  std::shared_ptr<const LoadedKernel> kernels_[2]; // the forward's unit, and log's backward messages'
  std::shared_ptr<const LoadedKernel> paired_[2];  // their paired entries, where a saving forward's passes take them
  int block_ = jb::kFusedBlock;                    // their threads a block
  int grid_ = 0;                                   // and blocks
  unsigned shared_ = 0;                            // and dynamic shared memory a block
  int cluster_ = 0; // the resident log passes: blocks a cluster (a row of tiles each), 0 for a cooperative grid
  bool side_by_side_ = false;
};

} // namespace jitbmm
