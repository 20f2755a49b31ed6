// The HMM form's backward as sums over the steps (the sequential kernels' backward unit, generator/chain_source.hpp:
// templates/chain/hmm_backward.cuh and hmm_edges.cuh): the state marginals, the transitions' gradient summed by
// blocks over ranges of steps and tiles of rows ("_edges"), and those ranges' sums with the initial table's gradient
// ("_reduce"). It reads the saved messages alone, whose layout and meaning every strategy's forward writes alike
// (runtime/chain_plan.cpp), so the sequential strategy runs it, and so does the stepped one where it takes less time
// than the stepped strategy's product of the saved messages (hmm_sums_apply).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "generator/emit_source.hpp"
#include "jitbmm/chain_problem.hpp"
#include "jitbmm/types.hpp"
#include "runtime/device.hpp"
#include "runtime/jit.hpp"
#include "templates/chain/params.cuh"

namespace jitbmm {

// Whether the stepped strategy's log backward of `problem` (the HMM form) on `device` takes the sums: where they were
// measured faster than its transitions' product (its operand, the product's prepare and the product over every (b,
// t)): up to 64 states, and up to 128 where a whole wave of the wide blocks fits (on GPUs with TF32 mma.sync the mma
// blocks run there instead, faster still). Beyond, each of a step's tiles of rows forms the same factors of its C
// sources, and the tiles grow with C: at 256 states the product was faster than the mma blocks too.
bool hmm_sums_apply(const ChainProblem& problem, std::shared_ptr<const DeviceInfo> device);

class HmmSums {
public:
  // The unit of `problem` (the HMM form, at most kMaxSequentialChainStates states): its text depends on the
  // semiring, the dtype and C alone.
  static GeneratedKernel unit(const ChainProblem& problem);
  // `kernel`: the unit loaded, or null where the caller was made for its sizes alone (no call is then taken).
  HmmSums(const ChainProblem& problem, std::shared_ptr<const DeviceInfo> device,
          std::shared_ptr<const LoadedKernel> kernel);

  // The scratch a backward takes: the transitions' partial sums over ranges of steps, where there are several.
  std::size_t workspace_bytes(bool transitions) const;
  // The gradients `params` asks for (grad_emissions, grad, grad_initial), from the pieces of `saved` in params.
  void run(jb::ChainParams params, Stream stream, const Workspace& workspace) const;
  // The kind of blocks the transitions' gradient takes (jb::EdgeKind: "_edges", "_edges_wide", "_edges_mma"), and
  // whether a whole wave of the wide blocks fits, whichever kind it takes.
  int kind() const;
  bool wide_whole() const;

private:
  // How the transitions' gradient is summed (split(), once per plan): `groups` tables (one per sequence when
  // batched), each over `steps` steps cut into `chunks` ranges of `chunk` steps, one block of the kind's entry, of
  // `threads`, per range and tile of rows.
  struct Split {
    int64_t groups = 1, steps = 0, chunks = 1, chunk = 1, tiles = 1;
    int threads = 32;
    int kind = 0;            // jb::EdgeKind
    bool wide_whole = false; // a whole wave of wide blocks fits (whichever kind is taken)
    bool whole = false;      // a whole wave of blocks
    std::size_t partial_bytes(const ChainProblem& p) const;
  };
  Split split() const;
  // An entry of the unit: `blocks` × `blocks_y` blocks of `threads`.
  void launch(const char* suffix, unsigned blocks, unsigned threads, jb::ChainParams& params, CUstream stream,
              unsigned blocks_y = 1) const;

  ChainProblem problem_;
  std::shared_ptr<const DeviceInfo> device_;
  std::shared_ptr<const LoadedKernel> kernel_;
  Split split_;
};

} // namespace jitbmm
