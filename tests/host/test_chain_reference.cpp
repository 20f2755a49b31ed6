// The chain reference is the oracle of the chain kernels' tests: its problem checks, and its scores, messages, best
// paths and gradients against an enumeration of every path.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "host/chain_problems.hpp"
#include "jitbmm/chain.hpp"
#include "jitbmm/reference.hpp"

using namespace jitbmm;
using jitbmm::test::chain;

namespace {

const double kInf = std::numeric_limits<double>::infinity();

// Contiguous potentials [B][T − 1][C][C].
double& at(std::vector<double>& pot, const ChainProblem& p, int64_t b, int64_t t, int64_t c, int64_t q) {
  return pot[static_cast<std::size_t>(((b * (p.T - 1) + t) * p.C + c) * p.C + q)];
}

struct Run {
  std::vector<double> score, alpha, grad;
  std::vector<int32_t> path;
};

// The reference's forward (score, alpha, path for max_plus) and backward (grad_score = g, default 1), from
// potentials stored as `storage` values in the problem's dtype.
Run run(const ChainProblem& p, const std::vector<double>& storage, const std::vector<int64_t>& lengths = {},
        std::vector<double> g = {}) {
  std::vector<unsigned char> bytes(storage.size() * dtype_info(p.dtype).size_bytes);
  for (std::size_t i = 0; i < storage.size(); ++i) store_element(p.dtype, bytes.data(), int64_t(i), storage[i]);
  const int64_t* len = p.with_lengths ? lengths.data() : nullptr;
  const bool viterbi = p.semiring == Semiring::max_plus;
  Run r;
  r.score.resize(p.B);
  r.alpha.resize(p.B * p.T * p.C);
  r.path.resize(viterbi ? p.B * p.T : 0);
  reference::chain_forward(p, bytes.data(), len, r.score.data(), r.alpha.data(), viterbi ? r.path.data() : nullptr);
  if (g.empty()) g.assign(p.B, 1.0);
  r.grad.assign(p.B * (p.T - 1) * p.C * p.C, -1.0); // every element must be written
  reference::chain_backward(p, bytes.data(), len, g.data(), r.grad.data());
  return r;
}

// Every path of sequence b over its first L positions (contiguous potentials), in the order that makes the first
// of equal scores the one Viterbi's tie rule picks: the last state most significant, then the one before.
struct Enumerated {
  double total = -kInf, best = -kInf;     // log Σ exp(path score); the best path's score
  std::vector<int> best_path;             // z_0 .. z_{L−1}
  std::vector<double> by_last, marginals; // total (log) or best (max_plus) by last state; edge masses [t][c][q]
};

Enumerated enumerate(const ChainProblem& p, std::vector<double>& pot, int64_t b, int64_t L) {
  const int64_t C = p.C;
  int64_t count = 1;
  for (int64_t t = 0; t < L; ++t) count *= C;
  const bool viterbi = p.semiring == Semiring::max_plus;
  Enumerated e;
  e.by_last.assign(C, -kInf);
  std::vector<long double> scores;
  std::vector<std::vector<int>> paths;
  for (int64_t code = 0; code < count; ++code) {
    std::vector<int> z(L);
    for (int64_t t = 0, rest = code; t < L; ++t, rest /= C) z[t] = int(rest % C);
    long double s = 0;
    for (int64_t t = 0; t + 1 < L; ++t) s += at(pot, p, b, t, z[t + 1], z[t]);
    scores.push_back(s);
    paths.push_back(z);
    if (s > e.best || e.best_path.empty()) e.best = double(s), e.best_path = z;
    double& last = e.by_last[z[L - 1]];
    last = viterbi ? std::max(last, double(s)) : double(std::log(std::exp((long double)last) + std::exp(s)));
  }
  long double sum = 0;
  for (long double s : scores) sum += std::exp(s);
  e.total = double(std::log(sum));
  e.marginals.assign((p.T - 1) * C * C, 0.0);
  for (std::size_t i = 0; i < scores.size(); ++i)
    for (int64_t t = 0; t + 1 < L; ++t)
      e.marginals[(t * C + paths[i][t + 1]) * C + paths[i][t]] += double(std::exp(scores[i] - e.total));
  return e;
}

std::vector<double> random_values(std::mt19937_64& rng, std::size_t n, bool small_integers) {
  std::normal_distribution<double> normal(0.0, 1.5);
  std::uniform_int_distribution<int> integer(0, 2); // many exact ties
  std::vector<double> v(n);
  for (double& x : v) x = small_integers ? integer(rng) : normal(rng);
  return v;
}

void check_throws_naming(const std::function<void()>& call, const char* field) {
  CAPTURE(field);
  CHECK_THROWS_WITH_AS(call(), doctest::Contains(field), std::invalid_argument);
}

} // namespace

TEST_CASE("chain problem checks: each bad field is named") {
  const std::pair<std::function<void(ChainProblem&)>, const char*> cases[] = {
      {[](ChainProblem& p) { p.semiring = Semiring::min_plus; }, "chain.semiring: 'min_plus'"},
      {[](ChainProblem& p) { p.semiring = Semiring(99); }, "chain.semiring: enum value 99"},
      {[](ChainProblem& p) { p.dtype = DType(7); }, "chain.dtype: enum value 7"},
      {[](ChainProblem& p) { p.T = 0; }, "chain.T: must be at least 1 (got 0)"},
      {[](ChainProblem& p) { p.C = 0; }, "chain.C: "},
      {[](ChainProblem& p) { p.C = kMaxChainStates + 1; }, "chain.C: "},
      {[](ChainProblem& p) { p.B = -1; }, "chain.B: "},
      {[](ChainProblem& p) { p.B = int64_t(1) << 30; }, "chain.B: must be in [0, 2^30 - 1] (got 1073741824)"},
      {[](ChainProblem& p) { p.strides[2] = -1; }, "chain.strides[2]: "},
      {[](ChainProblem& p) { p.strides[0] = int64_t(1) << 61; }, "chain.potentials: addresses more than 2^62 bytes"},
      {[](ChainProblem& p) { p.B = int64_t(1) << 29, p.T = 4096, p.C = 1024; }, "chain.potentials: "},
      {[](ChainProblem& p) { p.B = int64_t(1) << 29, p.T = int64_t(1) << 31, p.C = 1; }, "chain.alpha: "}, // 2^63 bytes
      {[](ChainProblem& p) { p.B = 0, p.T = int64_t(1) << 50, p.C = 1024; }, "chain.alpha: "},
      // Beyond 1024 states only the stepped strategy runs, and it takes at most 2^24 positions.
      {[](ChainProblem& p) { p.B = 1, p.T = kMaxSteppedChainLength + 1, p.C = 2048; },
       "chain.T: beyond 1024 states only the stepped strategy runs"},
      // The hmm form's fields on a crf problem.
      {[](ChainProblem& p) { p.batched_transitions = true; }, "chain.batched_transitions: the crf form has no tables"},
      {[](ChainProblem& p) { p.batched_initial = true; }, "chain.batched_initial: the crf form has no tables"},
      {[](ChainProblem& p) { p.emission_strides[2] = 1; }, "chain.emission_strides[2]: the crf form has no tables"},
      {[](ChainProblem& p) { p.transition_strides[0] = 4; }, "chain.transition_strides[0]: "},
      {[](ChainProblem& p) { p.initial_strides[1] = 1; }, "chain.initial_strides[1]: "},
  };
  for (const auto& [change, field] : cases) {
    ChainProblem p = chain(Semiring::log, 2, 3, 2);
    change(p);
    check_throws_naming([&] { check_chain_problem(p); }, field);
  }
}

TEST_CASE("chain problem checks: B = 0, T = 1 and broadcast strides are valid; contiguous strides are filled in") {
  CHECK_NOTHROW(check_chain_problem(chain(Semiring::log, 0, 7, 3)));
  CHECK_NOTHROW(check_chain_problem(chain(Semiring::max_plus, 4, 1, kMaxChainStates)));
  CHECK_NOTHROW(check_chain_problem(chain(Semiring::log, 1, kMaxSteppedChainLength, 2048)));
  CHECK_NOTHROW(check_chain_problem(chain(Semiring::log, 0, kMaxSteppedChainLength + 1, 2048))); // runs nothing
  CHECK_NOTHROW(check_chain_problem(chain(Semiring::log, 1, kMaxSteppedChainLength + 1, 1024)));
  ChainProblem p = chain(Semiring::log, 3, 5, 4);
  p.dtype = DType::f32;
  int64_t st[4];
  chain_strides(p, st);
  CHECK(st[0] == 4 * 16);
  CHECK(st[1] == 16);
  CHECK(st[2] == 4);
  CHECK(st[3] == 1);
  p.strides[0] = 0, p.strides[1] = 1, p.strides[2] = 100, p.strides[3] = 0; // broadcast over b and p
  CHECK_NOTHROW(check_chain_problem(p));
  chain_strides(p, st);
  CHECK((st[0] == 0 && st[1] == 1 && st[2] == 100 && st[3] == 0));
}

TEST_CASE("chain saved bytes: from the problem alone, as documented; 0 for max_plus; a bad problem named") {
  // The messages (2·B·T·C values), their offsets (2·B·T doubles) and the scores (B doubles), back to back.
  ChainProblem p = chain(Semiring::log, 3, 5, 4);
  p.dtype = DType::f32;
  CHECK(chain_saved_bytes(p) == 2 * 60 * 4 + 2 * 15 * 8 + 3 * 8);
  p.C = 3; // an odd count of f32 messages: the two pieces still end on a double's boundary
  CHECK(chain_saved_bytes(p) == 2 * 45 * 4 + 2 * 15 * 8 + 3 * 8);
  p.dtype = DType::bf16; // half inputs keep f32 messages
  CHECK(chain_saved_bytes(p) == 2 * 45 * 4 + 2 * 15 * 8 + 3 * 8);
  p = chain(Semiring::log, 32, 512, 64);
  CHECK(chain_saved_bytes(p) == 2 * std::size_t(32 * 512 * 64) * 8 + 2 * 32 * 512 * 8 + 32 * 8);
  p.form = ChainForm::hmm; // the same messages in either form
  CHECK(chain_saved_bytes(p) == 2 * std::size_t(32 * 512 * 64) * 8 + 2 * 32 * 512 * 8 + 32 * 8);
  CHECK(chain_saved_bytes(chain(Semiring::max_plus, 32, 512, 64)) == 0);
  CHECK(chain_saved_bytes(chain(Semiring::log, 0, 7, 3)) == 0);
  check_throws_naming([] { chain_saved_bytes(chain(Semiring::log, 2, 3, 0)); }, "chain.C: ");
  // As many sequences as no plan launches: refused here too, as every entry point refuses them.
  CHECK(chain_saved_bytes(chain(Semiring::log, kMaxChainSequences, 1, 1)) > 0);
  check_throws_naming([] { chain_saved_bytes(chain(Semiring::log, kMaxChainSequences + 1, 1, 1)); }, "chain.B: ");
}

TEST_CASE("chain reference: potentials[b][t][c][p] scores the edge from p at t to c at t + 1 (torch-struct)") {
  // T = 3, C = 2: the edge 0 → 1 at step 0 scores 5, the edge 1 → 1 at step 1 scores 3, every other edge 0. Paths
  // (z0, z1, z2) score 5·[z0 = 0, z1 = 1] + 3·[z1 = 1, z2 = 1]: the best is 0 → 1 → 1 with 8 (the transposed reading
  // would give 5), and the eight paths sum to 5 + e^3 + e^5 + e^8.
  for (Semiring s : {Semiring::log, Semiring::max_plus}) {
    const ChainProblem p = chain(s, 1, 3, 2);
    std::vector<double> pot(8, 0.0);
    at(pot, p, 0, 0, 1, 0) = 5;
    at(pot, p, 0, 1, 1, 1) = 3;
    const Run r = run(p, pot);
    if (s == Semiring::max_plus) {
      CHECK(r.score[0] == 8);
      CHECK(r.path == std::vector<int32_t>{0, 1, 1});
      CHECK(r.grad == std::vector<double>{0, 0, 1, 0, /* t = 1 */ 0, 0, 0, 1});
    } else {
      CHECK(r.score[0] == doctest::Approx(std::log(5 + std::exp(3.0) + std::exp(5.0) + std::exp(8.0))));
    }
  }
}

TEST_CASE("chain reference: scores, alpha, best paths and gradients against every path, with lengths") {
  std::mt19937_64 rng(20261127);
  for (Semiring s : {Semiring::log, Semiring::max_plus})
    for (int64_t T = 1; T <= 5; ++T)
      for (int64_t C = 1; C <= 3; ++C)
        for (bool ties : {false, true}) {
          if (ties && s == Semiring::log) continue;
          CAPTURE(semiring_info(s).name);
          CAPTURE(T);
          CAPTURE(C);
          CAPTURE(ties);
          const ChainProblem p = chain(s, 3, T, C, true);
          std::vector<double> pot = random_values(rng, std::size_t(p.B * (T - 1) * C * C), ties);
          const std::vector<int64_t> lengths = {T, 1 + int64_t(rng() % T), 1 + int64_t(rng() % T)};
          const std::vector<double> g = {1.0, 0.5, -2.0};
          const Run r = run(p, pot, lengths, g);
          for (int64_t b = 0; b < p.B; ++b) {
            const int64_t L = lengths[b];
            CAPTURE(b);
            CAPTURE(L);
            const Enumerated e = enumerate(p, pot, b, L);
            const bool viterbi = s == Semiring::max_plus;
            CHECK(r.score[b] == doctest::Approx(viterbi ? e.best : e.total).epsilon(1e-12));
            for (int64_t t = 0; t < T; ++t)
              for (int64_t c = 0; c < C; ++c) {
                const double got = r.alpha[(b * T + t) * C + c];
                if (t >= L)
                  CHECK(got == -kInf);
                else
                  CHECK(got == doctest::Approx(enumerate(p, pot, b, t + 1).by_last[c]).epsilon(1e-12));
              }
            for (int64_t t = 0; viterbi && t < T; ++t) CHECK(r.path[b * T + t] == (t < L ? e.best_path[t] : -1));
            for (int64_t t = 0; t + 1 < T; ++t)
              for (int64_t c = 0; c < C; ++c)
                for (int64_t q = 0; q < C; ++q) {
                  const double want = viterbi ? (t + 1 < L && e.best_path[t + 1] == c && e.best_path[t] == q ? 1 : 0)
                                              : e.marginals[(t * C + c) * C + q];
                  CHECK(r.grad[((b * (T - 1) + t) * C + c) * C + q] == doctest::Approx(g[b] * want).epsilon(1e-12));
                }
          }
        }
}

TEST_CASE("chain reference: Viterbi ties go to the smallest last state, then the smallest back-pointers") {
  const ChainProblem p = chain(Semiring::max_plus, 1, 3, 3);
  std::vector<double> pot(18, 0.0);
  at(pot, p, 0, 0, 2, 1) = 1; // 1 → 2 → ·  and  2 → 1 → ·: both 1 at step 0
  at(pot, p, 0, 0, 1, 2) = 1;
  CHECK(run(p, pot).path == std::vector<int32_t>{2, 1, 0}); // last state: all tie, 0; before it: 1 (via 2 → 1)
  at(pot, p, 0, 1, 2, 1) = 1;                               // now 2 → 1 → 2 scores 2
  at(pot, p, 0, 1, 1, 2) = 1;                               // and 1 → 2 → 1 too: it ends in the smaller state
  CHECK(run(p, pot).path == std::vector<int32_t>{1, 2, 1});
  CHECK(run(p, pot).score[0] == 2);
  std::vector<double> nan_pot(18, 0.0);
  at(nan_pot, p, 0, 0, 1, 2) = NAN; // the first NaN is the max: 2 → 1, and NaN on every path from there
  const Run r = run(p, nan_pot);
  CHECK(std::isnan(r.score[0]));
  CHECK(r.path == std::vector<int32_t>{2, 1, 0});
}

TEST_CASE("chain reference: the log gradient agrees with central finite differences of the score") {
  std::mt19937_64 rng(7);
  const ChainProblem p = chain(Semiring::log, 2, 4, 3, true);
  const std::vector<int64_t> lengths = {4, 3};
  std::vector<double> pot = random_values(rng, std::size_t(2 * 3 * 9), false);
  const Run r = run(p, pot, lengths, {1.0, 3.0});
  const double h = 1e-5;
  for (std::size_t i : {std::size_t(0), std::size_t(13), std::size_t(27 + 5), std::size_t(27 + 9 + 4)}) {
    std::vector<double> up = pot, down = pot;
    up[i] += h, down[i] -= h;
    const int64_t b = int64_t(i) / 27;
    const double slope = (run(p, up, lengths).score[b] - run(p, down, lengths).score[b]) / (2 * h);
    CAPTURE(i);
    CHECK(r.grad[i] == doctest::Approx((b == 0 ? 1.0 : 3.0) * slope).epsilon(1e-7));
  }
  CHECK(r.grad[27 + 2 * 9 + 4] == 0); // past sequence 1's length: not read, no gradient
}

TEST_CASE("chain reference: a permuted, padded layout and a broadcast one give the contiguous results") {
  std::mt19937_64 rng(11);
  for (Semiring s : {Semiring::log, Semiring::max_plus}) {
    const int64_t B = 3, T = 4, C = 3;
    ChainProblem p = chain(s, B, T, C, true);
    const std::vector<int64_t> lengths = {4, 2, 3};
    std::vector<double> pot = random_values(rng, std::size_t(B * (T - 1) * C * C), false);
    const Run want = run(p, pot, lengths);
    // Stored as [t][q][b][c] with padding between rows, unused elements NaN.
    const int64_t sc = 1, sb = C + 1, sq = B * sb + 2, st = C * sq + 3;
    ChainProblem strided = p;
    strided.strides[0] = sb, strided.strides[1] = st, strided.strides[2] = sc, strided.strides[3] = sq;
    std::vector<double> storage(std::size_t((T - 1) * st), NAN);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t + 1 < T; ++t)
        for (int64_t c = 0; c < C; ++c)
          for (int64_t q = 0; q < C; ++q) storage[b * sb + t * st + c * sc + q * sq] = at(pot, p, b, t, c, q);
    const Run got = run(strided, storage, lengths);
    CHECK(got.score == want.score);
    CHECK(got.alpha == want.alpha);
    CHECK(got.path == want.path);
    CHECK(got.grad == want.grad);
    // One sequence's potentials for every b (stride 0): the contiguous copy of it, three times.
    ChainProblem broadcast = p;
    broadcast.strides[0] = 0, broadcast.strides[1] = C * C, broadcast.strides[2] = C, broadcast.strides[3] = 1;
    const std::vector<double> one(pot.begin(), pot.begin() + (T - 1) * C * C);
    std::vector<double> copies;
    for (int64_t b = 0; b < B; ++b) copies.insert(copies.end(), one.begin(), one.end());
    const Run shared = run(broadcast, one, lengths), copied = run(p, copies, lengths);
    CHECK(shared.score == copied.score);
    CHECK(shared.alpha == copied.alpha);
    CHECK(shared.grad == copied.grad);
  }
}

TEST_CASE("chain reference: f32, f16 and bf16 potentials give the f64 results of the same values") {
  std::mt19937_64 rng(3);
  for (DType dtype : {DType::f32, DType::f16, DType::bf16})
    for (Semiring s : {Semiring::log, Semiring::max_plus}) {
      CAPTURE(dtype_info(dtype).name);
      ChainProblem p = chain(s, 2, 5, 3);
      std::vector<double> pot = random_values(rng, std::size_t(2 * 4 * 9), false);
      std::vector<unsigned char> rounded(pot.size() * 2 * sizeof(double));
      for (std::size_t i = 0; i < pot.size(); ++i) { // the values the dtype holds
        store_element(dtype, rounded.data(), int64_t(i), pot[i]);
        pot[i] = load_element(dtype, rounded.data(), int64_t(i));
      }
      const Run want = run(p, pot);
      p.dtype = dtype;
      CHECK(chain_output_dtype(p) == DType::f32);
      const Run got = run(p, pot);
      for (int64_t b = 0; b < 2; ++b) CHECK(got.score[b] == doctest::Approx(want.score[b]).epsilon(1e-14));
      CHECK(got.path == want.path);
      for (std::size_t i = 0; i < got.grad.size(); ++i)
        CHECK(got.grad[i] == doctest::Approx(want.grad[i]).epsilon(1e-12));
    }
}

TEST_CASE("chain reference: edge cases never give NaN where the contract says otherwise") {
  for (Semiring s : {Semiring::log, Semiring::max_plus}) {
    CAPTURE(semiring_info(s).name);
    const bool viterbi = s == Semiring::max_plus;
    const ChainProblem p = chain(s, 1, 4, 3);
    const std::size_t n = 3 * 9;
    // Every potential −inf: no path has weight.
    Run r = run(p, std::vector<double>(n, -kInf));
    CHECK(r.score[0] == -kInf);
    for (std::size_t i = 0; i < r.alpha.size(); ++i) CHECK(r.alpha[i] == (i < 3 ? 0 : -kInf));
    for (double g : r.grad) CHECK(g == 0.0); // and no path (max_plus: −1 throughout)
    if (viterbi) CHECK(r.path == std::vector<int32_t>{-1, -1, -1, -1});
    // One NaN potential: a NaN score. One +inf: +inf. +inf then −inf on the only path: NaN.
    std::vector<double> pot(n, 0.0);
    pot[10] = NAN;
    CHECK(std::isnan(run(p, pot).score[0]));
    pot[10] = kInf;
    CHECK(run(p, pot).score[0] == kInf);
    const ChainProblem one_state = chain(s, 1, 3, 1);
    CHECK(std::isnan(run(one_state, {kInf, -kInf}).score[0]));
    // grad_score = 0: exact zeros next to NaN and ±inf.
    r = run(p, {NAN, kInf, -kInf, 1, 2, 3, NAN, kInf, -kInf, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1}, {},
            {0.0});
    for (double g : r.grad) CHECK(g == 0.0);
    // Length 1: no edge; log C or 0, and no gradient.
    const ChainProblem short_chain = chain(s, 2, 3, 3, true);
    r = run(short_chain, std::vector<double>(36, 1.0), {1, 1});
    for (int64_t b = 0; b < 2; ++b) CHECK(r.score[b] == doctest::Approx(viterbi ? 0.0 : std::log(3.0)));
    for (double g : r.grad) CHECK(g == 0.0);
    if (viterbi) CHECK(r.path == std::vector<int32_t>{0, -1, -1, 0, -1, -1});
    const Run t1 = run(chain(s, 2, 1, 3), {});
    CHECK(t1.score == std::vector<double>(2, viterbi ? 0.0 : std::log(3.0)));
    CHECK(run(chain(s, 0, 3, 2), {}).score.empty()); // B = 0: nothing to do
  }
}

TEST_CASE("chain reference: bad calls are refused, naming the argument") {
  const ChainProblem p = chain(Semiring::log, 2, 3, 2, true);
  std::vector<double> pot(16, 0.0), score(2), alpha(12), grad(16), g(2, 1.0);
  std::vector<int32_t> path(6);
  const std::vector<int64_t> good = {3, 1}, zero = {3, 0}, long_one = {4, 1};
  check_throws_naming([&] { reference::chain_forward(p, pot.data(), zero.data(), score.data(), nullptr, nullptr); },
                      "lengths[1]");
  check_throws_naming([&] { reference::chain_backward(p, pot.data(), long_one.data(), g.data(), grad.data()); },
                      "lengths[0]");
  check_throws_naming([&] { reference::chain_forward(p, pot.data(), nullptr, score.data(), nullptr, nullptr); },
                      "lengths");
  check_throws_naming(
      [&] { reference::chain_forward(p, pot.data(), good.data(), score.data(), alpha.data(), path.data()); }, "path");
  check_throws_naming([&] { reference::chain_forward(p, nullptr, good.data(), score.data(), nullptr, nullptr); },
                      "potentials");
  check_throws_naming([&] { reference::chain_backward(p, nullptr, good.data(), g.data(), grad.data()); }, "potentials");
  ChainProblem bad = p;
  bad.T = 0;
  check_throws_naming([&] { reference::chain_forward(bad, pot.data(), good.data(), score.data(), nullptr, nullptr); },
                      "chain.T");
  ChainProblem huge = chain(Semiring::max_plus, int64_t(1) << 20, 1 << 10, 1 << 4);
  check_throws_naming([&] { reference::chain_forward(huge, pot.data(), nullptr, score.data(), nullptr, nullptr); },
                      "chain.B: B*T*C*C");
}
