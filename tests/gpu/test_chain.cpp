// Chains on the GPU against the CPU reference (reference/chain.cpp): the score, the saved and returned messages,
// the Viterbi path and every gradient, on odd sizes, ragged lengths, wide potentials, banded −inf masks, padded
// strides and the edge values; outputs poisoned first so that an element the kernels skip shows.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

#include "chain_arrays.hpp"
#include "expect.hpp"
#include "jitbmm/chain.hpp"
#include "jitbmm/reference.hpp"
#include "precompile.hpp"
#include "runtime/chain_chunked.hpp"
#include "runtime/chain_plan.hpp"
#include "runtime/device_memory.hpp"
#include "runtime/jit.hpp"

using namespace jitbmm;
using test::close;
using test::compare;
using test::download_as_double;
using test::expect_invalid;
using test::upload;
using test::kSavedAt;
using test::saved_at;
using test::Worst;

namespace {

struct Case {
  Semiring semiring;
  DType dtype;
  int64_t B, T, C;
  double spread = 1;       // potentials ~ N(0, spread²)
  bool ragged = false;     // lengths drawn in [1, T]
  bool banded = false;     // potentials[c][p] = −inf where |c − p| > 2
  bool padded = false;     // potentials laid out [B][C][T−1][C + 3] (permuted, with gaps)
  double p_special = 0;    // each potential ±inf or NaN with this probability
  bool no_plus_inf = false; // the specials −inf and NaN only
  bool integers = false;   // small integers: exact sums and many ties (max_plus)
  int cluster = 0;         // the blocks a sequence's recursion is split over; 0: ChainPlan::get's choice
  int64_t chunk = 0;       // the chunked strategy's steps per chunk; 0: ChainPlan::get's choice
  bool stepped = false;    // the stepped strategy, whatever ChainPlan::get takes
  bool quick = false;      // every kernel a quick build (runtime/jit.hpp), as a stand-in's
};

std::string describe(const Case& k) {
  char text[256];
  std::snprintf(text, sizeof text, "%s %s B=%lld T=%lld C=%lld spread=%g%s%s%s%s%s", semiring_info(k.semiring).name,
                dtype_info(k.dtype).name, (long long)k.B, (long long)k.T, (long long)k.C, k.spread,
                k.ragged ? " ragged" : "", k.banded ? " banded" : "", k.padded ? " padded" : "",
                k.p_special > 0 ? " specials" : "", k.integers ? " integers" : "");
  return text + (k.cluster ? " cluster=" + std::to_string(k.cluster) : std::string()) +
         (k.chunk ? " chunk=" + std::to_string(k.chunk) : std::string()) + (k.stepped ? " stepped" : "") +
         (k.quick ? " quick" : "");
}

void run_case(const Case& k, std::mt19937_64& rng, Worst& worst) {
  CAPTURE(describe(k));
  const QuickBuild quick(k.quick); // the plan's kernels, and those its calls load
  ChainProblem p;
  p.semiring = k.semiring;
  p.dtype = k.dtype;
  p.B = k.B;
  p.T = k.T;
  p.C = k.C;
  p.with_lengths = k.ragged;
  const int64_t steps = k.T - 1, C = k.C;
  // Layout: contiguous [B][T−1][C][C], or [B][C][T−1][C + 3] read through strides.
  const int64_t row = k.padded ? C + 3 : C;
  if (k.padded) {
    p.strides[3] = 1;
    p.strides[1] = row;
    p.strides[2] = steps * row;
    p.strides[0] = C * steps * row;
  }
  const int64_t elements = k.B * C * std::max<int64_t>(steps, 0) * row;
  std::vector<unsigned char> pot(std::size_t(std::max<int64_t>(elements, 1)) * dtype_info(k.dtype).size_bytes);
  std::normal_distribution<double> normal(0, k.spread);
  std::uniform_real_distribution<double> u(0, 1);
  std::uniform_int_distribution<int> small(-2, 2);
  int64_t strides[4];
  chain_strides(p, strides);
  for (int64_t i = 0; i < elements; ++i) store_element(k.dtype, pot.data(), i, NAN); // gaps: read, they would show
  for (int64_t b = 0; b < k.B; ++b)
    for (int64_t t = 0; t < steps; ++t)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t q = 0; q < C; ++q) {
          double v = k.integers ? double(small(rng)) : normal(rng);
          if (k.banded && std::abs(c - q) > 2) v = -INFINITY;
          if (k.p_special > 0 && u(rng) < k.p_special) {
            const double r = u(rng);
            v = r < 0.6 ? -INFINITY : r < 0.8 ? (k.no_plus_inf ? -INFINITY : INFINITY) : NAN;
          }
          store_element(k.dtype, pot.data(), b * strides[0] + t * strides[1] + c * strides[2] + q * strides[3], v);
        }
  std::vector<int64_t> lengths;
  if (k.ragged) {
    std::uniform_int_distribution<int64_t> length(1, k.T);
    for (int64_t b = 0; b < k.B; ++b) lengths.push_back(b == 0 ? k.T : length(rng));
  }
  std::vector<double> grad_score(std::size_t(k.B));
  for (double& g : grad_score) g = u(rng) < 0.1 ? 0.0 : normal(rng) / k.spread + 0.5;

  const bool viterbi = k.semiring == Semiring::max_plus;
  std::vector<double> ref_score(std::size_t(k.B)), ref_alpha(std::size_t(k.B * k.T * C)),
      ref_grad(std::size_t(k.B * std::max<int64_t>(steps, 0) * C * C));
  std::vector<int32_t> ref_path(std::size_t(k.B * k.T));
  const int64_t* host_lengths = k.ragged ? lengths.data() : nullptr;
  reference::chain_forward(p, pot.data(), host_lengths, ref_score.data(), ref_alpha.data(),
                           viterbi ? ref_path.data() : nullptr);

  const ChainPlan plan = k.cluster   ? chain_plan_for(p, clustered_chain_spec(p, k.cluster))
                         : k.chunk   ? chain_plan_for(p, chosen_chain_spec(p, *current_device()), k.chunk)
                         : k.stepped ? chain_plan_for(p, ChainSpec{}, 0, false, true)
                                     : ChainPlan::get(p);
  CHECK(plan.chunk() == k.chunk);
  CHECK(std::string(plan.strategy()) ==
        (k.stepped || C > kMaxSequentialChainStates ? "stepped" : k.chunk ? "chunked" : "sequential"));
  CAPTURE(plan.kernel_name());
  // score, alpha and grad_score in the output dtype (f32 for half inputs), the gradient in the inputs'.
  const DType out = chain_output_dtype(p);
  const int bytes = dtype_info(k.dtype).size_bytes, out_bytes = dtype_info(out).size_bytes;
  DeviceBuffer d_pot = upload(pot), d_lengths = upload(lengths);
  DeviceBuffer d_score(std::size_t(k.B) * out_bytes + 1), d_alpha(ref_alpha.size() * out_bytes + 1),
      d_path(ref_path.size() * 4 + 1), d_saved(kSavedAt + plan.saved_bytes() + 1), d_grad(ref_grad.size() * bytes + 1);
  for (DeviceBuffer* d : {&d_score, &d_alpha}) d->fill_bytes(test::poison_byte(out));
  d_grad.fill_bytes(test::poison_byte(k.dtype));
  d_path.fill_bytes(test::kIndexPoison);
  d_saved.fill_bytes(0xff); // NaN: a backward that reads what the forward did not write shows
  std::vector<unsigned char> g_bytes(grad_score.size() * out_bytes + 1);
  for (std::size_t b = 0; b < grad_score.size(); ++b) store_element(out, g_bytes.data(), int64_t(b), grad_score[b]);
  for (std::size_t b = 0; b < grad_score.size(); ++b) grad_score[b] = load_element(out, g_bytes.data(), int64_t(b));
  DeviceBuffer d_g = upload(g_bytes);
  const auto* d_len = k.ragged ? static_cast<const int64_t*>(d_lengths.get()) : nullptr;
  plan(d_pot.get(), d_len, d_score.get(), viterbi ? nullptr : saved_at(d_saved), d_alpha.get(),
       viterbi ? static_cast<int32_t*>(d_path.get()) : nullptr);
  plan.backward(d_pot.get(), d_len, viterbi ? nullptr : saved_at(d_saved),
                viterbi ? static_cast<const int32_t*>(d_path.get()) : nullptr, d_g.get(), d_grad.get());
  const std::vector<double> score = download_as_double(d_score, out, k.B);
  const std::vector<double> alpha = download_as_double(d_alpha, out, int64_t(ref_alpha.size()));
  const std::vector<double> grad = download_as_double(d_grad, k.dtype, int64_t(ref_grad.size()));
  std::vector<int32_t> path(ref_path.size());
  if (viterbi && !path.empty()) d_path.download(path.data(), path.size() * 4);

  // The reference's gradient (for max_plus, of the reference's path: below, of the GPU's where that differs).
  reference::chain_backward(p, pot.data(), host_lengths, grad_score.data(), ref_grad.data());
  const bool wide = k.dtype == DType::f64;
  // f32 sums of potentials of size s round by about s·2^-24 a step: the gradients' exponents carry that error, so
  // their tolerance grows with the spread (the contract's 1e-5 at spread 1). Half inputs are computed in f32, and
  // only their gradients are rounded to the half type.
  const double rounding = test::half_rounding(k.dtype);
  const double score_tol = wide ? 1e-12 : 1e-6, grad_tol = (wide ? 1e-11 : 1e-5) * k.spread + rounding;
  // alpha = offset + rel: rel, of the messages' spread in size, rounds in the dtype, so its error is relative to
  // that size where the value is smaller (the floor of the comparison).
  const double alpha_tol = wide ? 1e-12 : 1e-5, alpha_floor = std::max(1.0, k.spread);
  int bad = 0;
  compare("score", score, ref_score, score_tol, bad, &worst.score);
  compare("alpha", alpha, ref_alpha, alpha_tol, bad, &worst.alpha, alpha_floor);
  if (viterbi && ((k.stepped && C <= kMaxSequentialChainStates) || (k.chunk && k.integers))) {
    // The stepped strategy's products form the sequential kernels' terms and keep their winners: the same scores and
    // paths, bit for bit. So do the chunks where the arithmetic is exact (integers, and their many ties): their first
    // messages come from products that sum the steps in another order than the recursion.
    const ChainPlan sequential = chain_plan_for(p, chosen_chain_spec(p, *current_device()));
    DeviceBuffer s_score(std::size_t(k.B) * out_bytes + 1), s_path(ref_path.size() * 4 + 1);
    sequential(d_pot.get(), d_len, s_score.get(), nullptr, nullptr, static_cast<int32_t*>(s_path.get()));
    std::vector<int32_t> seq_path(ref_path.size());
    if (!seq_path.empty()) s_path.download(seq_path.data(), seq_path.size() * 4);
    test::check_same_as_sequential(plan.strategy(), score, path, download_as_double(s_score, out, k.B), seq_path, k.B,
                                   k.T, bad);
  }
  if (viterbi && k.integers && k.p_special == 0) test::check_smallest_ties(path, ref_path, ref_score, k.B, k.T, bad);
  if (!viterbi) { // the forward without saved is another entry point with its own block: the same contract
    d_score.fill_bytes(test::poison_byte(out));
    d_alpha.fill_bytes(test::poison_byte(out));
    plan(d_pot.get(), d_len, d_score.get(), nullptr, d_alpha.get());
    compare("without saved: score", download_as_double(d_score, out, k.B), ref_score, score_tol, bad);
    compare("without saved: alpha", download_as_double(d_alpha, out, int64_t(ref_alpha.size())), ref_alpha, alpha_tol,
            bad, nullptr, alpha_floor);
    // The chunked strategy's alpha comes from the sequential forward beside it; alone, it computes the score.
    d_score.fill_bytes(test::poison_byte(out));
    plan(d_pot.get(), d_len, d_score.get());
    compare("score alone", download_as_double(d_score, out, k.B), ref_score, score_tol, bad);
  }
  bool same_path = true;
  for (std::size_t i = 0; i < path.size(); ++i) same_path = same_path && path[i] == ref_path[i];
  if (viterbi && !same_path) {
    // Only an equally good path (to the score's tolerance) may differ from the reference's: a state at every
    // position before the sequence's length, −1 after it.
    for (int64_t b = 0; b < k.B; ++b) {
      const int64_t L = k.ragged ? lengths[b] : k.T;
      const int32_t* s = path.data() + b * k.T;
      if (ref_score[b] == -INFINITY) { // no path: −1 throughout
        if (!std::all_of(s, s + k.T, [](int32_t x) { return x == -1; }) && bad++ < 5)
          FAIL_CHECK("sequence " << b << " has no path, but its path is not −1 throughout");
        continue;
      }
      if (!std::isfinite(ref_score[b])) continue;
      if (!test::valid_path(s, L, k.T, C)) {
        if (bad++ < 5) FAIL_CHECK("path of sequence " << b << " is not a state a position up to its length");
        continue;
      }
      double sum = 0;
      for (int64_t t = 0; t + 1 < L; ++t)
        sum += load_element(k.dtype, pot.data(),
                            b * strides[0] + t * strides[1] + s[t + 1] * strides[2] + s[t] * strides[3]);
      if (!close(sum, ref_score[b], score_tol) && bad++ < 5)
        FAIL_CHECK("path of sequence " << b << " scores " << sum << ", the best " << ref_score[b]);
    }
  }
  // max_plus's gradient is grad_score on each edge of the path the forward wrote, which the backward reads: where
  // that path is another, equally good one (checked above), the reference's gradient is that path's, as
  // reference::chain_backward forms it for its own.
  std::vector<double> want = ref_grad;
  if (viterbi && !same_path) {
    std::fill(want.begin(), want.end(), 0.0);
    for (int64_t b = 0; b < k.B; ++b) {
      const int64_t L = k.ragged ? lengths[b] : k.T;
      const int32_t* s = path.data() + b * k.T;
      if (grad_score[b] == 0) continue;
      for (int64_t t = 0; t + 1 < L; ++t) // each step on its own, as the kernels read it
        if (s[t] >= 0 && s[t] < C && s[t + 1] >= 0 && s[t + 1] < C)
          want[std::size_t(((b * steps + t) * C + s[t + 1]) * C + s[t])] = grad_score[b];
    }
  }
  for (std::size_t i = 0; i < grad.size(); ++i) {
    if (!close(grad[i], want[i], viterbi ? rounding : grad_tol) && bad++ < 5)
      FAIL_CHECK("grad[" << i << "] = " << grad[i] << ", reference " << want[i]);
    if (std::isfinite(want[i])) worst.grad = std::max(worst.grad, std::fabs(grad[i] - want[i]));
  }
  CHECK(bad == 0);
}

// A shape at spreads 1, 10, 50 and 1000 (a step's terms thousands apart, where one term decides each sum), as it is
// and with ragged lengths and a banded mask.
void run_spreads(Semiring s, DType d, int64_t B, int64_t T, int64_t C, std::mt19937_64& rng, Worst& worst) {
  for (double spread : {1.0, 10.0, 50.0, 1000.0}) {
    Case k{s, d, B, T, C, spread};
    run_case(k, rng, worst);
    k.ragged = true;
    k.banded = C > 3;
    run_case(k, rng, worst);
  }
}

// The chunked strategy's cases of a shape in chunks of `chunk`: at each spread as it is and ragged with a banded
// mask, padded strides, −inf and NaN (+inf: a product may meet +inf ⊗ −inf where the recursion does not), and for
// max_plus integer ties, plain and ragged (which run_case compares with the sequential kernels bit for bit).
void run_chunked(Semiring s, DType d, int64_t B, int64_t T, int64_t C, int64_t chunk,
                 std::initializer_list<double> spreads, std::mt19937_64& rng, Worst& worst) {
  for (double spread : spreads) {
    Case k{s, d, B, T, C, spread};
    k.chunk = chunk;
    run_case(k, rng, worst);
    k.ragged = true;
    k.banded = C > 3;
    run_case(k, rng, worst);
  }
  Case k{s, d, B, T, C, 1, true, false, true}; // padded strides
  k.chunk = chunk;
  run_case(k, rng, worst);
  k.padded = false;
  k.p_special = 0.05;
  k.no_plus_inf = true;
  run_case(k, rng, worst);
  if (s != Semiring::max_plus) return;
  Case ties{s, d, B, T, C};
  ties.integers = true;
  ties.chunk = chunk;
  run_case(ties, rng, worst);
  ties.ragged = true;
  run_case(ties, rng, worst);
}

// The closing message of one semiring's and dtype's cases.
void report(Semiring s, DType d, const Worst& worst) {
  MESSAGE(std::string(semiring_info(s).name) << " " << std::string(dtype_info(d).name)
                                             << ": worst relative error of the score " << worst.score << ", of alpha "
                                             << worst.alpha << ", worst absolute error of a gradient " << worst.grad);
}

} // namespace

TEST_CASE("chains: every semiring and dtype against the float64 reference, odd sizes, ragged, wide, masked") {
  std::mt19937_64 rng(20261127);
  const struct {
    int64_t B, T, C;
  } shapes[] = {{1, 1, 1},   {2, 5, 1},    {2, 2, 2},   {3, 5, 31},   {2, 7, 33},  {1, 4, 129},
                {2, 3, 257}, {1, 2, 1000}, {3, 40, 64}, {2, 300, 32}, {1, 3, 1024}};
  const int64_t special_states[] = {3, 31, 64};
  std::vector<int64_t> states(std::begin(special_states), std::end(special_states));
  for (const auto& sh : shapes) states.push_back(sh.C);
  for (Semiring s : {Semiring::log, Semiring::max_plus}) test::precompile_chains(s, ChainForm::crf, states);
  for (Semiring s : {Semiring::log, Semiring::max_plus})
    for (DType d : {DType::f32, DType::f64}) {
      Worst worst;
      for (const auto& sh : shapes) run_spreads(s, d, sh.B, sh.T, sh.C, rng, worst);
      for (int64_t C : special_states) {
        run_case(Case{s, d, 4, 9, C, 1, true, false, true}, rng, worst);      // padded strides
        run_case(Case{s, d, 4, 9, C, 1, true, false, false, 0.05}, rng, worst); // ±inf, NaN
        Case ties{s, d, 4, 9, C};
        ties.integers = true;
        run_case(ties, rng, worst);
      }
      report(s, d, worst);
    }
}

// The stepped strategy (each step B products of one sequence's messages and its step's potentials), every semiring
// and dtype, odd sizes up to beyond the sequential kernels' 1024 states, ragged, masked, padded, the edge values and
// ties.
TEST_CASE("chains: the stepped strategy against the float64 reference") {
  std::mt19937_64 rng(20261203);
  const struct {
    int64_t B, T, C;
  } shapes[] = {{1, 1, 1}, {2, 5, 1}, {2, 2, 2}, {3, 5, 33}, {2, 4, 257}, {2, 3, 1025}, {1, 2, 2048}};
  for (Semiring s : {Semiring::log, Semiring::max_plus})
    for (DType d : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
      Worst worst;
      for (const auto& sh : shapes)
        for (double spread : {1.0, 10.0}) {
          if (d != DType::f32 && sh.C > 1100) continue; // as the HMM form's stepped cases
          Case k{s, d, sh.B, sh.T, sh.C, spread};
          k.stepped = true;
          run_case(k, rng, worst);
          k.ragged = true;
          k.banded = sh.C > 3;
          run_case(k, rng, worst);
        }
      for (int64_t C : {3, 31}) {
        Case padded{s, d, 4, 9, C, 1, true, false, true};
        Case specials{s, d, 4, 9, C, 1, true, false, false, 0.05};
        Case ties{s, d, 4, 9, C};
        ties.integers = true;
        for (Case* k : {&padded, &specials, &ties}) {
          k->stepped = true;
          run_case(*k, rng, worst);
        }
      }
      Case ties{s, d, 3, 5, 1025, 1, true}; // beyond the sequential kernels' states: the smallest state wins
      ties.integers = ties.stepped = true;
      run_case(ties, rng, worst);
      report(s, d, worst);
    }
}

// Quick builds, the kernels a stand-in runs while its plan's optimised ones are built (NVRTC's --Ofast-compile): the
// same contract as those, in the sequential kernels (a stand-in of the sequential and the chunked strategies) and the
// stepped strategy (its own stand-in's form), at odd sizes, ragged and masked, the edge values and ties.
TEST_CASE("chains: quick builds against the float64 reference, sequential and stepped") {
  std::mt19937_64 rng(20261204);
  const struct {
    int64_t B, T, C;
  } shapes[] = {{3, 5, 31}, {2, 40, 64}, {1, 4, 129}, {2, 3, 1024}};
  for (Semiring s : {Semiring::log, Semiring::max_plus})
    for (DType d : {DType::f32, DType::bf16}) {
      Worst worst;
      for (bool stepped : {false, true}) {
        for (const auto& sh : shapes) {
          Case k{s, d, sh.B, sh.T, sh.C, 10.0};
          k.quick = true, k.stepped = stepped;
          run_case(k, rng, worst);
          k.ragged = true;
          k.banded = true;
          run_case(k, rng, worst);
        }
        Case specials{s, d, 4, 9, 33, 1, true, false, false, 0.05};
        Case ties{s, d, 4, 9, 33};
        ties.integers = true;
        for (Case* k : {&specials, &ties}) {
          k->quick = true, k->stepped = stepped;
          run_case(*k, rng, worst);
        }
      }
      report(s, d, worst);
    }
}

// f16 and bf16 inputs, computed in f32: the same contract on the values they hold (score and alpha to f32's
// tolerance, the gradients to f32's plus their rounding to the half type), in the plan's choice of blocks and in
// clusters of 2 and 8 where those fit.
TEST_CASE("chains: f16 and bf16 potentials against the float64 reference, in one block and in clusters") {
  std::mt19937_64 rng(20261129);
  const struct {
    int64_t B, T, C;
  } shapes[] = {{1, 1, 1}, {3, 5, 31}, {2, 7, 33}, {3, 40, 64}, {1, 4, 129}, {2, 3, 257}, {1, 3, 1024}};
  std::vector<int64_t> states;
  for (const auto& sh : shapes) states.push_back(sh.C);
  for (Semiring s : {Semiring::log, Semiring::max_plus})
    test::precompile_chains(s, ChainForm::crf, states, {DType::f16, DType::bf16});
  const bool clusters = cluster_sms(*current_device()) > 0;
  if (!clusters)
    MESSAGE("clusters skipped: " << current_device()->arch_and_level() << " lacks "
                                 << missing_features(kClusters, {}));
  for (Semiring s : {Semiring::log, Semiring::max_plus})
    for (DType d : {DType::f16, DType::bf16}) {
      Worst worst;
      for (const auto& sh : shapes) {
        run_spreads(s, d, sh.B, sh.T, sh.C, rng, worst);
        Case k{s, d, sh.B, sh.T, sh.C, 1, true, false, true}; // padded strides
        run_case(k, rng, worst);
        k.padded = false;
        k.p_special = 0.05; // ±inf, NaN
        run_case(k, rng, worst);
        k.p_special = 0;
        k.integers = true; // ties
        run_case(k, rng, worst);
        for (int cluster : {2, 8}) {
          ChainProblem p;
          p.semiring = s;
          p.dtype = d;
          p.B = sh.B;
          p.T = sh.T;
          p.C = sh.C;
          if (!clusters || sh.C < 64 || !clustered_chain_spec(p, cluster).registers_fit()) continue;
          Case c{s, d, sh.B, sh.T, sh.C, 10, true, true};
          c.cluster = cluster;
          run_case(c, rng, worst);
        }
      }
      report(s, d, worst);
    }
}

// The plans above split a sequence over the cluster their batch and C call for; here each state count runs in one
// block per sequence and in every cluster size whose registers fit, down to clusters with blocks of no state.
TEST_CASE("chains: one block per sequence and every cluster size against the float64 reference" *
          doctest::test_suite(test::kNeedsClusters)) {
  std::mt19937_64 rng(20261128);
  std::vector<Case> cases;
  std::vector<ChainSpec> specs;
  for (const auto& [p, cluster] : test::cluster_runs(ChainForm::crf)) {
    specs.push_back(clustered_chain_spec(p, cluster));
    Case k{p.semiring, p.dtype, p.B, p.T, p.C, 10};
    k.cluster = cluster;
    cases.push_back(k);
    k.ragged = k.banded = true;
    cases.push_back(k);
    k.ragged = k.banded = false;
    k.p_special = 0.05;
    cases.push_back(k);
    k.p_special = 0;
    k.spread = 1;
    k.integers = true;
    cases.push_back(k);
  }
  if (cases.empty()) return;
  test::precompile(*current_device(), specs);
  Worst worst;
  for (const Case& k : cases) run_case(k, rng, worst);
  MESSAGE(cases.size() << " cases, " << specs.size() << " modules: worst relative error of the score " << worst.score
                       << ", of alpha " << worst.alpha << ", worst absolute error of a gradient " << worst.grad);
}

// The chunked strategy (runtime/chain_chunked.hpp): the shortest chunks whose products fit in saved, and one
// chunk of the whole chain (the log-depth scan), on lengths that leave the last chunk part filled.
TEST_CASE("chains: the chunked strategy against the float64 reference, in short chunks and in one") {
  std::mt19937_64 rng(20261130);
  const struct {
    DType dtype;
    int64_t B, T, C;
  } shapes[] = {{DType::f32, 1, 3, 1},   {DType::f32, 3, 5, 3},    {DType::f32, 2, 40, 31},
                {DType::f32, 1, 300, 33}, {DType::f32, 3, 77, 64}, {DType::f32, 2, 130, 129},
                {DType::f64, 3, 5, 3},   {DType::f64, 3, 77, 64}, {DType::bf16, 2, 40, 31},
                {DType::bf16, 2, 130, 129}};
  // Their modules on every core first: the chain's (and its chain of chunks', in the accumulator type), the
  // chunks' own, and the products' kernels with their gradients'.
  const auto device = current_device();
  std::vector<ChainProblem> chains;
  std::vector<Problem> products;
  for (const auto& sh : shapes) {
    ChainProblem p;
    p.dtype = sh.dtype;
    p.B = sh.B;
    p.T = sh.T;
    p.C = sh.C;
    chains.push_back(p);
    p.dtype = chain_output_dtype(p);
    chains.push_back(p);
    Problem q;
    q.dtype = p.dtype;
    q.shape = Shape{1, sh.C, sh.C, sh.C};
    q.a_strides = q.b_strides = Strides{2 * sh.C * sh.C, sh.C, 1};
    products.push_back(q);
  }
  test::precompile(*device, chains);
  test::on_all_cores(chains.size(), [&](std::size_t i) {
    load_generated(*device, emit_chunk_kernel(Semiring::log, chains[i].dtype, int(chains[i].C)));
    SemiringBMM::get(products[i / 2]).backward_workspace_bytes(true, true);
  });
  for (DType d : {DType::f32, DType::f64, DType::bf16}) {
    Worst worst;
    for (const auto& sh : shapes) {
      if (sh.dtype != d) continue;
      ChainProblem p;
      p.dtype = d;
      p.B = sh.B;
      p.T = sh.T;
      p.C = sh.C;
      const std::vector<int64_t> chunks = test::tested_chunks(p); // the shortest that fits, and the whole chain
      REQUIRE(chunk_unfit(p, chunks.back()).empty());
      for (int64_t chunk : chunks)
        run_chunked(Semiring::log, d, sh.B, sh.T, sh.C, chunk, {1.0, 10.0, 50.0}, rng, worst); // +inf below
    }
    report(Semiring::log, d, worst);
  }
  // The products combine steps in another order than the recursion: +inf ⊗ −inf inside one (NaN, as the bmm log
  // semiring gives it) can turn a score the recursion sums to +inf into NaN. Never into a number.
  {
    ChainProblem p;
    p.B = 2;
    p.T = 9;
    p.C = 4;
    p.with_lengths = true;
    const ChainPlan plan = chain_plan_for(p, chosen_chain_spec(p, *current_device()), 8);
    std::vector<float> pot(std::size_t(p.B * (p.T - 1) * p.C * p.C), 0.25f);
    pot[5] = INFINITY;
    pot[16 * 8 + 16 * 2 + 3] = INFINITY;
    DeviceBuffer d_pot = upload(pot), d_len = upload(std::vector<int64_t>{9, 5}), score(8);
    plan(d_pot.get(), static_cast<const int64_t*>(d_len.get()), score.get());
    float s[2];
    score.download(s, sizeof s);
    for (float x : s) CHECK((std::isnan(x) || x == INFINITY));
  }
  ChainProblem p;
  p.T = 9;
  p.C = 4;
  p.B = 1;
  expect_invalid([&] { chain_plan_for(p, default_chain_spec(p), 3); }, "chunk: must be a power of two");
  ChainProblem viterbi = p;
  viterbi.semiring = Semiring::max_plus;
  viterbi.form = ChainForm::hmm;
  expect_invalid([&] { chain_plan_for(viterbi, default_chain_spec(viterbi), 3); }, "chunk: must be a power of two");
  ChainProblem many = p;
  many.C = kMaxSequentialChainStates + 1;
  expect_invalid([&] { chain_plan_for(many, ChainSpec{}, 4); }, "chunk: chains of at most 1024 states");
  ChainProblem wide = p;
  wide.C = 64;
  expect_invalid([&] { chain_plan_for(wide, default_chain_spec(wide), 2); }, "chunk: the products");
}

// The best path in chunks (max_plus: the chunks' products, the chain of them, every chunk's steps again and the
// back-pointers followed through the chunks): chunks of 2 steps, of 8, and one of the whole chain, on odd sizes,
// ragged lengths (which end inside a chunk, or at its first position), masks, strides, the edge values and ties,
// whose paths must be the sequential kernels'.
TEST_CASE("chains: the best path in chunks against the float64 reference and the sequential kernels") {
  std::mt19937_64 rng(20261202);
  const struct {
    DType dtype;
    int64_t B, T, C;
  } shapes[] = {{DType::f32, 1, 2, 1},    {DType::f32, 3, 5, 3},   {DType::f32, 2, 40, 31}, {DType::f32, 1, 300, 33},
                {DType::f32, 5, 77, 64},  {DType::f32, 2, 30, 129}, {DType::f64, 3, 77, 64}, {DType::bf16, 2, 40, 31},
                {DType::f16, 2, 33, 64}};
  const auto device = current_device();
  std::vector<ChainProblem> chains;
  std::vector<Problem> products;
  for (const auto& sh : shapes) {
    ChainProblem p;
    p.semiring = Semiring::max_plus;
    p.dtype = sh.dtype;
    p.B = sh.B;
    p.T = sh.T;
    p.C = sh.C;
    chains.push_back(p);
    Problem q;
    q.semiring = Semiring::max_plus;
    q.dtype = chain_output_dtype(p);
    q.shape = Shape{1, sh.C, sh.C, sh.C};
    q.a_strides = q.b_strides = Strides{2 * sh.C * sh.C, sh.C, 1};
    products.push_back(q);
  }
  test::precompile(*device, chains);
  test::on_all_cores(chains.size(), [&](std::size_t i) {
    load_generated(*device, emit_chunk_kernel(Semiring::max_plus, chains[i].dtype, int(chains[i].C)));
    SemiringBMM::get(products[i]);
  });
  for (DType d : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    Worst worst;
    for (const auto& sh : shapes) {
      if (sh.dtype != d) continue;
      ChainProblem p;
      p.semiring = Semiring::max_plus, p.dtype = d, p.B = sh.B, p.T = sh.T, p.C = sh.C;
      for (int64_t chunk : test::tested_chunks(p)) // 2, 8 and the whole chain
        run_chunked(Semiring::max_plus, d, sh.B, sh.T, sh.C, chunk, {1.0, 10.0}, rng, worst);
    }
    report(Semiring::max_plus, d, worst);
  }
}

TEST_CASE("chains: B = 0 launches nothing; T = 1 scores log C or 0; bad arguments name themselves") {
  ChainProblem p;
  p.B = 0;
  p.T = 4;
  p.C = 5;
  const ChainPlan empty = ChainPlan::get(p);
  CHECK_NOTHROW(empty(nullptr, nullptr, nullptr));
  CHECK(empty.kernel_name().empty());

  p.B = 2;
  const ChainPlan plan = ChainPlan::get(p);
  DeviceBuffer pot(2 * 3 * 25 * 4), score(8), saved(plan.saved_bytes());
  expect_invalid([&] { plan(nullptr, nullptr, score.get()); }, "potentials");
  expect_invalid([&] { plan(pot.get(), nullptr, nullptr); }, "score");
  int64_t fake = 0;
  expect_invalid([&] { plan(pot.get(), &fake, score.get()); }, "lengths");
  DeviceBuffer path(2 * 4 * 4);
  expect_invalid([&] { plan(pot.get(), nullptr, score.get(), nullptr, nullptr, static_cast<int32_t*>(path.get())); },
                 "path");
  expect_invalid([&] { plan.backward(pot.get(), nullptr, nullptr, nullptr, score.get(), pot.get()); }, "saved");
  expect_invalid([&] { plan(static_cast<char*>(pot.get()) + 1, nullptr, score.get()); }, "potentials");

  p.T = 1;
  const ChainPlan single = ChainPlan::get(p);
  DeviceBuffer one(8);
  one.fill_bytes(0xff);
  single(nullptr, nullptr, one.get());
  float host[2];
  one.download(host, sizeof host);
  CHECK(host[0] == doctest::Approx(std::log(5.0)));
  CHECK(host[1] == doctest::Approx(std::log(5.0)));
}

TEST_CASE("chains: a length outside [1, T] gives a NaN score and NaN gradients, never a read past the tensor") {
  ChainProblem p;
  p.B = 2;
  p.T = 5;
  p.C = 4;
  p.with_lengths = true;
  // The sequential kernels (chunk 0), the chunked strategy, and the stepped one (−1).
  auto plan_for = [](const ChainProblem& q, int64_t chunk) {
    return chunk < 0 ? chain_plan_for(q, ChainSpec{}, 0, false, true, StepKernel::products)
                     : chain_plan_for(q, chosen_chain_spec(q, *current_device()), chunk);
  };
  for (int64_t chunk : {0, 4, -1}) {
    CAPTURE(chunk);
    const ChainPlan plan = plan_for(p, chunk);
    const std::size_t steps = 2 * 4 * 16;
    std::vector<float> pot(steps, 0.5f);
    DeviceBuffer d_pot = upload(pot), d_len = upload(std::vector<int64_t>{5, 7}), score(8),
                 saved(plan.saved_bytes()), grad(pot.size() * 4), g = upload(std::vector<float>{1, 1});
    const auto* len = static_cast<const int64_t*>(d_len.get());
    plan(d_pot.get(), len, score.get(), saved.get());
    plan.backward(d_pot.get(), len, saved.get(), nullptr, g.get(), grad.get());
    float s[2];
    score.download(s, sizeof s);
    CHECK(std::isfinite(s[0]));
    CHECK(std::isnan(s[1]));
    std::vector<float> gr(pot.size());
    grad.download(gr.data(), gr.size() * 4);
    CHECK(std::all_of(gr.begin() + steps / 2, gr.end(), [](float x) { return std::isnan(x); }));
    CHECK(std::none_of(gr.begin(), gr.begin() + steps / 2, [](float x) { return std::isnan(x); }));
  }
  // The best path, in each strategy: a NaN score and no state (−1) for the bad length.
  ChainProblem viterbi = p;
  viterbi.semiring = Semiring::max_plus;
  for (int64_t chunk : {0, 2, 4, -1}) {
    CAPTURE(chunk);
    const ChainPlan plan = plan_for(viterbi, chunk);
    std::vector<float> pot(2 * 4 * 16, 0.5f);
    DeviceBuffer d_pot = upload(pot), d_len = upload(std::vector<int64_t>{5, 7}), score(8), path(2 * 5 * 4);
    path.fill_bytes(0x7f);
    plan(d_pot.get(), static_cast<const int64_t*>(d_len.get()), score.get(), nullptr, nullptr,
         static_cast<int32_t*>(path.get()));
    float s[2];
    score.download(s, sizeof s);
    CHECK(s[0] == doctest::Approx(2.0)); // four steps of 0.5
    CHECK(std::isnan(s[1]));
    int32_t states[10];
    path.download(states, sizeof states);
    for (int t = 0; t < 5; ++t) CHECK(states[t] == 0); // every path scores 2: ties go to the smallest state
    for (int t = 5; t < 10; ++t) CHECK(states[t] == -1);
  }
}

TEST_CASE("chains: a best path's backward given states outside [0, C) puts no gradient at their steps") {
  ChainProblem p;
  p.semiring = Semiring::max_plus;
  p.B = 1, p.T = 5, p.C = 4;
  const ChainPlan plan = ChainPlan::get(p);
  // Only the step 0 → 1 (states 1 → 2) is an edge; the others meet the states 4 (C) and 2^30.
  DeviceBuffer d_pot = upload(std::vector<float>(4 * 16, 0.5f)),
               path = upload(std::vector<int32_t>{1, 2, 4, 1 << 30, 3}), g = upload(std::vector<float>{2}),
               grad(4 * 16 * 4);
  grad.fill_bytes(0x7f);
  plan.backward(d_pot.get(), nullptr, nullptr, static_cast<const int32_t*>(path.get()), g.get(), grad.get());
  std::vector<float> gr(4 * 16);
  grad.download(gr.data(), gr.size() * 4);
  for (int t = 0; t < 4; ++t)
    for (int e = 0; e < 16; ++e) {
      CAPTURE(t);
      CAPTURE(e);
      CHECK(gr[t * 16 + e] == (t == 0 && e == 2 * 4 + 1 ? 2.0f : 0.0f)); // [to][from]
    }
}

TEST_CASE("chains: the saving forward writes every byte of saved, past the lengths and at odd sizes too") {
  // Two buffers poisoned differently must come back equal, byte for byte. Odd B·T·C puts the pieces of f32
  // messages off an 8-byte multiple; 130 states split over clusters where the device has them.
  std::mt19937_64 rng(20261128);
  std::normal_distribution<double> normal(0, 3);
  const std::vector<int64_t> lengths = {7, 1, 4};
  for (ChainForm form : {ChainForm::crf, ChainForm::hmm})
    for (DType dtype : {DType::f32, DType::f64, DType::bf16})
      for (int64_t C : {3, 130}) {
        ChainProblem p;
        p.form = form;
        p.dtype = dtype;
        p.B = 3;
        p.T = 7;
        p.C = C;
        p.with_lengths = true;
        INFO((form == ChainForm::hmm ? "hmm " : "crf ") << std::string(dtype_info(dtype).name) << " C = " << C);
        auto random = [&](int64_t n) {
          std::vector<unsigned char> bytes(std::size_t(n) * dtype_info(dtype).size_bytes);
          for (int64_t i = 0; i < n; ++i) store_element(dtype, bytes.data(), i, normal(rng));
          return upload(bytes);
        };
        const ChainPlan plan = ChainPlan::get(p);
        const DeviceBuffer pot = random(p.B * (p.T - 1) * C * C), em = random(p.B * p.T * C), tr = random(C * C),
                           init = random(C), len = upload(lengths);
        DeviceBuffer score(p.B * 8), zeros(plan.saved_bytes()), ones(plan.saved_bytes());
        zeros.fill_bytes(0);
        ones.fill_bytes(0xff);
        const auto* d_len = static_cast<const int64_t*>(len.get());
        for (DeviceBuffer* saved : {&zeros, &ones}) {
          if (form == ChainForm::hmm)
            plan(HmmInputs{em.get(), tr.get(), init.get()}, d_len, score.get(), saved->get());
          else
            plan(pot.get(), d_len, score.get(), saved->get());
        }
        std::vector<unsigned char> a(plan.saved_bytes()), b(plan.saved_bytes());
        zeros.download(a.data(), a.size());
        ones.download(b.data(), b.size());
        std::size_t differ = 0;
        for (std::size_t i = 0; i < a.size(); ++i) differ += a[i] != b[i];
        CHECK_MESSAGE(differ == 0, differ << " of " << a.size() << " bytes of saved were not written");
      }
}
