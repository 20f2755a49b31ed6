// The sequential strategy (docs/chains-design.md): the chain units' kernels (generator/chain_source.hpp), a block or
// a cluster per sequence along its whole chain for the forward, a block per step for the CRF form's backward, and for
// the HMM form's the sums over the steps (runtime/hmm_sums.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "generator/chain_source.hpp"
#include "jitbmm/chain.hpp"
#include "runtime/chain_strategy.hpp"
#include "runtime/device.hpp"
#include "runtime/hmm_sums.hpp"
#include "runtime/jit.hpp"

namespace jitbmm {

class SequentialChain final : public ChainStrategy {
public:
  // Compiles the units of `spec`, all at once (nothing where B = 0: no call launches anything then), as `build` says
  // (runtime/chain_strategy.hpp).
  SequentialChain(const ChainProblem& problem, const ChainSpec& spec, std::shared_ptr<const DeviceInfo> device,
                  StrategyBuild build = StrategyBuild::kernels);

  const char* name() const override { return "sequential"; }
  void forward(jb::ChainParams params, void* saved, Stream stream, const Workspace& workspace) const override;
  void backward(jb::ChainParams params, const void* saved, Stream stream, const Workspace& workspace) const override;
  // max_plus with a path keeps a back-pointer per (b, t, c); the HMM backward the transitions' partial sums.
  std::size_t workspace_bytes(bool with_saved, bool with_path) const override;
  std::size_t backward_workspace_bytes(bool transitions) const override;
  std::string kernel_name() const override;

private:
  // One of a unit's entries, `blocks` blocks of `threads`.
  void launch(const LoadedKernel& unit, const char* suffix, unsigned blocks, unsigned threads, jb::ChainParams params,
              CUstream stream, unsigned dynamic_shared = 0) const;

  ChainProblem problem_;
  ChainSpec spec_;
  std::shared_ptr<const DeviceInfo> device_;
  // The units (generator/chain_source.hpp); null when B = 0, and the saving forward for max_plus.
  std::shared_ptr<const LoadedKernel> forward_, saving_, backward_;
  std::unique_ptr<const HmmSums> sums_; // the HMM form's backward, in the backward unit (its kernel null: sizes)
};

} // namespace jitbmm
