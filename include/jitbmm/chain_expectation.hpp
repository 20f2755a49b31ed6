// A chain's distribution and the expectation of an additive score under it: what entropy, cross-entropy and KL of
// linear-chain CRFs and HMMs are (docs/distributions.md, "Entropy, cross-entropy and KL").
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "jitbmm/chain_problem.hpp"
#include "jitbmm/types.hpp"

namespace jitbmm {

// What the field of a ChainExpectation is: a field f of its own (F a path's sum of f); a second chain q's potentials
// (F q's path score, with log Z_q computed beside from the same reads); or q's potentials read as the difference
// p − q (F p's path score minus q's, formed in the accumulator type; log Z_q beside).
enum class ExpectationField { given = 0, chain = 1, difference = 2 };

// For B chains p in the CRF form (potentials r, ChainProblem's layout) and a field f on the same edges (a tensor of
// the potentials' shape): log Z_p and E_p[F], F a path's sum of f over its edges, each sequence over the paths of its
// length. With f = r (given), log Z − E_p[F] is p's entropy; with f = q's potentials (chain), log Z_q − E_p[F] is the
// cross-entropy H(p, q); with the difference, E_p[F] − log Z_p + log Z_q is KL(p ‖ q). A block (or, from 128 states
// on sm_90, a cluster of blocks) a sequence along the chain.
//
// In the HMM form (a problem of form hmm) p is given by its tables and the field by a second set of tables of the
// same shapes, laid out as p's (the problem's strides and batched_* flags): F is a path's score under the field's
// tables, its first position's initial + emissions[0] included. No potential of size B·T·C² is formed, and a length-1
// sequence is a distribution over its first state.
class ChainExpectation {
public:
  // The problem: the log semiring, the CRF form with contiguous potentials (strides all 0) or the HMM form with its
  // tables at any strides, C ≤ 1024 states; any dtype (half types computed in f32). std::invalid_argument naming the
  // field otherwise. For the device current on this thread; the kernels are compiled once a process. `field` says
  // what the field is.
  static ChainExpectation get(const ChainProblem& problem, ExpectationField field = ExpectationField::given);

  // log_z[B] (with a chain field [2][B]: log Z_p, then log Z_q) and mean[B] (E_p[F]) in chain_output_dtype,
  // asynchronous on `stream`. potentials and field contiguous
  // [B][T − 1][C][C] in the problem's dtype; lengths as the problem says (else null). A length-1 sequence gives
  // log C and 0; one of length outside [1, T] NaN and NaN; a sequence without a distribution (log Z −inf, +inf or
  // NaN) a NaN mean. An edge p gives no weight adds nothing to the mean, whatever its f (−inf and NaN included).
  // saved: what backward() reads (saved_bytes() bytes, every one written; null when no backward follows, which
  // leaves the backward sweep out): the forward sweep's messages, [2][B][T][C] in the output dtype (p's log-sums
  // and F's expectation before each position given its state; a chain field's [3][B][T][C] adds q's log-sums),
  // then the backward sweep's of the same shape (after each position), and in the HMM form with tables stored
  // [to][from] copies of p's and the field's transition tables. Where it is given both sweeps run in one launch,
  // so that sequences too few to fill the GPU take both at once.
  void operator()(const void* potentials, const void* field, const int64_t* lengths, void* log_z, void* mean,
                  void* saved = nullptr, Stream stream = nullptr) const;
  // The same in the HMM form, from p's tables and the field's (an HMM problem takes only this call, a CRF one only the
  // one above: the other is refused, naming `hmm` or `potentials`). With the field p's own tables (the same three
  // pointers) p's are read once.
  void operator()(const HmmInputs& hmm, const HmmInputs& field, const int64_t* lengths, void* log_z, void* mean,
                  void* saved = nullptr, Stream stream = nullptr) const;
  std::size_t saved_bytes() const;
  // The same bytes for a problem and field, without a plan (no GPU, no compiling); std::invalid_argument as get().
  static std::size_t saved_bytes(const ChainProblem& problem, ExpectationField field = ExpectationField::given);

  // grad_potentials = grad_log_z·μ + grad_mean·Cov_p(1_e, F) and grad_field = grad_mean·μ, [B][T − 1][C][C]
  // contiguous in the problem's dtype (either may be null: not computed), μ p's edge marginals; grad_log_z and
  // grad_mean [B] in the output dtype (either may be null: 0). With a chain field, grad_log_z is [2][B] (log Z_q's
  // second) and grad_field is q's: grad_mean·μ (chain) or −grad_mean·μ (difference, where grad_potentials gains
  // grad_mean·μ, F moving with p) plus grad_log_z_q·μ_q. Reads the forward's saved, log_z and mean. 0 past a
  // sequence's length and where both upstream gradients are 0; NaN at every edge of a sequence whose log Z (or, for
  // a nonzero grad_mean, whose mean; for a nonzero grad_log_z_q, whose log Z_q) is not finite. Takes
  // backward_workspace_bytes() of scratch (0 in the CRF form; the HMM form's partial sums of shared tables) from
  // `workspace` or jitbmm's pool.
  void backward(const void* potentials, const void* field, const int64_t* lengths, const void* saved, const void* log_z,
                const void* mean, const void* grad_log_z, const void* grad_mean, void* grad_potentials,
                void* grad_field, Stream stream = nullptr, const Workspace& workspace = {}) const;
  // The same in the HMM form: the gradients of p's tables and of the field's (HmmGradients: contiguous, any of them
  // null), the sums of the gradients of the potentials formed from them, which are never formed themselves. A shared
  // table's gradient sums its sequences': a sequence whose gradients are NaN (above) makes it NaN.
  void backward(const HmmInputs& hmm, const HmmInputs& field, const int64_t* lengths, const void* saved,
                const void* log_z, const void* mean, const void* grad_log_z, const void* grad_mean,
                const HmmGradients& grad_hmm, const HmmGradients& grad_field, Stream stream = nullptr,
                const Workspace& workspace = {}) const;
  std::size_t backward_workspace_bytes() const;

  const ChainProblem& problem() const;
  ExpectationField field() const;
  // The generated module's name (its forward's entry point; "_saving" the forward that fills `saved`, after
  // "_transpose" in the HMM form where it copies tables; "_edges" the backward's, in the HMM form "_nodes",
  // "_transitions" and "_reduce"). Empty when B = 0.
  std::string kernel_name() const;

  struct Impl;

private:
  explicit ChainExpectation(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

} // namespace jitbmm
