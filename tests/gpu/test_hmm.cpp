// The HMM form on the GPU against the CPU reference (reference/hmm.cpp, itself checked against the CRF reference on
// formed potentials): score, messages, the Viterbi path and the three tables' gradients, shared and batched
// tables, on odd sizes, ragged lengths, wide tables, banded −inf transitions, padded strides and the edge values;
// outputs poisoned first so that an element the kernels skip shows.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
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
#include "runtime/hmm_sums.hpp"
#include "templates/chain/edge_params.cuh"
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
  double spread = 1;        // every table ~ N(0, spread²)
  bool ragged = false;      // lengths drawn in [1, T]
  bool banded = false;      // transitions[c][p] = −inf where |c − p| > 2
  bool batched = false;     // transitions [B][C][C] and initial [B][C]
  bool padded = false;      // every table read through strides with gaps
  double p_special = 0;     // each emission ±inf or NaN with this probability (−inf only with minus_inf)
  bool minus_inf = false;
  bool integers = false;    // small integers: exact sums and many ties (max_plus)
  int cluster = 0;          // the blocks a sequence's recursion is split over; 0: ChainPlan::get's choice
  bool stepped = false;     // the stepped strategy, whatever ChainPlan::get takes
  StepKernel steps = StepKernel::rule; // its form (runtime/chain_stepped.hpp)
  int64_t chunk = 0;        // the chunked strategy's steps per chunk (max_plus); 0: ChainPlan::get's choice
  bool nan_grad = false;    // the last sequence's grad_score is NaN
  // grad_score's signs: both (mixed), or one (a tenth of them 0 in every kind): the log backward of a shared table
  // runs a second product of the transitions' gradient only where grad_score has both.
  enum class Signs { mixed, positive, negative, zero } signs = Signs::mixed;
  bool dead_state = false;  // no transition into or out of state 0 (−inf): a table's row and column of −inf alone
  // Left to right (no move to a smaller state) with the first position's lower half of the states `far` below the
  // rest and the last position's upper half 3·far below: the paths run through states whose every source lies far
  // below the first messages' largest (2^-126 of it in f32 at far = 100, 2^-1022 in f64 at 1000).
  bool far_sources = false;
  double far = 0;
  bool quick = false;       // every kernel a quick build (runtime/jit.hpp), as a stand-in's
};

// Whether the fused steps compute a shared table's HMM of this semiring and dtype.
bool fused_steps_apply_to(Semiring s, DType d) {
  ChainProblem p;
  p.semiring = s;
  p.dtype = d;
  p.form = ChainForm::hmm;
  return fused_steps_apply(p);
}

std::string describe(const Case& k) {
  char text[256];
  std::snprintf(text, sizeof text, "%s %s B=%lld T=%lld C=%lld spread=%g%s%s%s%s%s%s%s", semiring_info(k.semiring).name,
                dtype_info(k.dtype).name, (long long)k.B, (long long)k.T, (long long)k.C, k.spread,
                k.ragged ? " ragged" : "", k.banded ? " banded" : "", k.batched ? " batched" : "",
                k.padded ? " padded" : "", k.p_special > 0 ? (k.minus_inf ? " -inf" : " specials") : "",
                k.integers ? " integers" : "",
                k.dead_state    ? " dead_state"
                : k.far_sources ? " far_sources"
                                : "");
  const char* form = k.steps == StepKernel::fused            ? " fused"
                     : k.steps == StepKernel::fused_streamed ? " fused streamed"
                     : k.steps == StepKernel::products       ? " products"
                                                             : "";
  return text + (k.cluster ? " cluster=" + std::to_string(k.cluster) : std::string()) +
         (k.stepped ? std::string(" stepped") + form : std::string()) +
         (k.chunk ? " chunk=" + std::to_string(k.chunk) : std::string()) + (k.nan_grad ? " nan_grad" : "") +
         (k.quick ? " quick" : "") +
         (k.signs == Case::Signs::positive   ? " grad>=0"
          : k.signs == Case::Signs::negative ? " grad<=0"
          : k.signs == Case::Signs::zero     ? " grad=0"
                                             : "");
}

// A table of `extents` in host memory: contiguous, or (padded) each dimension's stride one element wider than
// contiguous, the gaps NaN (a read of one would show).
struct Table {
  std::vector<int64_t> extents, strides;
  std::vector<unsigned char> bytes;
  Table(DType dtype, std::vector<int64_t> e, bool padded) : extents(std::move(e)), strides(extents.size()) {
    int64_t stride = 1;
    for (std::size_t i = extents.size(); i-- > 0;) {
      strides[i] = stride;
      stride *= extents[i] + (padded ? 1 : 0);
    }
    bytes.resize(std::size_t(std::max<int64_t>(stride, 1)) * dtype_info(dtype).size_bytes);
    for (int64_t i = 0; i < stride; ++i) store_element(dtype, bytes.data(), i, NAN);
  }
  int64_t at(std::initializer_list<int64_t> index) const {
    int64_t o = 0, i = 0;
    for (int64_t x : index) o += x * strides[std::size_t(i++)];
    return o;
  }
};

void run_case(const Case& k, std::mt19937_64& rng, Worst& worst) {
  CAPTURE(describe(k));
  const QuickBuild quick(k.quick); // the plan's kernels, and those its calls load
  ChainProblem p;
  p.semiring = k.semiring;
  p.dtype = k.dtype;
  p.form = ChainForm::hmm;
  p.B = k.B;
  p.T = k.T;
  p.C = k.C;
  p.with_lengths = k.ragged;
  p.batched_transitions = p.batched_initial = k.batched;
  const int64_t B = k.B, T = k.T, C = k.C, TB = k.batched ? B : 1;
  Table em(k.dtype, {B, T, C}, k.padded), tr(k.dtype, {TB, C, C}, k.padded), in(k.dtype, {TB, C}, k.padded);
  if (k.padded) {
    std::copy(em.strides.begin(), em.strides.end(), p.emission_strides);
    std::copy(tr.strides.begin(), tr.strides.end(), p.transition_strides);
    std::copy(in.strides.begin(), in.strides.end(), p.initial_strides);
  }
  std::normal_distribution<double> normal(0, k.spread);
  std::uniform_real_distribution<double> u(0, 1);
  std::uniform_int_distribution<int> small(-2, 2);
  auto draw = [&] { return k.integers ? double(small(rng)) : normal(rng); };
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < C; ++c) {
        double v = draw();
        if (k.p_special > 0 && u(rng) < k.p_special) {
          const double r = k.minus_inf ? 0 : u(rng);
          v = r < 0.6 ? -INFINITY : r < 0.8 ? INFINITY : NAN;
        }
        if (k.far_sources) v -= t == 0 && 2 * c < C ? k.far : t == T - 1 && 2 * c >= C ? 3 * k.far : 0;
        store_element(k.dtype, em.bytes.data(), em.at({b, t, c}), v);
      }
  for (int64_t b = 0; b < TB; ++b) {
    for (int64_t c = 0; c < C; ++c) {
      store_element(k.dtype, in.bytes.data(), in.at({b, c}), draw());
      for (int64_t q = 0; q < C; ++q)
        store_element(k.dtype, tr.bytes.data(), tr.at({b, c, q}),
                      (k.banded && std::abs(c - q) > 2) || (k.dead_state && (c == 0 || q == 0)) ||
                              (k.far_sources && q > c)
                          ? -INFINITY
                          : draw());
    }
  }
  std::vector<int64_t> lengths;
  if (k.ragged) {
    std::uniform_int_distribution<int64_t> length(1, T);
    for (int64_t b = 0; b < B; ++b) lengths.push_back(b == 0 ? T : length(rng));
  }
  // score, alpha and grad_score in the output dtype (f32 for half tables), the gradients in the tables'.
  const DType out = chain_output_dtype(p);
  const int bytes = dtype_info(k.dtype).size_bytes, out_bytes = dtype_info(out).size_bytes;
  std::vector<double> grad_score(static_cast<std::size_t>(B)), magnitude(static_cast<std::size_t>(B));
  std::vector<unsigned char> g_bytes(std::size_t(B) * out_bytes + 1);
  for (int64_t b = 0; b < B; ++b) {
    double g = u(rng) < 0.1 ? 0.0 : normal(rng) / k.spread + 0.5;
    if (k.signs == Case::Signs::positive) g = std::fabs(g);
    if (k.signs == Case::Signs::negative) g = -std::fabs(g);
    if (k.signs == Case::Signs::zero) g = 0;
    store_element(out, g_bytes.data(), b, k.nan_grad && b == B - 1 ? NAN : g);
    grad_score[std::size_t(b)] = load_element(out, g_bytes.data(), b);
    magnitude[std::size_t(b)] = std::fabs(grad_score[std::size_t(b)]);
  }

  const bool viterbi = k.semiring == Semiring::max_plus;
  const HmmInputs host{em.bytes.data(), tr.bytes.data(), in.bytes.data()};
  const int64_t* host_lengths = k.ragged ? lengths.data() : nullptr;
  std::vector<double> ref_score(static_cast<std::size_t>(B)), ref_alpha(static_cast<std::size_t>(B * T * C));
  std::vector<int32_t> ref_path(std::size_t(B * T));
  reference::chain_forward(p, host, host_lengths, ref_score.data(), ref_alpha.data(),
                           viterbi ? ref_path.data() : nullptr);
  // The gradients, and their sizes: each is a sum of shares of grad_score (over steps and sequences for the
  // transitions), so its error is relative to the sum of the shares' magnitudes.
  const std::size_t n_em = std::size_t(B * T * C), n_tr = std::size_t(TB * C * C), n_in = std::size_t(TB * C);
  std::vector<double> ref_em(n_em), ref_tr(n_tr), ref_in(n_in), mag_em(n_em), mag_tr(n_tr), mag_in(n_in);
  reference::chain_backward(p, host, host_lengths, grad_score.data(), ref_em.data(), ref_tr.data(), ref_in.data());
  reference::chain_backward(p, host, host_lengths, magnitude.data(), mag_em.data(), mag_tr.data(), mag_in.data());

  const ChainPlan plan = k.cluster   ? chain_plan_for(p, clustered_chain_spec(p, k.cluster))
                         : k.stepped ? chain_plan_for(p, ChainSpec{}, 0, false, true, k.steps)
                         : k.chunk   ? chain_plan_for(p, chosen_chain_spec(p, *current_device()), k.chunk)
                                     : ChainPlan::get(p);
  CAPTURE(plan.kernel_name());
  CHECK(std::string(plan.strategy()) ==
        (k.stepped || C > kMaxSequentialChainStates ? "stepped" : k.chunk ? "chunked" : "sequential"));
  if (k.steps != StepKernel::rule)
    CHECK((plan.kernel_name().find("fused") != std::string::npos) == (k.steps != StepKernel::products));
  DeviceBuffer d_em = upload(em.bytes), d_tr = upload(tr.bytes), d_in = upload(in.bytes), d_lengths = upload(lengths),
               d_g = upload(g_bytes);
  DeviceBuffer d_score(std::size_t(B) * out_bytes + 1), d_alpha(n_em * out_bytes + 1), d_path(ref_path.size() * 4 + 1),
      d_saved(kSavedAt + plan.saved_bytes() + 1), g_em(n_em * bytes + 1), g_tr(n_tr * bytes + 1),
      g_in(n_in * bytes + 1);
  for (DeviceBuffer* d : {&d_score, &d_alpha}) d->fill_bytes(test::poison_byte(out));
  for (DeviceBuffer* d : {&g_em, &g_tr, &g_in}) d->fill_bytes(test::poison_byte(k.dtype));
  d_path.fill_bytes(test::kIndexPoison);
  d_saved.fill_bytes(0xff); // NaN: a backward that reads what the forward did not write shows
  const HmmInputs dev{d_em.get(), d_tr.get(), d_in.get()};
  const auto* d_len = k.ragged ? static_cast<const int64_t*>(d_lengths.get()) : nullptr;
  auto* d_best = viterbi ? static_cast<int32_t*>(d_path.get()) : nullptr;
  plan(dev, d_len, d_score.get(), viterbi ? nullptr : saved_at(d_saved), d_alpha.get(), d_best);
  plan.backward(dev, d_len, viterbi ? nullptr : saved_at(d_saved), d_best, d_g.get(),
                HmmGradients{g_em.get(), g_tr.get(), g_in.get()});
  const std::vector<double> score = download_as_double(d_score, out, B);
  const std::vector<double> alpha = download_as_double(d_alpha, out, int64_t(n_em));
  std::vector<int32_t> path(ref_path.size());
  if (viterbi && !path.empty()) d_path.download(path.data(), path.size() * 4);

  // A message is an emission ⊗ a step's reduction, both of the tables' spread in size, and they may nearly cancel:
  // its rounding in f32 is of the spread's size, not the result's, and a marginal carries both messages' along the
  // chain. So the tolerances of alpha and the log gradients grow with the spread. Half tables are computed in f32,
  // and only their gradients are rounded to the half type. max_plus's tables' gradients add one share of grad_score
  // a step of the path, in the accumulator type: up to B·T additions, each rounding by a unit in the last place.
  // The stepped strategy's products form keeps the products' f32 contract at each step, 1e-5 of max(1, |out|). The
  // score is such a sum too, of terms of the spread's size: where they nearly cancel (a score of −1.14 from tables
  // of spread 10) its rounding is relative to the spread, not to the score.
  const bool wide = k.dtype == DType::f64;
  const bool products = k.stepped && k.steps != StepKernel::fused && k.steps != StepKernel::fused_streamed;
  const double rounding = test::half_rounding(k.dtype);
  const double score_tol = wide ? 1e-12 : products ? 1e-5 : 1e-6, alpha_tol = (wide ? 1e-12 : 2e-5) * std::max(1.0, k.spread / 10);
  const double path_sums = double(B * T) * std::ldexp(1.0, wide ? -53 : -24);
  const double grad_tol = viterbi ? (wide ? 1e-14 : 1e-6) + path_sums : (wide ? 1e-11 : 4e-5) * k.spread;
  int bad = 0;
  const double score_floor = std::max(1.0, k.spread);
  compare("score", score, ref_score, score_tol, bad, &worst.score, score_floor);
  compare("alpha", alpha, ref_alpha, alpha_tol, bad, &worst.alpha);
  if (!viterbi) { // the forward without saved: another entry point, the same contract
    d_score.fill_bytes(test::poison_byte(out));
    d_alpha.fill_bytes(test::poison_byte(out));
    plan(dev, d_len, d_score.get(), nullptr, d_alpha.get());
    compare("without saved: score", download_as_double(d_score, out, B), ref_score, score_tol, bad, nullptr,
            score_floor);
    compare("without saved: alpha", download_as_double(d_alpha, out, int64_t(n_em)), ref_alpha, alpha_tol, bad);
  }
  if (viterbi && ((k.stepped && C <= kMaxSequentialChainStates) || (k.chunk && k.integers))) {
    // The stepped strategy's products form the sequential kernels' terms and keep their winners: the same scores
    // and paths, bit for bit. So do the chunks where the arithmetic is exact (integers, and their many ties): their
    // first messages come from products that sum the steps in another order than the recursion.
    const ChainPlan sequential = chain_plan_for(p, chosen_chain_spec(p, *current_device()));
    DeviceBuffer s_score(std::size_t(B) * out_bytes + 1), s_path(ref_path.size() * 4 + 1);
    sequential(dev, d_len, s_score.get(), nullptr, nullptr, static_cast<int32_t*>(s_path.get()));
    std::vector<int32_t> seq_path(ref_path.size());
    if (!seq_path.empty()) s_path.download(seq_path.data(), seq_path.size() * 4);
    test::check_same_as_sequential(plan.strategy(), score, path, download_as_double(s_score, out, B), seq_path, B, T,
                                   bad);
  }
  if (viterbi && k.integers && k.p_special == 0) test::check_smallest_ties(path, ref_path, ref_score, B, T, bad);
  bool same_path = true;
  for (std::size_t i = 0; i < path.size(); ++i) same_path = same_path && path[i] == ref_path[i];
  if (viterbi && !same_path) {
    // Only an equally good path (to the score's tolerance) may differ from the reference's: a state at every
    // position before the sequence's length, −1 after it. With a score that is not finite the path is not compared
    // (the back-pointers choose among transitions, the reference among formed potentials that carry the NaN).
    for (int64_t b = 0; b < B; ++b) {
      const int64_t L = k.ragged ? lengths[b] : T, tb = k.batched ? b : 0;
      const int32_t* s = path.data() + b * T;
      if (ref_score[b] == -INFINITY) { // no path: −1 throughout
        if (!std::all_of(s, s + T, [](int32_t x) { return x == -1; }) && bad++ < 5)
          FAIL_CHECK("sequence " << b << " has no path, but its path is not −1 throughout");
        continue;
      }
      if (!std::isfinite(ref_score[b])) continue;
      if (!test::valid_path(s, L, T, C)) {
        if (bad++ < 5) FAIL_CHECK("path of sequence " << b << " is not a state a position up to its length");
        continue;
      }
      double sum = load_element(k.dtype, in.bytes.data(), in.at({tb, s[0]})) +
                   load_element(k.dtype, em.bytes.data(), em.at({b, 0, s[0]}));
      for (int64_t t = 0; t + 1 < L; ++t)
        sum += load_element(k.dtype, tr.bytes.data(), tr.at({tb, s[t + 1], s[t]})) +
               load_element(k.dtype, em.bytes.data(), em.at({b, t + 1, s[t + 1]}));
      if (!close(sum, ref_score[b], score_tol) && bad++ < 5)
        FAIL_CHECK("path of sequence " << b << " scores " << sum << ", the best " << ref_score[b]);
    }
    // max_plus's gradients are grad_score on each state and move of the path the forward wrote, which the backward
    // reads: where that path is another, equally good one (checked above), the reference's gradients are that
    // path's, as reference::chain_backward forms them for its own.
    for (std::vector<double>* v : {&ref_em, &ref_tr, &ref_in, &mag_em, &mag_tr, &mag_in})
      std::fill(v->begin(), v->end(), 0.0);
    for (int64_t b = 0; b < B; ++b) {
      if (grad_score[std::size_t(b)] == 0) continue;
      const int64_t L = k.ragged ? lengths[b] : T, tb = k.batched ? b : 0;
      const int32_t* st = path.data() + b * T;
      auto state = [&](int64_t t) { return t >= 0 && st[t] >= 0 && st[t] < C; };
      for (int64_t t = 0; t < L; ++t) { // each position on its own, as the kernels read it
        if (!state(t)) continue;
        const int64_t at[] = {(b * T + t) * C + st[t], tb * C + st[t], t > 0 ? (tb * C + st[t]) * C + st[t - 1] : 0};
        for (int i = 0; i < 3; ++i) {
          // the emission; the initial state at the first position; a move after it, from a state
          if ((i == 1 && t > 0) || (i == 2 && (t == 0 || !state(t - 1)))) continue;
          std::vector<double>& g = i == 0 ? ref_em : i == 1 ? ref_in : ref_tr;
          std::vector<double>& m = i == 0 ? mag_em : i == 1 ? mag_in : mag_tr;
          g[std::size_t(at[i])] += grad_score[std::size_t(b)];
          m[std::size_t(at[i])] += magnitude[std::size_t(b)];
        }
      }
    }
  }
  auto compare = [&](const char* name, const DeviceBuffer& d, const std::vector<double>& ref,
                     const std::vector<double>& mag) {
    const std::vector<double> got = download_as_double(d, k.dtype, int64_t(ref.size()));
    for (std::size_t i = 0; i < got.size(); ++i) {
      const double allowed = grad_tol * std::max(1.0, mag[i]) + rounding * std::fabs(ref[i]);
      if (!close(got[i], ref[i], allowed / std::max(1.0, std::fabs(ref[i]))) && bad++ < 5)
        FAIL_CHECK(std::string(name) << "[" << i << "] = " << got[i] << ", reference " << ref[i] << " (of shares " << mag[i]
                        << ")");
      if (std::isfinite(ref[i]))
        worst.grad = std::max(worst.grad, std::fabs(got[i] - ref[i]) / std::max(1.0, mag[i]));
    }
  };
  compare("grad_emissions", g_em, ref_em, mag_em);
  compare("grad_transitions", g_tr, ref_tr, mag_tr);
  compare("grad_initial", g_in, ref_in, mag_in);
  // Each gradient asked for alone is the one computed beside the others, bit for bit: a backward forms them in passes
  // that differ with what is asked (the stepped strategy's log marginals share a pass with the transitions' operand).
  const DeviceBuffer* together[] = {&g_em, &g_tr, &g_in};
  const std::size_t sizes[] = {n_em * bytes, n_tr * bytes, n_in * bytes};
  for (int i = 0; i < 3; ++i) {
    DeviceBuffer alone(sizes[i] + 1);
    alone.fill_bytes(test::poison_byte(k.dtype));
    HmmGradients asked;
    (i == 0 ? asked.emissions : i == 1 ? asked.transitions : asked.initial) = alone.get();
    plan.backward(dev, d_len, viterbi ? nullptr : saved_at(d_saved), d_best, d_g.get(), asked);
    std::vector<unsigned char> one(sizes[i]), all(sizes[i]);
    if (sizes[i] == 0) continue;
    alone.download(one.data(), sizes[i]);
    together[i]->download(all.data(), sizes[i]);
    if (one != all && bad++ < 5)
      FAIL_CHECK("gradient " << i << " (emissions, transitions, initial) asked for alone differs");
  }
  CHECK(bad == 0);
}

// The dtypes of one semiring: the shapes, spreads, layouts and edge values above (70 sequences: a shared initial
// table's gradient summed over more sequences than a warp has lanes).
void run_semiring(Semiring s, std::mt19937_64& rng, const std::vector<DType>& dtypes = {DType::f32, DType::f64}) {
  const struct {
    int64_t B, T, C;
  } shapes[] = {{1, 1, 1},   {2, 5, 1},    {2, 2, 2},   {3, 5, 31},   {2, 7, 33},   {1, 4, 129},
                {2, 3, 257}, {1, 2, 1000}, {3, 40, 64}, {2, 300, 32}, {1, 3, 1024}, {8, 200, 64},
                {70, 3, 5},  {3, 7, 100},  {80, 4, 128}}; // log's saving forward compiled for two blocks an SM (more
                                                          // blocks than SMs)
  const int64_t special_states[] = {3, 31, 64};
  std::vector<int64_t> states(std::begin(special_states), std::end(special_states));
  for (const auto& sh : shapes) states.push_back(sh.C);
  test::precompile_chains(s, ChainForm::hmm, states, dtypes);
  for (DType d : dtypes) {
    Worst worst;
    for (const auto& sh : shapes)
      for (double spread : {1.0, 10.0, 50.0}) {
        Case k{s, d, sh.B, sh.T, sh.C, spread};
        run_case(k, rng, worst);
        k.ragged = true;
        k.banded = sh.C > 3;
        k.batched = true;
        run_case(k, rng, worst);
      }
    for (int64_t C : special_states) {
      Case k{s, d, 4, 9, C};
      k.ragged = k.padded = true;
      run_case(k, rng, worst); // padded strides
      k.padded = false;
      k.p_special = 0.1;
      k.minus_inf = true;
      run_case(k, rng, worst); // −inf emissions: structural zeros
      k.p_special = 0.01;
      k.minus_inf = false;
      run_case(k, rng, worst); // ±inf, NaN
      Case ties{s, d, 4, 9, C};
      ties.integers = true;
      run_case(ties, rng, worst);
    }
    // A NaN grad_score among finite ones: the transitions' sums of factors go on term by term from its steps.
    for (bool batched : {false, true}) {
      Case k{s, d, 5, 40, 64};
      k.nan_grad = true;
      k.batched = batched;
      run_case(k, rng, worst);
    }
    MESSAGE(std::string(semiring_info(s).name) << " " << std::string(dtype_info(d).name)
                                               << ": worst relative error of the score " << worst.score
                                               << ", of alpha " << worst.alpha
                                               << ", worst error of a gradient (relative to its shares) " << worst.grad);
  }
}

} // namespace

TEST_CASE("hmm: log against the float64 reference, shared and batched tables, odd sizes, f32 and f64") {
  std::mt19937_64 rng(20261128);
  run_semiring(Semiring::log, rng);
}

TEST_CASE("hmm: max_plus against the float64 reference, shared and batched tables, odd sizes, f32 and f64") {
  std::mt19937_64 rng(20261129);
  run_semiring(Semiring::max_plus, rng);
}

// A left-to-right table whose states' sources lie far below a step's largest message (Case::far_sources): the
// sequential kernels' transitions' gradient, which sums factors scaled by that message only where no row mixes
// finite and −inf transitions, must still take every term of such rows.
TEST_CASE("hmm: a left-to-right table whose sources lie far below a step's largest message, log") {
  std::mt19937_64 rng(20261206);
  Worst worst;
  for (DType d : {DType::f32, DType::f64})
    for (int64_t C : {2, 33, 64, 200})
      for (int64_t T : {2, 5})
        for (bool batched : {false, true}) {
          // A marginal keeps about 2^-24 of its score's size in f32, and every path scores about -far here: far =
          // 100 flushes f32's factors and stays within the tolerance of tables of spread 2; f64 needs 1000.
          Case k{Semiring::log, d, 6, T, C, d == DType::f32 ? 2.0 : 1.0};
          k.far_sources = true;
          k.far = d == DType::f32 ? 100 : 1000;
          k.batched = batched;
          run_case(k, rng, worst);
        }
}

// Quick builds, the kernels a stand-in runs while its plan's optimised ones are built (NVRTC's --Ofast-compile): the
// same contract as those, in the sequential kernels (a stand-in of the sequential and the chunked strategies) and the
// stepped strategy's products' form (its own stand-in's), shared and batched tables, up to 1024 states, the edge
// values and ties.
TEST_CASE("hmm: quick builds against the float64 reference, sequential and stepped") {
  std::mt19937_64 rng(20261205);
  const struct {
    int64_t B, T, C;
  } shapes[] = {{3, 5, 31}, {8, 40, 64}, {2, 4, 257}, {2, 3, 1024}};
  for (Semiring s : {Semiring::log, Semiring::max_plus})
    for (DType d : {DType::f32, DType::bf16}) {
      Worst worst;
      for (bool stepped : {false, true}) {
        for (const auto& sh : shapes) {
          Case k{s, d, sh.B, sh.T, sh.C, 10.0};
          k.quick = true, k.stepped = stepped;
          k.steps = stepped ? StepKernel::products : StepKernel::rule;
          run_case(k, rng, worst);
          k.ragged = k.banded = k.batched = true;
          run_case(k, rng, worst);
        }
        Case specials{s, d, 4, 9, 33};
        specials.ragged = true, specials.p_special = 0.01;
        Case ties{s, d, 4, 9, 33};
        ties.integers = true;
        for (Case* k : {&specials, &ties}) {
          k->quick = true, k->stepped = stepped;
          k->steps = stepped ? StepKernel::products : StepKernel::rule;
          run_case(*k, rng, worst);
        }
      }
      MESSAGE(std::string(semiring_info(s).name) << " " << std::string(dtype_info(d).name)
                                                 << " quick: worst relative error of the score " << worst.score
                                                 << ", of alpha " << worst.alpha << ", of a gradient " << worst.grad);
    }
}

// Half tables, computed in f32 (at 128 states and up, with few sequences, the plans split them over clusters).
TEST_CASE("hmm: f16 and bf16 tables against the float64 reference, both semirings") {
  std::mt19937_64 rng(20261131);
  for (Semiring s : {Semiring::log, Semiring::max_plus}) run_semiring(s, rng, {DType::f16, DType::bf16});
}

// The HMM form's recursions in one block per sequence and split over every cluster size whose registers fit, down
// to clusters with blocks of no state.
TEST_CASE("hmm: one block per sequence and every cluster size against the float64 reference" *
          doctest::test_suite(test::kNeedsClusters)) {
  std::mt19937_64 rng(20261130);
  std::vector<Case> cases;
  std::vector<ChainSpec> specs;
  for (const auto& [p, cluster] : test::cluster_runs(ChainForm::hmm)) {
    specs.push_back(clustered_chain_spec(p, cluster));
    Case k{p.semiring, p.dtype, p.B, p.T, p.C, 10};
    k.cluster = cluster;
    cases.push_back(k);
    Case masked = k;
    masked.ragged = masked.banded = masked.batched = true;
    cases.push_back(masked);
    Case minus_inf = k;
    minus_inf.p_special = 0.1;
    minus_inf.minus_inf = true;
    cases.push_back(minus_inf);
    Case ties{p.semiring, p.dtype, p.B, p.T, p.C};
    ties.integers = true;
    ties.cluster = cluster;
    cases.push_back(ties);
  }
  if (cases.empty()) return;
  test::precompile(*current_device(), specs);
  Worst worst;
  for (const Case& k : cases) run_case(k, rng, worst);
  MESSAGE(cases.size() << " cases, " << specs.size() << " modules: worst relative error of the score " << worst.score
                       << ", of alpha " << worst.alpha << ", worst error of a gradient (relative to its shares) "
                       << worst.grad);
}

namespace {

// One form's cases in a semiring and dtype: every shape twice (ragged, banded and, but for the fused form, batched
// the second time), far apart values where the form is fused, and at a few small C padded strides, the edge values,
// ties and a NaN grad_score.
// A chain's terms: B·(T − 1)·C².
int64_t terms(int64_t B, int64_t T, int64_t C) { return B * std::max<int64_t>(T - 1, 0) * C * C; }

void stepped_cases(Semiring s, DType d, StepKernel form, std::mt19937_64& rng, Worst& worst) {
  const struct {
    int64_t B, T, C;
  } shapes[] = {{1, 1, 1},    {2, 5, 1},    {2, 2, 2},    {3, 5, 33},    {5, 9, 64},   {2, 4, 257}, {64, 3, 256},
                {70, 3, 512}, {40, 4, 544}, {2, 3, 1025}, {20, 3, 1024}, {1, 2, 4096}, {70, 6, 40}};
  const bool fused = form == StepKernel::fused || form == StepKernel::fused_streamed;
  for (const auto& sh : shapes) {
    // Beyond 1024 states in f32 alone: the other dtypes' code is the same at every C, and their products' kernels
    // would compile for these shapes only. f64's reference sums in long double, several times slower: its shapes
    // are those of at most 2^24 terms.
    if (d != DType::f32 && sh.C > 1100) continue;
    if (d == DType::f64 && terms(sh.B, sh.T, sh.C) > (int64_t(1) << 24)) continue;
    for (double spread : {1.0, 10.0}) {
      Case k{s, d, sh.B, sh.T, sh.C, spread};
      k.stepped = true;
      k.steps = form;
      run_case(k, rng, worst);
      k.ragged = true;
      k.banded = sh.C > 3;
      k.batched = sh.C <= 1100 && !fused;
      run_case(k, rng, worst);
    }
  }
  if (fused) { // far apart values: many sums below the guard, repaired term by term
    Case k{s, d, 37, 5, 300, 60.0};
    k.stepped = k.ragged = true;
    k.steps = form;
    run_case(k, rng, worst);
  }
  if (!fused) { // the edge values and banded −inf where log's step products sum their sources in parts
    Case k{s, d, 64, 5, 256};
    k.stepped = k.ragged = true;
    k.steps = form;
    k.p_special = 0.05;
    k.dead_state = true;
    run_case(k, rng, worst);
    Case band{s, d, 70, 4, 512}; // some parts all −inf, others finite
    band.stepped = band.ragged = band.banded = true;
    band.steps = form;
    if (d != DType::f64) run_case(band, rng, worst); // beyond f64's reference's 2^24 terms
  }
  for (int64_t C : {3, 31, 64}) {
    Case k{s, d, 4, 9, C};
    k.stepped = k.ragged = k.padded = true;
    k.steps = form;
    run_case(k, rng, worst);
    k.padded = false;
    k.p_special = 0.1;
    k.minus_inf = true;
    run_case(k, rng, worst);
    k.p_special = 0.01;
    k.minus_inf = false;
    run_case(k, rng, worst);
    k.p_special = 0.05; // ±inf and NaN meeting a state nothing enters or leaves
    k.dead_state = C > 1;
    run_case(k, rng, worst);
    Case ties{s, d, 6, 9, C};
    ties.integers = ties.stepped = true;
    ties.steps = form;
    run_case(ties, rng, worst);
    if (!fused) {
      ties.batched = true;
      run_case(ties, rng, worst);
    }
    Case nan_grad{s, d, 5, 7, C};
    nan_grad.stepped = nan_grad.nan_grad = true; // NaN in the shared tables' sums, the other sequences' exact
    nan_grad.steps = form;
    run_case(nan_grad, rng, worst);
    for (const Case::Signs signs : {Case::Signs::positive, Case::Signs::negative, Case::Signs::zero}) {
      Case one_sign{s, d, 5, 7, C};
      one_sign.stepped = one_sign.ragged = true;
      one_sign.steps = form;
      one_sign.signs = signs;
      run_case(one_sign, rng, worst);
      one_sign.nan_grad = true; // the NaN in the one product that runs
      run_case(one_sign, rng, worst);
    }
  }
  if (d == DType::f32) { // ties beyond the sequential kernels' states: the smallest state wins, as the reference's
    Case ties{s, d, 3, 5, 1025};
    ties.integers = ties.stepped = ties.ragged = true;
    ties.steps = form;
    run_case(ties, rng, worst);
  }
  if (!fused) { // grad_score of one sign where the steps' products sum their sources in parts
    for (const Case::Signs signs : {Case::Signs::positive, Case::Signs::negative}) {
      Case k{s, d, 64, 4, 256};
      k.stepped = k.ragged = true;
      k.steps = form;
      k.signs = signs;
      run_case(k, rng, worst);
    }
  }
}

void report(const char* what, Semiring s, DType d, const Worst& worst) {
  MESSAGE(std::string(what) << " " << std::string(semiring_info(s).name) << " " << std::string(dtype_info(d).name)
               << ": worst relative error of the score " << worst.score << ", of alpha " << worst.alpha
               << ", worst error of a gradient (relative to its shares) " << worst.grad);
}

// The stepped strategy (each step one product of every sequence's messages) in every semiring and dtype: odd sizes
// up to beyond the sequential kernels' 1024 states, shared and batched tables, ragged lengths, banded −inf, padded
// strides, the edge values and ties (whose Viterbi paths and scores must be the sequential kernels' bit for bit).
// At 1024 states and more a few sequences' step products split their sums (split_k) or take the warp kernel, 20
// sequences of 1024 states split them with the argmax too; on a GPU with wgmma log's step products of a shared table
// of 64 sequences and more from 256 states sum their sources in parts, whose results the step adds.
void stepped_against_reference(Semiring s, std::mt19937_64& rng) {
  for (DType d : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    SUBCASE(dtype_info(d).name) { // a dtype alone: -sc=f16
      Worst worst;
      // The products' form (the fused one, where the rule would take it, has a case of its own).
      const StepKernel form = fused_steps_apply_to(s, d) ? StepKernel::products : StepKernel::rule;
      stepped_cases(s, d, form, rng, worst);
      if (d == DType::f32) { // ties where the step products split their sums, with the argmax for max_plus
        Case ties{s, d, 20, 4, 1024};
        ties.integers = ties.stepped = true;
        ties.steps = form;
        run_case(ties, rng, worst);
      }
      report("stepped", s, d, worst);
    }
  }
}

} // namespace

// A case a semiring, a subcase a dtype: each case takes minutes, and the suites run them side by side.
TEST_CASE("hmm: the stepped strategy against the float64 reference and the sequential kernels: log") {
  std::mt19937_64 rng(20261202);
  stepped_against_reference(Semiring::log, rng);
}

TEST_CASE("hmm: the stepped strategy against the float64 reference and the sequential kernels: max_plus") {
  std::mt19937_64 rng(20261203);
  stepped_against_reference(Semiring::max_plus, rng);
}

// The transitions' gradient in the wide and mma blocks ("_edges_wide", "_edges_mma", runtime/hmm_sums.hpp): the wide
// blocks where a whole wave of them fits the partial sums' room, the mma blocks instead from 128 states on a device
// with TF32 mma.sync (scripts/gpu-levels runs this at the sm_75 level too, where the wide blocks serve): the narrowest
// batch of four positions that takes them on this GPU, 64, 128 and 256 states, ragged lengths, in the sequential
// kernels (with a NaN grad_score) and in the stepped strategy, whose backward they are there up to 128 states. f32
// tables alone: half tables' batches would be four times as wide (their room is half their bytes), and their reads
// and writes are the narrow blocks' (hmm: f16 and bf16 ...). In the sequential kernels also a banded table (rows of
// finite and −inf transitions: term by term from the start) and ±inf and NaN values.
TEST_CASE("hmm: the transitions' gradient in the wide and mma blocks against the float64 reference") {
  std::mt19937_64 rng(20261207);
  const bool mma = current_device()->features.has(kMmaTf32Bf16);
  for (DType d : {DType::f32}) {
    Worst worst;
    for (const int64_t C : {64, 128, 256}) {
      if (C == 256 && !mma) continue;
      ChainProblem p;
      p.dtype = d;
      p.form = ChainForm::hmm;
      p.T = 4;
      p.C = C;
      p.with_lengths = true;
      const int want = mma && C >= 128 ? jb::kEdgeMma : jb::kEdgeWide;
      for (p.B = 1024; p.B < (int64_t(1) << 17) && HmmSums(p, current_device(), nullptr).kind() != want; p.B *= 2) {
      }
      CAPTURE(C);
      CAPTURE(p.B);
      REQUIRE_MESSAGE(HmmSums(p, current_device(), nullptr).kind() == want, "no batch below 2^17 takes the blocks");
      for (const bool stepped : {false, true}) {
        if (stepped && C > 128) continue; // the stepped strategy's product serves there
        Case k{Semiring::log, d, p.B, p.T, C};
        k.ragged = true;
        k.stepped = stepped;
        k.nan_grad = !stepped;
        run_case(k, rng, worst);
        if (stepped) continue;
        k.nan_grad = false;
        k.banded = true;
        run_case(k, rng, worst);
        k.banded = false;
        k.p_special = 0.01;
        run_case(k, rng, worst);
      }
    }
    report(mma ? "wide and mma blocks" : "wide blocks", Semiring::log, d, worst);
  }
}

// The fused forms (templates/chain/fused_steps.cuh, fused_viterbi.cuh): one shared table, f32 accumulators; the
// Viterbi scores and paths must be the sequential kernels' bit for bit up to their 1024 states. Up to a few hundred
// states the plans take the resident entries, beyond them the streaming ones; f32 runs every shape in the streaming
// entries too (the dtypes differ only in what both read and write).
TEST_CASE("hmm: the stepped strategy's fused form against the float64 reference") {
  std::mt19937_64 rng(20261204);
  for (Semiring s : {Semiring::log, Semiring::max_plus})
    for (DType d : {DType::f32, DType::f16, DType::bf16}) {
      Worst worst;
      stepped_cases(s, d, StepKernel::fused, rng, worst);
      if (d == DType::f32) stepped_cases(s, d, StepKernel::fused_streamed, rng, worst);
      if (s == Semiring::max_plus && d == DType::f32) { // ties over many tiles, rows and both groups' chunks
        Case ties{s, d, 70, 6, 1024};
        ties.integers = ties.stepped = ties.ragged = true;
        ties.steps = StepKernel::fused;
        run_case(ties, rng, worst);
      }
      report("fused", s, d, worst);
    }
}

// The fused form's paired entries (two blocks an SM, jb::kFusedPairedSources) where one pass's tiles take more than
// half of an H100's or H200's SMs, so that the saving forward's passes run side by side only because two blocks share
// an SM: 4096 sequences of 64 states (128 tiles, clusters of one) and 2048 of 128 (clusters of two), ragged lengths.
TEST_CASE("hmm: the fused form's paired entries at wide batches against the float64 reference") {
  std::mt19937_64 rng(20261208);
  Worst worst;
  for (const int64_t C : {64, 128}) {
    Case k{Semiring::log, DType::f32, C == 64 ? 4096 : 2048, 4, C};
    k.stepped = k.ragged = true;
    k.steps = StepKernel::fused;
    run_case(k, rng, worst);
  }
  report("fused paired", Semiring::log, DType::f32, worst);
}

// The chunked strategy (runtime/chain_chunked.hpp) in the HMM form, whose steps it forms from the tables: log in the
// shortest chunks whose products fit in saved and in one of the whole chain (its backward sums the steps' gradients
// into the three tables), the best path in chunks of 2 and 8 steps and in one; shared and batched tables, odd sizes,
// ragged lengths, masks, strides, −inf emissions, and ties, whose paths must be the sequential kernels'.
TEST_CASE("hmm: the chunked strategy against the float64 reference and the sequential kernels") {
  std::mt19937_64 rng(20261203);
  const struct {
    DType dtype;
    int64_t B, T, C;
  } shapes[] = {{DType::f32, 1, 2, 1},   {DType::f32, 3, 5, 3},   {DType::f32, 2, 40, 31}, {DType::f32, 1, 300, 64},
                {DType::f32, 4, 70, 33}, {DType::f64, 3, 77, 64}, {DType::bf16, 2, 40, 31}};
  std::vector<ChainProblem> chains;
  for (Semiring s : {Semiring::log, Semiring::max_plus})
    for (const auto& sh : shapes) {
      ChainProblem p;
      p.semiring = s;
      p.form = ChainForm::hmm;
      p.dtype = sh.dtype;
      p.B = sh.B;
      p.T = sh.T;
      p.C = sh.C;
      chains.push_back(p);
    }
  test::precompile(*current_device(), chains);
  for (Semiring s : {Semiring::log, Semiring::max_plus})
    for (DType d : {DType::f32, DType::f64, DType::bf16}) {
      Worst worst;
      for (const auto& sh : shapes) {
        if (sh.dtype != d) continue;
        ChainProblem p;
        p.semiring = s, p.form = ChainForm::hmm, p.dtype = d, p.B = sh.B, p.T = sh.T, p.C = sh.C;
        for (int64_t chunk : test::tested_chunks(p)) {
          if (!chunk_unfit(p, chunk).empty()) continue; // log at T = 2: a product outgrows the messages saved
          for (double spread : {1.0, 10.0}) {
            Case k{s, d, sh.B, sh.T, sh.C, spread};
            k.chunk = chunk;
            run_case(k, rng, worst);
            k.ragged = true;
            k.banded = sh.C > 3;
            k.batched = true;
            run_case(k, rng, worst);
          }
          Case k{s, d, sh.B, sh.T, sh.C};
          k.chunk = chunk;
          k.ragged = k.padded = true;
          run_case(k, rng, worst);
          k.padded = false;
          k.p_special = 0.1; // −inf emissions: structural zeros (+inf: a product may meet +inf ⊗ −inf)
          k.minus_inf = true;
          run_case(k, rng, worst);
          Case ties{s, d, sh.B, sh.T, sh.C};
          ties.integers = true;
          ties.chunk = chunk;
          run_case(ties, rng, worst);
          ties.batched = ties.ragged = true;
          run_case(ties, rng, worst);
        }
      }
      if (d == DType::f32) {
        // Many chunks of small tables: the tree takes several passes (at most 256 MiB of its levels at once), which
        // split sequences, and the tables' sums run on across them.
        Case k{s, d, 4, 4096, 64};
        k.chunk = 64;
        run_case(k, rng, worst);
        k.ragged = k.batched = true;
        run_case(k, rng, worst);
      }
      MESSAGE("chunked " << std::string(semiring_info(s).name) << " " << std::string(dtype_info(d).name)
                         << ": worst relative error of the score " << worst.score << ", of alpha " << worst.alpha
                         << ", worst error of a gradient (relative to its shares) " << worst.grad);
    }
}

// A length outside [1, T] cannot be checked without waiting for the device: that sequence scores NaN, its
// gradients are NaN (and so are a shared table's sums), its path is −1 throughout, and the other sequences are
// computed as they are, by the sequential kernels and in chunks alike.
TEST_CASE("hmm: a length outside [1, T] gives a NaN score, NaN gradients and no path, in every strategy") {
  const int64_t B = 2, T = 5, C = 4;
  const std::vector<float> emissions(std::size_t(B * T * C), -0.5f), transitions(std::size_t(C * C), -1.0f),
      initial(std::size_t(C), -0.25f);
  DeviceBuffer d_em = upload(emissions), d_tr = upload(transitions), d_in = upload(initial),
               d_len = upload(std::vector<int64_t>{5, 7}), g = upload(std::vector<float>{1, 1});
  const HmmInputs hmm{d_em.get(), d_tr.get(), d_in.get()};
  const auto* lengths = static_cast<const int64_t*>(d_len.get());
  for (Semiring s : {Semiring::log, Semiring::max_plus})
    for (int64_t chunk : {0, 2, 4, -1, -2}) { // −1: the stepped strategy's products, −2 its fused form
      ChainProblem p;
      p.semiring = s, p.form = ChainForm::hmm, p.B = B, p.T = T, p.C = C, p.with_lengths = true;
      if (chunk > 0 && !chunk_unfit(p, chunk).empty()) continue; // log in chunks of 2: its products outgrow saved
      CAPTURE(semiring_info(s).name);
      CAPTURE(chunk);
      const ChainPlan plan = chunk < 0 ? chain_plan_for(p, ChainSpec{}, 0, false, true,
                                                        chunk == -1 ? StepKernel::products : StepKernel::fused)
                                       : chain_plan_for(p, chosen_chain_spec(p, *current_device()), chunk);
      const bool log = s == Semiring::log;
      DeviceBuffer score(8), saved(plan.saved_bytes() + 1), path(std::size_t(B * T) * 4), g_em(emissions.size() * 4),
          g_tr(transitions.size() * 4), g_in(initial.size() * 4);
      for (DeviceBuffer* d : {&score, &path, &g_em, &g_tr, &g_in}) d->fill_bytes(0x7f); // poison: a number
      auto* best = log ? nullptr : static_cast<int32_t*>(path.get());
      plan(hmm, lengths, score.get(), log ? saved.get() : nullptr, nullptr, best);
      plan.backward(hmm, lengths, log ? saved.get() : nullptr, best, g.get(), HmmGradients{g_em.get(), g_tr.get(), g_in.get()});
      float scores[2];
      score.download(scores, sizeof scores);
      CHECK(std::isfinite(scores[0]));
      CHECK(std::isnan(scores[1]));
      std::vector<float> em(emissions.size()), tr(transitions.size()), in(initial.size());
      g_em.download(em.data(), em.size() * 4);
      g_tr.download(tr.data(), tr.size() * 4);
      g_in.download(in.data(), in.size() * 4);
      CHECK(std::none_of(em.begin(), em.begin() + T * C, [](float x) { return std::isnan(x); }));
      CHECK(std::all_of(em.begin() + T * C, em.end(), [](float x) { return std::isnan(x); }));
      CHECK(std::all_of(tr.begin(), tr.end(), [](float x) { return std::isnan(x); })); // shared: in every sum
      CHECK(std::all_of(in.begin(), in.end(), [](float x) { return std::isnan(x); }));
      if (!log) {
        int32_t states[B * T];
        path.download(states, sizeof states);
        CHECK(std::all_of(states, states + T, [](int32_t x) { return x >= 0 && x < C; }));
        CHECK(std::all_of(states + T, states + 2 * T, [](int32_t x) { return x == -1; }));
      }
    }
}

// A best path given to the backward that is not the forward's, with states outside [0, C): such a state is no edge
// and no node, in every strategy, and nothing is written out of bounds.
TEST_CASE("hmm: a best path's backward given states outside [0, C) puts no gradient there, in every strategy") {
  const int64_t T = 5, C = 4;
  DeviceBuffer d_em = upload(std::vector<float>(T * C, 0.5f)), d_tr = upload(std::vector<float>(C * C, -1.0f)),
               d_in = upload(std::vector<float>(C, 0.25f)), g = upload(std::vector<float>{2});
  // Only the step 0 → 1 (states 1 → 2) is an edge, and positions 0, 1 and 4 are nodes.
  DeviceBuffer path = upload(std::vector<int32_t>{1, 2, 4, 1 << 30, 3});
  const HmmInputs hmm{d_em.get(), d_tr.get(), d_in.get()};
  for (int64_t chunk : {-1, 0, 2}) { // −1: the stepped strategy
    ChainProblem p;
    p.semiring = Semiring::max_plus, p.form = ChainForm::hmm, p.B = 1, p.T = T, p.C = C;
    CAPTURE(chunk);
    const ChainPlan plan = chunk < 0 ? chain_plan_for(p, ChainSpec{}, 0, false, true, StepKernel::rule)
                                     : chain_plan_for(p, chosen_chain_spec(p, *current_device()), chunk);
    CHECK(std::string(plan.strategy()) == (chunk < 0 ? "stepped" : chunk ? "chunked" : "sequential"));
    DeviceBuffer g_em(T * C * 4), g_tr(C * C * 4), g_in(C * 4);
    for (DeviceBuffer* d : {&g_em, &g_tr, &g_in}) d->fill_bytes(0x7f); // poison: a number
    plan.backward(hmm, nullptr, nullptr, static_cast<const int32_t*>(path.get()), g.get(),
                  HmmGradients{g_em.get(), g_tr.get(), g_in.get()});
    std::vector<float> em(T * C), tr(C * C), in(C);
    g_em.download(em.data(), em.size() * 4);
    g_tr.download(tr.data(), tr.size() * 4);
    g_in.download(in.data(), in.size() * 4);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < C; ++c) {
        CAPTURE(t);
        CAPTURE(c);
        const bool node = (t == 0 && c == 1) || (t == 1 && c == 2) || (t == 4 && c == 3);
        CHECK(em[std::size_t(t * C + c)] == (node ? 2.0f : 0.0f));
      }
    for (int64_t e = 0; e < C * C; ++e) {
      CAPTURE(e);
      CHECK(tr[std::size_t(e)] == (e == 2 * C + 1 ? 2.0f : 0.0f)); // [to][from]
    }
    for (int64_t c = 0; c < C; ++c) CHECK(in[std::size_t(c)] == (c == 1 ? 2.0f : 0.0f));
  }
}

TEST_CASE("hmm: B = 0 zeroes the shared tables' gradients; T = 1 scores initial and emissions; bad arguments") {
  ChainProblem p;
  p.form = ChainForm::hmm;
  p.B = 0;
  p.T = 4;
  p.C = 5;
  const ChainPlan empty = ChainPlan::get(p);
  DeviceBuffer g_tr(25 * 4), g_in(5 * 4);
  g_tr.fill_bytes(0xff);
  g_in.fill_bytes(0xff);
  empty(HmmInputs{}, nullptr, nullptr);
  empty.backward(HmmInputs{}, nullptr, nullptr, nullptr, nullptr, HmmGradients{nullptr, g_tr.get(), g_in.get()});
  std::vector<float> tr(25), in(5);
  g_tr.download(tr.data(), 100);
  g_in.download(in.data(), 20);
  CHECK(std::all_of(tr.begin(), tr.end(), [](float x) { return x == 0; }));
  CHECK(std::all_of(in.begin(), in.end(), [](float x) { return x == 0; }));

  p.B = 2;
  const ChainPlan plan = ChainPlan::get(p);
  DeviceBuffer em(2 * 4 * 5 * 4), t(25 * 4), i(5 * 4), score(8);
  expect_invalid([&] { plan(HmmInputs{nullptr, t.get(), i.get()}, nullptr, score.get()); }, "hmm.emissions");
  expect_invalid([&] { plan(HmmInputs{em.get(), nullptr, i.get()}, nullptr, score.get()); }, "hmm.transitions");
  expect_invalid([&] { plan(HmmInputs{em.get(), t.get(), nullptr}, nullptr, score.get()); }, "hmm.initial");
  expect_invalid([&] { plan(em.get(), nullptr, score.get()); }, "potentials");
  expect_invalid([&] { plan(HmmInputs{em.get(), t.get(), i.get()}, nullptr, nullptr); }, "score");
  p.form = ChainForm::crf;
  const ChainPlan crf = ChainPlan::get(p);
  expect_invalid([&] { crf(HmmInputs{em.get(), t.get(), i.get()}, nullptr, score.get()); }, "hmm");

  // One position: log Σ exp(initial + emissions[0]); no transition is read.
  p.form = ChainForm::hmm;
  p.T = 1;
  const ChainPlan single = ChainPlan::get(p);
  DeviceBuffer e1 = upload(std::vector<float>{0, 1, 2, 3, 4, 1, 1, 1, 1, 1}), i1 = upload(std::vector<float>(5, 0.5f));
  DeviceBuffer out(8);
  out.fill_bytes(0xff);
  single(HmmInputs{e1.get(), nullptr, i1.get()}, nullptr, out.get());
  float host[2];
  out.download(host, sizeof host);
  double want0 = 0;
  for (int c = 0; c < 5; ++c) want0 += std::exp(0.5 + c);
  CHECK(host[0] == doctest::Approx(std::log(want0)));
  CHECK(host[1] == doctest::Approx(std::log(5.0) + 1.5));
}
