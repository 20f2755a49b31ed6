// The k best paths of a chain on the CPU, in either form: Viterbi that keeps, for every position and state, the k best
// paths ending there (a path's best continuation keeps its prefix among the k best of the prefix's end, so nothing
// better is dropped), then the k best over the last position's states. Formed in double (long double for f64
// inputs).
#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "jitbmm/reference.hpp"
#include "reference/chain_inputs.hpp"
#include "support/checked_size.hpp"

namespace jitbmm::reference {

namespace {

// A path ending at some (t, c): its score, and where it came from (the state at t − 1 and its rank in that state's
// list; -1 at t = 0).
template <class Real> struct Entry {
  Real score;
  int32_t from;
  int32_t rank;
};

// The order of paths: the larger score first (NaN before every number, as Viterbi's winner), then, for entries of
// one (t, c), their source state, then their rank there: the states read from the end, smaller first, wherever the
// prefixes' scores tie exactly too, and otherwise as Viterbi breaks the tie (the better prefix). So the first path
// is the one Viterbi takes.
template <class Real> bool before(const Entry<Real>& x, const Entry<Real>& y) {
  const bool xn = std::isnan(x.score), yn = std::isnan(y.score);
  if (xn != yn) return xn;
  if (!xn && x.score != y.score) return x.score > y.score;
  return x.from != y.from ? x.from < y.from : x.rank < y.rank;
}

// Sequence b's k best paths, each form's by its own pieces: start(c), the score of a path of one position at c
// (none where −inf); weight(t, c, from), what a step from `from` at t to c at t + 1 adds to a path, by which the
// candidates of (t + 1, c) are chosen; arrive(t, c, x), the score a chosen candidate x then has at (t + 1, c) (the
// HMM form's emission ⊗-ed on; a path whose score becomes −inf is none).
template <class Real, class Start, class Weight, class Arrive>
void kbest_of(const ChainProblem& p, int64_t b, int64_t L, int k, double* scores, int32_t* paths, Start start,
              Weight weight, Arrive arrive) {
  constexpr Real neg_inf = -std::numeric_limits<Real>::infinity();
  const int64_t T = p.T, C = p.C;
  // lists[t][c]: the k best paths ending in state c at t, in order; a path of score −inf is no path.
  std::vector<std::vector<std::vector<Entry<Real>>>> lists(
      static_cast<std::size_t>(L), std::vector<std::vector<Entry<Real>>>(static_cast<std::size_t>(C)));
  for (int64_t c = 0; c < C; ++c)
    if (const Real s = start(c); s != neg_inf) lists[0][c].push_back({s, -1, -1});
  std::vector<Entry<Real>> candidates;
  for (int64_t t = 0; t + 1 < L; ++t)
    for (int64_t c = 0; c < C; ++c) {
      candidates.clear();
      for (int64_t from = 0; from < C; ++from) {
        const Real w = weight(t, c, from);
        const auto& list = lists[t][from];
        for (std::size_t r = 0; r < list.size(); ++r) {
          const Real score = list[r].score + w;
          if (score != neg_inf) candidates.push_back({score, int32_t(from), int32_t(r)});
        }
      }
      const std::size_t keep = std::min<std::size_t>(candidates.size(), std::size_t(k));
      std::partial_sort(candidates.begin(), candidates.begin() + keep, candidates.end(), before<Real>);
      for (std::size_t i = 0; i < keep; ++i) {
        Entry<Real> e = candidates[i];
        e.score = arrive(t, c, e.score);
        if (e.score != neg_inf) lists[t + 1][c].push_back(e);
      }
    }
  // The last position's paths, by the same order with their last state in the source's place.
  candidates.clear();
  for (int64_t c = 0; c < C; ++c)
    for (std::size_t r = 0; r < lists[L - 1][c].size(); ++r)
      candidates.push_back({lists[L - 1][c][r].score, int32_t(c), int32_t(r)});
  const std::size_t found = std::min<std::size_t>(candidates.size(), std::size_t(k));
  std::partial_sort(candidates.begin(), candidates.begin() + found, candidates.end(), before<Real>);
  for (int i = 0; i < k; ++i) {
    const bool some = std::size_t(i) < found;
    scores[b * k + i] = some ? static_cast<double>(candidates[i].score) : -INFINITY;
    if (!paths) continue;
    int32_t* path = paths + (b * k + i) * T;
    std::fill(path, path + T, -1);
    if (!some) continue;
    int32_t state = candidates[i].from, rank = candidates[i].rank;
    for (int64_t t = L - 1; t >= 0; --t) {
      path[t] = state;
      const Entry<Real>& e = lists[t][state][rank];
      state = e.from, rank = e.rank;
    }
  }
}

template <class Real>
void kbest_in(const ChainProblem& p, const void* potentials, const int64_t* lengths, int k, double* scores,
              int32_t* paths) {
  int64_t s[4];
  chain_strides(p, s);
  for (int64_t b = 0; b < p.B; ++b)
    kbest_of<Real>(
        p, b, lengths ? lengths[b] : p.T, k, scores, paths, [](int64_t) { return Real(0); },
        [&](int64_t t, int64_t c, int64_t from) {
          return Real(load_element(p.dtype, potentials, b * s[0] + t * s[1] + c * s[2] + from * s[3]));
        },
        [](int64_t, int64_t, Real x) { return x; });
}

template <class Real>
void kbest_in(const ChainProblem& p, const HmmInputs& hmm, const int64_t* lengths, int k, double* scores,
              int32_t* paths) {
  const HmmStrides st = hmm_strides(p);
  for (int64_t b = 0; b < p.B; ++b) {
    auto em = [&](int64_t t, int64_t c) {
      return Real(
          load_element(p.dtype, hmm.emissions, b * st.emissions[0] + t * st.emissions[1] + c * st.emissions[2]));
    };
    kbest_of<Real>(
        p, b, lengths ? lengths[b] : p.T, k, scores, paths,
        [&](int64_t c) {
          return Real(load_element(p.dtype, hmm.initial, b * st.initial[0] + c * st.initial[1])) + em(0, c);
        },
        [&](int64_t, int64_t c, int64_t from) {
          return Real(load_element(p.dtype, hmm.transitions,
                                   b * st.transitions[0] + c * st.transitions[1] + from * st.transitions[2]));
        },
        [&](int64_t t, int64_t c, Real x) { return em(t + 1, c) + x; });
  }
}

} // namespace

namespace {

// What both forms check: the semiring, k and the work the reference takes.
void check_kbest(const ChainProblem& p, int k, double* scores) {
  if (p.semiring != Semiring::max_plus)
    throw std::invalid_argument("problem.semiring: the best paths are max_plus's (got " +
                                std::string(semiring_info(p.semiring).name) + ")");
  if (k < 1 || k > kMaxReferenceBestPaths)
    throw std::invalid_argument("k: " + std::to_string(k) + " is outside [1, " +
                                std::to_string(kMaxReferenceBestPaths) + "]");
  // Its lists hold k entries a (t, c) of a sequence, and a step k·C candidates a state: bounded as the chain's own.
  const auto entries = try_product({p.T, p.C, k}), terms = try_product({p.B, p.T, p.C, p.C, k});
  if (p.B > 0 && (!entries || *entries > kMaxReferenceOutputs || !terms || *terms > kMaxReferenceTerms))
    throw std::invalid_argument("k: " + std::to_string(k) + " best paths of B*T*C*C = " + std::to_string(p.B) + "*" +
                                std::to_string(p.T) + "*" + std::to_string(p.C) + "*" + std::to_string(p.C) +
                                " terms are more than the CPU reference computes");
  if (p.B > 0 && !scores) throw std::invalid_argument("scores: null");
}

} // namespace

void chain_kbest(const ChainProblem& p, const void* potentials, const int64_t* lengths, int k, double* scores,
                 int32_t* paths) {
  check_chain_inputs(p, lengths);
  check_kbest(p, k, scores);
  if (p.B > 0 && p.T > 1 && !potentials) throw std::invalid_argument("potentials: null"); // one position reads none
  if (p.dtype == DType::f64)
    kbest_in<long double>(p, potentials, lengths, k, scores, paths);
  else
    kbest_in<double>(p, potentials, lengths, k, scores, paths);
}

void chain_kbest(const ChainProblem& p, const HmmInputs& hmm, const int64_t* lengths, int k, double* scores,
                 int32_t* paths) {
  check_hmm_inputs(p, hmm, lengths);
  check_kbest(p, k, scores);
  if (p.dtype == DType::f64)
    kbest_in<long double>(p, hmm, lengths, k, scores, paths);
  else
    kbest_in<double>(p, hmm, lengths, k, scores, paths);
}

} // namespace jitbmm::reference
