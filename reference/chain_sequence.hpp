// One sequence's messages on the CPU (reference/chain.cpp and chain_divergence_grads.cpp): what the chain
// references compute each sequence's results from.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "jitbmm/chain_problem.hpp"
#include "jitbmm/reference.hpp"
#include "reference/log_sum_exp.hpp"

namespace jitbmm::reference {

// One sequence's messages. alpha[t][c] = ⊕ over paths ending in state c at t; beta[t][p] = ⊕ over continuations
// from state p at t to the sequence's end; back[t][c] (max_plus) = the best state at t − 1 on the way to c at t.
template <class Real> class Sequence {
public:
  Sequence(const ChainProblem& p, const void* potentials, const int64_t* lengths, int64_t b)
      : p_(p), potentials_(potentials), b_(b), C_(p.C), L_(lengths ? lengths[b] : p.T) {
    chain_strides(p, strides_);
    const bool viterbi = p.semiring == Semiring::max_plus;
    alpha_.assign(static_cast<std::size_t>(L_ * C_), 0);
    if (viterbi) back_.assign(alpha_.size(), -1);
    std::vector<Real> terms(static_cast<std::size_t>(C_));
    for (int64_t t = 0; t + 1 < L_; ++t)
      for (int64_t c = 0; c < C_; ++c) {
        for (int64_t q = 0; q < C_; ++q) terms[q] = alpha(t, q) + potential(t, c, q);
        const int64_t i = (t + 1) * C_ + c;
        if (viterbi) {
          back_[i] = first_max(terms);
          alpha_[i] = terms[back_[i]];
        } else {
          alpha_[i] = log_sum_exp(terms);
        }
      }
    std::copy(alpha_.end() - C_, alpha_.end(), terms.begin());
    last_ = viterbi ? first_max(terms) : -1;
    score_ = viterbi ? terms[last_] : log_sum_exp(terms);
  }

  int64_t length() const { return L_; }
  Real score() const { return score_; }
  Real alpha(int64_t t, int64_t c) const { return alpha_[t * C_ + c]; }
  Real potential(int64_t t, int64_t c, int64_t q) const {
    return load_element(p_.dtype, potentials_, b_ * strides_[0] + t * strides_[1] + c * strides_[2] + q * strides_[3]);
  }

  // The best path's states (max_plus), by following the back-pointers from the best last state.
  // A sequence whose score is −inf has no path: −1 throughout.
  std::vector<int32_t> path() const {
    std::vector<int32_t> states(static_cast<std::size_t>(L_), -1);
    if (score_ == -std::numeric_limits<Real>::infinity()) return states;
    states[L_ - 1] = last_;
    for (int64_t t = L_ - 1; t > 0; --t) states[t - 1] = back_[t * C_ + states[t]];
    return states;
  }

  // beta[t][q] for every t < L (log).
  std::vector<Real> beta() const {
    std::vector<Real> beta(alpha_.size(), 0), terms(static_cast<std::size_t>(C_));
    for (int64_t t = L_ - 2; t >= 0; --t)
      for (int64_t q = 0; q < C_; ++q) {
        for (int64_t c = 0; c < C_; ++c) terms[c] = potential(t, c, q) + beta[(t + 1) * C_ + c];
        beta[t * C_ + q] = log_sum_exp(terms);
      }
    return beta;
  }

private:
  const ChainProblem& p_;
  const void* potentials_;
  int64_t b_, C_, L_;
  int64_t strides_[4];
  std::vector<Real> alpha_;
  std::vector<int32_t> back_;
  int32_t last_ = -1;
  Real score_ = 0;
};

} // namespace jitbmm::reference
