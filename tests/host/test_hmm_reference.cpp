// The HMM form's reference is the oracle of its kernels' tests: its problem checks, its forward against the CRF
// form's reference on the potentials the tables form, its gradients against finite differences, and its rules for
// infinities.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "expect.hpp"
#include "jitbmm/reference.hpp"

using namespace jitbmm;

namespace {

const double kInf = std::numeric_limits<double>::infinity();

ChainProblem hmm_problem(Semiring semiring, int64_t B, int64_t T, int64_t C, bool batched = false) {
  ChainProblem p;
  p.semiring = semiring;
  p.dtype = DType::f64;
  p.form = ChainForm::hmm;
  p.B = B, p.T = T, p.C = C;
  p.batched_transitions = p.batched_initial = batched;
  return p;
}

// Contiguous f64 tables: emissions [B][T][C], transitions [TB][C][C], initial [TB][C].
struct Tables {
  std::vector<double> em, tr, in;
  Tables(const ChainProblem& p, std::mt19937_64& rng) {
    std::normal_distribution<double> normal(0, 1);
    const int64_t TB = p.batched_transitions ? p.B : 1;
    for (int64_t i = 0; i < p.B * p.T * p.C; ++i) em.push_back(normal(rng));
    for (int64_t i = 0; i < TB * p.C * p.C; ++i) tr.push_back(normal(rng));
    for (int64_t i = 0; i < TB * p.C; ++i) in.push_back(normal(rng));
  }
  HmmInputs inputs() const { return {em.data(), tr.data(), in.data()}; }
};

double score_of(const ChainProblem& p, const Tables& t, int64_t b = 0) {
  std::vector<double> score(static_cast<std::size_t>(p.B));
  reference::chain_forward(p, t.inputs(), nullptr, score.data(), nullptr, nullptr);
  return score[static_cast<std::size_t>(b)];
}

} // namespace

TEST_CASE("hmm problem checks: the tables' strides, the form, and potentials' strides on the hmm form") {
  ChainProblem p = hmm_problem(Semiring::log, 2, 3, 4);
  CHECK_NOTHROW(check_chain_problem(p));
  p.strides[0] = 1;
  test::expect_invalid([&] { check_chain_problem(p); }, "chain.strides[0]");
  p.strides[0] = 0;
  p.emission_strides[1] = -1;
  test::expect_invalid([&] { check_chain_problem(p); }, "chain.emission_strides[1]");
  p.emission_strides[1] = 0;
  p.transition_strides[0] = int64_t(1) << 61;
  p.transition_strides[1] = 1;
  p.batched_transitions = true;
  test::expect_invalid([&] { check_chain_problem(p); }, "chain.transitions");
  p = hmm_problem(Semiring::log, 2, 3, 4);
  p.form = static_cast<ChainForm>(7);
  test::expect_invalid([&] { check_chain_problem(p); }, "chain.form");

  // Contiguous strides, and shared tables' batch strides 0.
  p = hmm_problem(Semiring::log, 2, 3, 4);
  HmmStrides st = hmm_strides(p);
  CHECK(st.emissions[0] == 12);
  CHECK(st.emissions[1] == 4);
  CHECK(st.emissions[2] == 1);
  CHECK(st.transitions[0] == 0);
  CHECK(st.transitions[1] == 4);
  CHECK(st.initial[0] == 0);
  p.batched_transitions = p.batched_initial = true;
  st = hmm_strides(p);
  CHECK(st.transitions[0] == 16);
  CHECK(st.initial[0] == 4);
}

TEST_CASE("hmm reference: the tables' forward and gradients are the CRF's on the potentials they form") {
  std::mt19937_64 rng(7);
  for (Semiring s : {Semiring::log, Semiring::max_plus})
    for (bool batched : {false, true}) {
      const ChainProblem p = hmm_problem(s, 3, 5, 4, batched);
      const Tables t(p, rng);
      const int64_t B = p.B, T = p.T, C = p.C;
      // potentials[b][t][c][q] = transitions[c][q] + emissions[t + 1][c], with initial[q] + emissions[0][q] on the
      // first step.
      ChainProblem crf = p;
      crf.form = ChainForm::crf;
      crf.batched_transitions = crf.batched_initial = false;
      std::vector<double> pot;
      for (int64_t b = 0; b < B; ++b)
        for (int64_t u = 0; u + 1 < T; ++u)
          for (int64_t c = 0; c < C; ++c)
            for (int64_t q = 0; q < C; ++q) {
              const int64_t tb = batched ? b : 0;
              double v = t.tr[std::size_t((tb * C + c) * C + q)] + t.em[std::size_t((b * T + u + 1) * C + c)];
              if (u == 0) v += t.in[std::size_t(tb * C + q)] + t.em[std::size_t(b * T * C + q)];
              pot.push_back(v);
            }
      std::vector<double> crf_score(B), hmm_score(B), crf_alpha(B * T * C), hmm_alpha(B * T * C);
      std::vector<int32_t> crf_path(B * T), hmm_path(B * T);
      const bool viterbi = s == Semiring::max_plus;
      reference::chain_forward(crf, pot.data(), nullptr, crf_score.data(), crf_alpha.data(),
                               viterbi ? crf_path.data() : nullptr);
      reference::chain_forward(p, t.inputs(), nullptr, hmm_score.data(), hmm_alpha.data(),
                               viterbi ? hmm_path.data() : nullptr);
      for (int64_t b = 0; b < B; ++b) {
        CHECK(hmm_score[b] == doctest::Approx(crf_score[b]).epsilon(1e-12));
        for (int64_t u = 1; u < T; ++u) // the CRF's alpha_0 is 0; the HMM's carries initial and emissions[0]
          for (int64_t c = 0; c < C; ++c)
            CHECK(hmm_alpha[(b * T + u) * C + c] == doctest::Approx(crf_alpha[(b * T + u) * C + c]).epsilon(1e-12));
        for (int64_t c = 0; c < C; ++c) {
          const int64_t tb = batched ? b : 0;
          CHECK(hmm_alpha[b * T * C + c] == doctest::Approx(t.in[tb * C + c] + t.em[b * T * C + c]));
        }
      }
      if (viterbi) CHECK(hmm_path == crf_path);

      // The gradients: the CRF's edge gradients summed back onto the tables they were formed from.
      std::vector<double> g = {0.7, -1.3, 2.0}, edges(pot.size());
      reference::chain_backward(crf, pot.data(), nullptr, g.data(), edges.data());
      const int64_t TB = batched ? B : 1;
      std::vector<double> want_em(B * T * C, 0), want_tr(TB * C * C, 0), want_in(TB * C, 0);
      for (int64_t b = 0; b < B; ++b) {
        const int64_t tb = batched ? b : 0;
        for (int64_t u = 0; u + 1 < T; ++u)
          for (int64_t c = 0; c < C; ++c)
            for (int64_t q = 0; q < C; ++q) {
              const double x = edges[std::size_t(((b * (T - 1) + u) * C + c) * C + q)];
              want_tr[(tb * C + c) * C + q] += x;
              want_em[(b * T + u + 1) * C + c] += x;
              if (u == 0) {
                want_em[b * T * C + q] += x;
                want_in[tb * C + q] += x;
              }
            }
      }
      std::vector<double> got_em(want_em.size()), got_tr(want_tr.size()), got_in(want_in.size());
      reference::chain_backward(p, t.inputs(), nullptr, g.data(), got_em.data(), got_tr.data(), got_in.data());
      for (std::size_t i = 0; i < got_em.size(); ++i) CHECK(got_em[i] == doctest::Approx(want_em[i]).epsilon(1e-12));
      for (std::size_t i = 0; i < got_tr.size(); ++i) CHECK(got_tr[i] == doctest::Approx(want_tr[i]).epsilon(1e-12));
      for (std::size_t i = 0; i < got_in.size(); ++i) CHECK(got_in[i] == doctest::Approx(want_in[i]).epsilon(1e-12));
    }
}

TEST_CASE("hmm reference: the log gradients of all three tables agree with central finite differences") {
  std::mt19937_64 rng(11);
  for (bool batched : {false, true}) {
    const ChainProblem p = hmm_problem(Semiring::log, 2, 4, 3, batched);
    Tables t(p, rng);
    const std::vector<double> g = {0.7, -1.3};
    std::vector<double> ge(t.em.size(), -1), gt(t.tr.size(), -1), gi(t.in.size(), -1);
    reference::chain_backward(p, t.inputs(), nullptr, g.data(), ge.data(), gt.data(), gi.data());
    // d(Σ_b g_b · score_b) / d x, numerically.
    auto loss = [&] { return g[0] * score_of(p, t, 0) + g[1] * score_of(p, t, 1); };
    const double h = 1e-5;
    auto check_table = [&](std::vector<double>& x, const std::vector<double>& grad) {
      for (std::size_t i = 0; i < x.size(); ++i) {
        const double keep = x[i];
        x[i] = keep + h;
        const double up = loss();
        x[i] = keep - h;
        const double down = loss();
        x[i] = keep;
        CHECK(grad[i] == doctest::Approx((up - down) / (2 * h)).epsilon(1e-6));
      }
    };
    check_table(t.em, ge);
    check_table(t.tr, gt);
    check_table(t.in, gi);
  }
}

TEST_CASE("hmm reference: T = 1, lengths, infinities and the rules for scores that are not finite") {
  // One position: ⊕ over initial ⊗ emissions[0].
  ChainProblem p = hmm_problem(Semiring::log, 1, 1, 2);
  std::vector<double> em = {0.0, 1.0}, in = {0.5, 0.5}, score(1), ge(2), gi(2);
  reference::chain_forward(p, HmmInputs{em.data(), nullptr, in.data()}, nullptr, score.data(), nullptr, nullptr);
  CHECK(score[0] == doctest::Approx(std::log(std::exp(0.5) + std::exp(1.5))));
  const double one = 1;
  reference::chain_backward(p, HmmInputs{em.data(), nullptr, in.data()}, nullptr, &one, ge.data(), nullptr,
                            gi.data());
  CHECK(ge[0] + ge[1] == doctest::Approx(1));
  CHECK(gi[1] == doctest::Approx(ge[1]));

  // Two positions, two states; state 1 cannot be reached (its incoming transitions are −inf).
  p = hmm_problem(Semiring::log, 1, 2, 2);
  std::vector<double> tr = {0.0, 0.0, -kInf, -kInf}, em2 = {0, 0, 0, 0}, in2 = {0, -kInf};
  const HmmInputs x{em2.data(), tr.data(), in2.data()};
  auto forward = [&] {
    reference::chain_forward(p, x, nullptr, score.data(), nullptr, nullptr);
    return score[0];
  };
  CHECK(forward() == doctest::Approx(0.0));
  em2[3] = kInf; // a +inf emission of the unreachable state: −inf ⊗ +inf
  CHECK(std::isnan(forward()));
  em2[3] = 0;
  em2[2] = kInf; // of a reachable state: the emission is ⊗-ed onto the step's reduction, +inf
  CHECK(forward() == kInf);
  std::vector<double> g4(4), gt(4), g2(2);
  reference::chain_backward(p, x, nullptr, &one, g4.data(), gt.data(), g2.data());
  for (double v : g4) CHECK(std::isnan(v)); // no distribution over paths: NaN
  em2[2] = 0;
  in2[0] = -kInf; // no path at all: −inf and zero gradients
  CHECK(forward() == -kInf);
  reference::chain_backward(p, x, nullptr, &one, g4.data(), gt.data(), g2.data());
  for (double v : g4) CHECK(v == 0);
  for (double v : gt) CHECK(v == 0);

  // A length ends a sequence: the tables past it are not read, its gradients there are 0.
  p = hmm_problem(Semiring::log, 1, 3, 2);
  p.with_lengths = true;
  const int64_t length = 2;
  std::vector<double> em3 = {0, 1, 2, 3, NAN, NAN}, tr3 = {0.1, 0.2, 0.3, 0.4}, in3 = {0, 0}, a3(6), g6(6);
  reference::chain_forward(p, HmmInputs{em3.data(), tr3.data(), in3.data()}, &length, score.data(), a3.data(),
                           nullptr);
  CHECK(std::isfinite(score[0]));
  CHECK(a3[4] == -kInf);
  reference::chain_backward(p, HmmInputs{em3.data(), tr3.data(), in3.data()}, &length, &one, g6.data(), nullptr,
                            nullptr);
  CHECK(g6[4] == 0);
  CHECK(g6[2] + g6[3] == doctest::Approx(1));
}

TEST_CASE("hmm reference: the wrong form and missing tables are refused, naming the argument") {
  ChainProblem p = hmm_problem(Semiring::log, 1, 3, 2);
  std::vector<double> em(6), tr(4), in(2), score(1);
  test::expect_invalid(
      [&] { reference::chain_forward(p, em.data(), nullptr, score.data(), nullptr, nullptr); }, "potentials");
  test::expect_invalid([&] {
    reference::chain_forward(p, HmmInputs{nullptr, tr.data(), in.data()}, nullptr, score.data(), nullptr, nullptr);
  }, "hmm.emissions");
  test::expect_invalid([&] {
    reference::chain_forward(p, HmmInputs{em.data(), nullptr, in.data()}, nullptr, score.data(), nullptr, nullptr);
  }, "hmm.transitions");
  p.form = ChainForm::crf;
  test::expect_invalid([&] {
    reference::chain_forward(p, HmmInputs{em.data(), tr.data(), in.data()}, nullptr, score.data(), nullptr, nullptr);
  }, "hmm");
  // An empty batch holds no messages, however long its sequences: nothing to refuse, as in the crf form.
  ChainProblem empty = hmm_problem(Semiring::log, 0, int64_t(1) << 20, 1024);
  CHECK_NOTHROW(reference::chain_forward(empty, HmmInputs{}, nullptr, nullptr, nullptr, nullptr));
}
