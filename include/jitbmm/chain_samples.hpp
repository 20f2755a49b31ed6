// Exact samples of a chain's paths from its distribution (docs/distributions.md, "Samples").
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "jitbmm/chain_problem.hpp"
#include "jitbmm/types.hpp"

namespace jitbmm {

// n paths of each of B chains in the CRF or the HMM form, drawn from p(z) = exp(score(z) − log Z): the chain plan's
// forward (ChainPlan, whatever its strategy) gives the forward messages, and each path is drawn from the last position
// back, a state at a time given the next (forward filtering, backward sampling), a warp a path.
class ChainSampler {
public:
  // The log semiring, the CRF form with contiguous potentials (strides all 0) or the HMM form (its tables at the
  // problem's strides), any dtype and C ≤ kMaxChainStates (std::invalid_argument naming the field otherwise). For
  // the device current on this thread.
  static ChainSampler get(const ChainProblem& problem);

  // paths[B][n][T] (int32, device memory): each path's states; −1 past a sequence's length, and throughout for a
  // sequence of a length outside [1, T] or without a distribution (log Z −inf, +inf or NaN). A path of probability 0
  // is never drawn. Sequence b's paths depend on the seed, b and its own potentials alone: the same seed draws the
  // same paths. n ≥ 0. Asynchronous on `stream`; takes workspace_bytes() of scratch from `workspace` or jitbmm's pool.
  void operator()(const void* potentials, const int64_t* lengths, int64_t n, uint64_t seed, int32_t* paths,
                  Stream stream = nullptr, const Workspace& workspace = {}) const;
  // The same in the HMM form, from its tables (an HMM problem's plan takes only this call, a CRF one's only the one
  // above: the other is refused, naming `hmm` or `potentials`).
  void operator()(const HmmInputs& hmm, const int64_t* lengths, int64_t n, uint64_t seed, int32_t* paths,
                  Stream stream = nullptr, const Workspace& workspace = {}) const;
  // The same with the seed read on the device from `seed_on_device` (8 bytes of device memory, written by work before
  // this call on `stream`: a key a traced program draws), so that it never comes to the host. The same seed there
  // draws the same paths as operator() given it.
  void with_device_seed(const void* potentials, const int64_t* lengths, int64_t n, const uint64_t* seed_on_device,
                        int32_t* paths, Stream stream = nullptr, const Workspace& workspace = {}) const;
  void with_device_seed(const HmmInputs& hmm, const int64_t* lengths, int64_t n, const uint64_t* seed_on_device,
                        int32_t* paths, Stream stream = nullptr, const Workspace& workspace = {}) const;
  std::size_t workspace_bytes() const;

  const ChainProblem& problem() const;
  // The sampling module's name (its forward is the chain plan's: ChainPlan::kernel_name). Empty when B = 0.
  std::string kernel_name() const;

  struct Impl;

private:
  void check_device_seed(const uint64_t* seed_on_device, int64_t n) const;
  void draw(const void* potentials, const HmmInputs* hmm, const int64_t* lengths, int64_t n, uint64_t seed,
            const uint64_t* seed_on_device, int32_t* paths, Stream stream, const Workspace& workspace) const;
  explicit ChainSampler(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

} // namespace jitbmm
