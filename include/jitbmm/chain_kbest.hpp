// The k best paths of a chain, in order (docs/distributions.md, "The k best paths").
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "jitbmm/chain_problem.hpp"
#include "jitbmm/types.hpp"

namespace jitbmm {

// For B chains in the CRF or the HMM form, the k best paths of each and their scores: Viterbi that keeps the k best
// paths ending in every state, in the order reference::chain_kbest defines (the larger score first, NaN before every
// number; ties by the states read from the last position back, smaller first, so the first is Viterbi's path). One
// block a sequence along the chain.
class ChainKBest {
public:
  // The max_plus semiring, the CRF form with contiguous potentials (strides all 0) or the HMM form (its tables at
  // the problem's strides), any dtype and C ≤ kMaxKBestStates;
  // 1 ≤ k ≤ kMaxKBest, and two positions' lists of k scores a state within the device's shared memory a block
  // (k·C·16 bytes for f64, k·C·8 otherwise). std::invalid_argument naming the field otherwise. For the device current
  // on this thread; the kernel is compiled once a process.
  static constexpr int kMaxKBest = 16, kMaxKBestStates = 1024;
  static ChainKBest get(const ChainProblem& problem, int k);

  // scores[B][k] in chain_output_dtype and paths[B][k][T] (int32; may be null), asynchronous on `stream`:
  // potentials contiguous [B][T − 1][C][C] in the problem's dtype, lengths as the problem says (else null). A
  // sequence with fewer than k paths of score other than −inf gives −inf and a path of −1 for the rest; −1 past
  // its length; NaN and −1 throughout for a length outside [1, T]. The gradient of score i with respect to the
  // potentials is path i's edge indicator. Takes workspace_bytes() of scratch (the back-pointers, 4·B·(T − 1)·C·k
  // bytes) from `workspace` or jitbmm's pool.
  void operator()(const void* potentials, const int64_t* lengths, void* scores, int32_t* paths,
                  Stream stream = nullptr, const Workspace& workspace = {}) const;
  // The same in the HMM form, from its tables (the best paths of the HMM form's Viterbi, chain.hpp; an HMM problem's
  // plan takes only this call, a CRF one's only the one above: the other is refused, naming `hmm` or `potentials`).
  // The gradients of score i are path i's states (emissions and initial) and moves (transitions).
  void operator()(const HmmInputs& hmm, const int64_t* lengths, void* scores, int32_t* paths, Stream stream = nullptr,
                  const Workspace& workspace = {}) const;
  std::size_t workspace_bytes() const;

  const ChainProblem& problem() const;
  int k() const;
  // The generated module's name. Empty when B = 0.
  std::string kernel_name() const;

  struct Impl;

private:
  explicit ChainKBest(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

} // namespace jitbmm
