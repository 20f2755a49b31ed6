// The k best paths of chains on the GPU (ChainKBest) against the CPU reference (reference::chain_kbest), in the CRF
// and the HMM form: scores and paths exactly, ties by the reference's rule (integer potentials tie everywhere), fewer
// paths than k (−inf, −1), ragged and bad lengths, NaN and ±inf, every dtype, the HMM form's tables shared and per
// sequence and at strides; the first path is the chain plan's Viterbi path. Outputs are poisoned first, so that
// anything the kernel leaves unwritten shows.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "hmm_arrays.hpp"
#include "jitbmm/chain.hpp"
#include "jitbmm/chain_kbest.hpp"
#include "jitbmm/reference.hpp"
#include "runtime/device.hpp"
#include "runtime/device_memory.hpp"
#include "templates/chain/kbest_params.cuh"

using namespace jitbmm;
using namespace jitbmm::test;

namespace {

struct Best {
  std::vector<double> scores;  // [B][k]
  std::vector<int32_t> paths;  // [B][k][T]
};

Best on_gpu(const ChainProblem& p, const std::vector<double>& pot, const std::vector<int64_t>& lengths, int k,
            bool with_paths = true) {
  const DType out = chain_output_dtype(p);
  DeviceBuffer d_pot = stored(p.dtype, pot), d_len = upload(lengths),
               d_scores(std::size_t(p.B * k) * dtype_info(out).size_bytes + 1),
               d_paths(std::size_t(p.B * k * p.T) * 4 + 1);
  d_scores.fill_bytes(0x7f); // a large finite number in every dtype: an unwritten score shows
  d_paths.fill_bytes(0x7f);
  const ChainKBest best = ChainKBest::get(p, k);
  best(d_pot.get(), p.with_lengths ? static_cast<const int64_t*>(d_len.get()) : nullptr, d_scores.get(),
       with_paths ? static_cast<int32_t*>(d_paths.get()) : nullptr);
  Best r{download_as_double(d_scores, out, p.B * k), std::vector<int32_t>(std::size_t(p.B * k * p.T))};
  if (with_paths && !r.paths.empty()) d_paths.download(r.paths.data(), r.paths.size() * 4);
  return r;
}

Best on_cpu(const ChainProblem& p, const std::vector<double>& pot, const std::vector<int64_t>& lengths, int k) {
  Best r{std::vector<double>(std::size_t(p.B * k)), std::vector<int32_t>(std::size_t(p.B * k * p.T))};
  // The reference reads the values the kernel reads: the potentials rounded to the problem's dtype.
  std::vector<unsigned char> host(pot.size() * dtype_info(p.dtype).size_bytes + 1);
  for (std::size_t i = 0; i < pot.size(); ++i) store_element(p.dtype, host.data(), int64_t(i), pot[i]);
  reference::chain_kbest(p, host.data(), p.with_lengths ? lengths.data() : nullptr, k, r.scores.data(),
                         r.paths.data());
  return r;
}

// Scores within tol (exactly for tol 0; NaN and infinities exactly), paths exactly; the first misses reported.
void compare_best(const std::string& what, const Best& got, const Best& want, double tol, int& bad) {
  compare(what + " scores", got.scores, want.scores, tol, bad);
  for (std::size_t i = 0; i < got.paths.size(); ++i)
    if (got.paths[i] != want.paths[i] && bad++ < 5)
      FAIL_CHECK(what << " paths[" << i << "] = " << got.paths[i] << ", reference " << want.paths[i]);
}

// Potentials the kernels add exactly in every dtype (multiples of 1/8 within ±4, or integers 0 to 2, which tie
// everywhere), or normal ones (for f64), with a fraction −inf.
std::vector<double> potentials(std::mt19937_64& rng, const ChainProblem& p, double mask, bool integers) {
  std::vector<double> v = random_potentials(rng, p, mask, integers);
  if (!integers && p.dtype != DType::f64)
    for (double& x : v)
      if (std::isfinite(x)) x = std::round(std::max(-4.0, std::min(4.0, x)) * 8) / 8;
  return v;
}

ChainProblem problem(DType dtype, int64_t B, int64_t T, int64_t C, bool ragged) {
  ChainProblem p;
  p.semiring = Semiring::max_plus;
  p.dtype = dtype;
  p.B = B, p.T = T, p.C = C;
  p.with_lengths = ragged;
  return p;
}

// The first of the 4 best (best) against the f32 plan's Viterbi score and path, run by run(d_score, d_path, workspace).
template <class Run> void check_first_is_viterbi(const ChainProblem& p, const Best& best, Run run) {
  DeviceBuffer d_score(4 * p.B), d_path(4 * p.B * p.T);
  const ChainPlan plan = ChainPlan::get(p);
  DeviceBuffer work(std::max<std::size_t>(1, plan.workspace_bytes(true)));
  run(plan, d_score.get(), static_cast<int32_t*>(d_path.get()), Workspace{work.get(), plan.workspace_bytes(true)});
  const std::vector<double> score = download_as_double(d_score, DType::f32, p.B);
  std::vector<int32_t> path(std::size_t(p.B * p.T));
  d_path.download(path.data(), path.size() * 4);
  for (int64_t b = 0; b < p.B; ++b) {
    CAPTURE(b);
    CHECK(best.scores[std::size_t(b * 4)] == score[std::size_t(b)]);
    for (int64_t t = 0; t < p.T; ++t) CHECK(best.paths[std::size_t(b * 4 * p.T + t)] == path[std::size_t(b * p.T + t)]);
  }
}

} // namespace

TEST_CASE("chain k best: the reference's paths and scores, ties, masks, ragged lengths and every dtype") {
  std::mt19937_64 rng(20261203);
  const struct {
    int64_t B, T, C;
  } shapes[] = {{3, 1, 4}, {4, 2, 3}, {5, 7, 1}, {4, 9, 2}, {3, 12, 5}, {3, 20, 16}, {2, 17, 33},
                {2, 30, 64}, {2, 6, 100}, {2, 6, 130}, {1, 5, 600}, {1, 4, 1024}}; // 130: 17 a block of 8
  int cases = 0, bad = 0;
  for (const auto& s : shapes)
    for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16})
      for (int k : {1, 3, 4, 16}) // 3 and 4 merge sorted lists up to 16 states (kbest_merges), 1 and 16 do not
        for (int variant = 0; variant < 3; ++variant) { // plain, ties, masked and ragged
          if ((dtype == DType::f16 || dtype == DType::bf16) && s.C > 64 && k != 3) continue; // loads alone differ
          const ChainProblem p = problem(dtype, s.B, s.T, s.C, variant == 2);
          const std::vector<double> pot = potentials(rng, p, variant == 2 ? 0.4 : 0.0, variant == 1);
          const std::vector<int64_t> lengths = random_lengths(rng, p);
          CAPTURE(dtype_info(dtype).name);
          CAPTURE(s.C);
          CAPTURE(s.T);
          CAPTURE(k);
          CAPTURE(variant);
          const double tol = dtype == DType::f64 && variant != 1 ? 1e-12 : 0.0;
          if (jb::kbest_shared_bytes(int(s.C), k, dtype_info(chain_output_dtype(p)).size_bytes) >
              unsigned(current_device()->max_shared_per_block_optin)) { // 16 doubles at 1,024 states: refused
            CHECK_THROWS_WITH_AS(ChainKBest::get(p, k), doctest::Contains("k:"), std::invalid_argument);
            continue;
          }
          compare_best("k best", on_gpu(p, pot, lengths, k), on_cpu(p, pot, lengths, k), tol, bad);
          ++cases;
        }
  MESSAGE(cases << " cases against the reference");
  CHECK(bad == 0);
}

TEST_CASE("chain k best: the first path is the chain plan's Viterbi path, and the scores alone are the same") {
  std::mt19937_64 rng(7);
  for (bool integers : {false, true}) {
    const ChainProblem p = problem(DType::f32, 8, 40, 24, true);
    const std::vector<double> pot = potentials(rng, p, 0.1, integers);
    const std::vector<int64_t> lengths = random_lengths(rng, p);
    const Best best = on_gpu(p, pot, lengths, 4), alone = on_gpu(p, pot, lengths, 4, false);
    CHECK(best.scores == alone.scores);
    const DeviceBuffer d_pot = stored(p.dtype, pot), d_len = upload(lengths);
    check_first_is_viterbi(p, best, [&](const ChainPlan& plan, void* score, int32_t* path, const Workspace& work) {
      plan(d_pot.get(), static_cast<const int64_t*>(d_len.get()), score, nullptr, nullptr, path, nullptr, work);
    });
  }
}

TEST_CASE("chain k best: NaN wins, infinities, bad lengths give NaN and -1, one position, B = 0") {
  // NaN and +inf at a few edges, −inf at others: the reference's order (NaN first), each as the kernel reads it.
  std::mt19937_64 rng(3);
  int bad = 0;
  for (DType dtype : {DType::f32, DType::f64, DType::bf16})
    for (int k : {3, 6}) { // with kbest_merges' network and without
      const ChainProblem p = problem(dtype, 4, 6, 5, true);
      std::vector<double> pot = potentials(rng, p, 0.2, true);
      std::uniform_int_distribution<std::size_t> at(0, pot.size() - 1);
      for (int i = 0; i < 3; ++i) pot[at(rng)] = NAN, pot[at(rng)] = INFINITY;
      const std::vector<int64_t> lengths = random_lengths(rng, p);
      compare_best(std::string(dtype_info(dtype).name) + " special values, k = " + std::to_string(k),
                   on_gpu(p, pot, lengths, k), on_cpu(p, pot, lengths, k), 0.0, bad);
    }
  CHECK(bad == 0);
  // Lengths outside [1, T]: NaN scores and paths of −1 for those sequences, the others untouched by them.
  const ChainProblem p = problem(DType::f32, 4, 5, 3, true);
  const std::vector<double> pot = potentials(rng, p, 0.0, false);
  const std::vector<int64_t> lengths = {0, 5, 6, 2};
  const Best got = on_gpu(p, pot, lengths, 2);
  std::vector<int64_t> good = lengths;
  good[0] = good[2] = 1;
  const Best want = on_cpu(p, pot, good, 2);
  for (int64_t b = 0; b < 4; ++b)
    for (int i = 0; i < 2; ++i) {
      const std::size_t at = std::size_t(b * 2 + i);
      if (b == 0 || b == 2) {
        CHECK(std::isnan(got.scores[at]));
        for (int64_t t = 0; t < p.T; ++t) CHECK(got.paths[at * p.T + t] == -1);
      } else {
        CHECK(got.scores[at] == want.scores[at]);
        for (int64_t t = 0; t < p.T; ++t) CHECK(got.paths[at * p.T + t] == want.paths[at * p.T + t]);
      }
    }
  // One position: C paths of score 0, the states in order, then none.
  const Best one = on_gpu(problem(DType::f64, 2, 1, 3, false), {}, {1, 1}, 5);
  CHECK(one.scores == std::vector<double>{0, 0, 0, -INFINITY, -INFINITY, 0, 0, 0, -INFINITY, -INFINITY});
  CHECK(one.paths == std::vector<int32_t>{0, 1, 2, -1, -1, 0, 1, 2, -1, -1});
  // No sequence: nothing to launch, nothing to read.
  const ChainKBest none = ChainKBest::get(problem(DType::f32, 0, 5, 3, false), 4);
  none(nullptr, nullptr, nullptr, nullptr);
  CHECK_THROWS_WITH_AS(ChainKBest::get(p, 4)(nullptr, nullptr, nullptr, nullptr), doctest::Contains("potentials"),
                       std::invalid_argument);
}

namespace {

// The HMM form: its tables stored in the problem's dtype, the kernel's k best and the reference's from the same
// values at the problem's strides.
struct HmmOnGpu {
  DeviceBuffer emissions, transitions, initial, lengths;
  HmmOnGpu(const ChainProblem& p, const HmmTables& h, const std::vector<int64_t>& len)
      : emissions(stored(p.dtype, h.emissions)), transitions(stored(p.dtype, h.transitions)),
        initial(stored(p.dtype, h.initial)), lengths(upload(len)) {}
  HmmInputs inputs() const { return {emissions.get(), transitions.get(), initial.get()}; }
};

Best hmm_on_gpu(const ChainProblem& p, const HmmTables& h, const std::vector<int64_t>& lengths, int k) {
  const DType out = chain_output_dtype(p);
  const HmmOnGpu d(p, h, lengths);
  DeviceBuffer d_scores(std::size_t(p.B * k) * dtype_info(out).size_bytes + 1),
      d_paths(std::size_t(p.B * k * p.T) * 4 + 1);
  d_scores.fill_bytes(0x7f);
  d_paths.fill_bytes(0x7f);
  ChainKBest::get(p, k)(d.inputs(), p.with_lengths ? static_cast<const int64_t*>(d.lengths.get()) : nullptr,
                        d_scores.get(), static_cast<int32_t*>(d_paths.get()));
  Best r{download_as_double(d_scores, out, p.B * k), std::vector<int32_t>(std::size_t(p.B * k * p.T))};
  if (!r.paths.empty()) d_paths.download(r.paths.data(), r.paths.size() * 4);
  return r;
}

Best hmm_on_cpu(const ChainProblem& p, const HmmTables& h, const std::vector<int64_t>& lengths, int k) {
  Best r{std::vector<double>(std::size_t(p.B * k)), std::vector<int32_t>(std::size_t(p.B * k * p.T))};
  ChainProblem wide = p; // the values the kernel reads, held as double
  wide.dtype = DType::f64;
  const HmmTables v = rounded(p.dtype, h);
  reference::chain_kbest(wide, {v.emissions.data(), v.transitions.data(), v.initial.data()},
                         p.with_lengths ? lengths.data() : nullptr, k, r.scores.data(), r.paths.data());
  return r;
}

// An HMM problem; `strided`: transitions read transposed ([C][C] columns first) and emissions with a gap after each
// position's states.
ChainProblem hmm_problem(DType dtype, int64_t B, int64_t T, int64_t C, bool batched, bool strided) {
  ChainProblem p = problem(dtype, B, T, C, true);
  p.form = ChainForm::hmm;
  p.batched_transitions = p.batched_initial = batched;
  if (strided) {
    p.transition_strides[0] = C * C, p.transition_strides[1] = 1, p.transition_strides[2] = C;
    p.emission_strides[0] = T * (C + 3), p.emission_strides[1] = C + 3, p.emission_strides[2] = 1;
  }
  return p;
}

// Tables for hmm_problem: as random_hmm_tables makes them (the emissions as many as their strides span), in eighths
// within ±4 but for f64 (as potentials() does).
HmmTables hmm_tables(std::mt19937_64& rng, const ChainProblem& p, double mask, bool integers) {
  HmmTables h = random_hmm_tables(rng, p, mask, integers);
  if (p.emission_strides[0] != 0) h.emissions = random_values(rng, p.B * p.emission_strides[0], mask, integers);
  for (std::vector<double>* v : {&h.emissions, &h.transitions, &h.initial})
    if (!integers && p.dtype != DType::f64)
      for (double& x : *v)
        if (std::isfinite(x)) x = std::round(std::max(-4.0, std::min(4.0, x)) * 8) / 8;
  return h;
}

} // namespace

TEST_CASE("chain k best, the HMM form: the reference's paths and scores from the tables, every dtype, shared and "
          "per-sequence tables, strides") {
  std::mt19937_64 rng(20261207);
  const struct {
    int64_t B, T, C;
  } shapes[] = {{3, 1, 4},   {4, 2, 3},   {5, 7, 1},   {3, 12, 5}, {3, 20, 16},
                {2, 17, 33}, {2, 30, 64}, {2, 6, 130}, {1, 5, 600}};
  int cases = 0, bad = 0;
  for (const auto& s : shapes)
    for (DType dtype : {DType::f32, DType::f64, DType::bf16})
      for (int k : {1, 3, 16})                          // 3 through the merging network up to 16 states
        for (int variant = 0; variant < 3; ++variant) { // plain, ties, masked
          if (dtype == DType::bf16 && s.C > 64 && k != 3) continue;
          const bool batched = variant != 1, strided = (cases % 3) == 1;
          const ChainProblem p = hmm_problem(dtype, s.B, s.T, s.C, batched, strided);
          if (jb::kbest_shared_bytes(int(s.C), k, dtype_info(chain_output_dtype(p)).size_bytes) >
              unsigned(current_device()->max_shared_per_block_optin))
            continue;
          const HmmTables h = hmm_tables(rng, p, variant == 2 ? 0.3 : 0.0, variant == 1);
          const std::vector<int64_t> lengths = random_lengths(rng, p);
          CAPTURE(dtype_info(dtype).name);
          CAPTURE(s.C);
          CAPTURE(s.T);
          CAPTURE(k);
          CAPTURE(variant);
          CAPTURE(strided);
          const double tol = dtype == DType::f64 && variant != 1 ? 1e-12 : 0.0;
          compare_best("hmm k best", hmm_on_gpu(p, h, lengths, k), hmm_on_cpu(p, h, lengths, k), tol, bad);
          ++cases;
        }
  MESSAGE(cases << " cases of the HMM form against the reference");
  CHECK(bad == 0);
}

TEST_CASE("chain k best, the HMM form: the first path is the HMM plan's Viterbi path; special values; the other "
          "form's call is named") {
  std::mt19937_64 rng(8);
  for (bool integers : {false, true}) {
    ChainProblem p = hmm_problem(DType::f32, 8, 40, 24, integers, false);
    const HmmTables h = hmm_tables(rng, p, 0.1, integers);
    const std::vector<int64_t> lengths = random_lengths(rng, p);
    const HmmOnGpu d(p, h, lengths);
    check_first_is_viterbi(p, hmm_on_gpu(p, h, lengths, 4),
                           [&](const ChainPlan& plan, void* score, int32_t* path, const Workspace& work) {
                             plan(d.inputs(), static_cast<const int64_t*>(d.lengths.get()), score, nullptr, nullptr,
                                  path, nullptr, work);
                           });
  }
  // NaN and +inf in each table, −inf in others: the reference's order, each as the kernel reads it.
  int bad = 0;
  for (DType dtype : {DType::f32, DType::f64})
    for (int k : {3, 6}) {
      const ChainProblem p = hmm_problem(dtype, 4, 6, 5, k == 3, false);
      HmmTables h = hmm_tables(rng, p, 0.2, true);
      std::uniform_int_distribution<std::size_t> e(0, h.emissions.size() - 1), t(0, h.transitions.size() - 1);
      h.emissions[e(rng)] = NAN, h.emissions[e(rng)] = INFINITY, h.transitions[t(rng)] = NAN;
      h.transitions[t(rng)] = INFINITY, h.initial[0] = INFINITY;
      const std::vector<int64_t> lengths = random_lengths(rng, p);
      compare_best(std::string(dtype_info(dtype).name) + " HMM special values, k = " + std::to_string(k),
                   hmm_on_gpu(p, h, lengths, k), hmm_on_cpu(p, h, lengths, k), 0.0, bad);
    }
  CHECK(bad == 0);
  // Lengths outside [1, T]: NaN and −1 for those sequences alone.
  const ChainProblem p = hmm_problem(DType::f32, 3, 5, 3, false, false);
  const HmmTables h = hmm_tables(rng, p, 0.0, false);
  const Best got = hmm_on_gpu(p, h, {0, 5, 6}, 2), want = hmm_on_cpu(p, h, {1, 5, 1}, 2);
  for (int i = 0; i < 2; ++i) {
    CHECK(std::isnan(got.scores[std::size_t(i)]));
    CHECK(std::isnan(got.scores[std::size_t(4 + i)]));
    CHECK(got.scores[std::size_t(2 + i)] == want.scores[std::size_t(2 + i)]);
  }
  // The other form's call, and no sequence.
  const HmmOnGpu d(p, h, {5, 5, 5});
  const ChainKBest hmm = ChainKBest::get(p, 2);
  DeviceBuffer scores(64);
  CHECK_THROWS_WITH_AS(hmm(d.emissions.get(), static_cast<const int64_t*>(d.lengths.get()), scores.get(), nullptr),
                       doctest::Contains("potentials"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(
      ChainKBest::get(problem(DType::f32, 3, 5, 3, true), 2)(d.inputs(), nullptr, scores.get(), nullptr),
      doctest::Contains("hmm"), std::invalid_argument);
  HmmInputs no_initial = d.inputs();
  no_initial.initial = nullptr;
  CHECK_THROWS_WITH_AS(hmm(no_initial, static_cast<const int64_t*>(d.lengths.get()), scores.get(), nullptr),
                       doctest::Contains("hmm.initial"), std::invalid_argument);
  ChainProblem none = p;
  none.B = 0;
  CHECK_NOTHROW(ChainKBest::get(none, 3)(HmmInputs{}, nullptr, nullptr, nullptr));
}
