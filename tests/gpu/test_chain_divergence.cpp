// Chain expectations on the GPU (ChainExpectation) composed into entropy, cross-entropy and KL as jitbmm.torch
// composes them, against the CPU reference (reference/chain_divergence*.cpp) in double: values and the gradients of
// both chains' inputs, on odd sizes, ragged lengths, −inf masks, ±inf and NaN, half inputs; outputs poisoned first so
// that an element the kernels skip shows. The HMM form's from its tables (shared and per sequence, at strides) against
// the reference of the same chain as a CRF of T + 1 positions with a start edge (tests/host/chain_paths.hpp), its
// gradients mapped back to the tables.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "expect.hpp"
#include "hmm_arrays.hpp"
#include "jitbmm/chain_expectation.hpp"
#include "jitbmm/reference.hpp"
#include "runtime/device_memory.hpp"

using namespace jitbmm;
using namespace jitbmm::test;

namespace {

// One chain expectation's results: log Z ([B], or [2][B] with log Z_q where the field is a chain), E[F] and both
// inputs' gradients (the HMM form's three tables one after another, as flattened() lays them out).
struct Expectation {
  std::vector<double> log_z, mean, grad_potentials, grad_field;
};

// One expectation's outputs and upstream gradients on the device: log Z and the mean poisoned, saved NaN (a backward
// that reads what the forward did not write shows), gz (as log Z) and gm in the output dtype.
struct Outputs {
  DeviceBuffer log_z, mean, saved, gz, gm;
  Outputs(const ChainExpectation& plan, const std::vector<double>& g_z, const std::vector<double>& g_m)
      : saved(plan.saved_bytes() + 1) {
    const DType out = chain_output_dtype(plan.problem());
    REQUIRE(int64_t(g_z.size()) == (plan.field() == ExpectationField::given ? 1 : 2) * plan.problem().B);
    REQUIRE(int64_t(g_m.size()) == plan.problem().B);
    gz = stored(out, g_z), gm = stored(out, g_m);
    log_z = DeviceBuffer(g_z.size() * dtype_info(out).size_bytes + 1);
    mean = DeviceBuffer(g_m.size() * dtype_info(out).size_bytes + 1);
    for (DeviceBuffer* d : {&log_z, &mean}) d->fill_bytes(poison_byte(out));
    saved.fill_bytes(0xff);
  }
  // log Z and the mean, downloaded.
  Expectation values(const ChainExpectation& plan) const {
    const DType out = chain_output_dtype(plan.problem());
    const int64_t B = plan.problem().B;
    return {download_as_double(log_z, out, plan.field() == ExpectationField::given ? B : 2 * B),
            download_as_double(mean, out, B),
            {},
            {}};
  }
};

Expectation expect_on_gpu(const ChainExpectation& plan, const DeviceBuffer& pot, const DeviceBuffer& field,
                          const int64_t* lengths, const std::vector<double>& gz, const std::vector<double>& gm) {
  const ChainProblem& p = plan.problem();
  const int64_t edges = p.B * (p.T - 1) * p.C * p.C;
  const Outputs o(plan, gz, gm);
  DeviceBuffer gp(edges * dtype_info(p.dtype).size_bytes + 1), gf(edges * dtype_info(p.dtype).size_bytes + 1);
  for (DeviceBuffer* d : {&gp, &gf}) d->fill_bytes(poison_byte(p.dtype));
  plan(pot.get(), field.get(), lengths, o.log_z.get(), o.mean.get(), o.saved.get());
  plan.backward(pot.get(), field.get(), lengths, o.saved.get(), o.log_z.get(), o.mean.get(), o.gz.get(), o.gm.get(),
                gp.get(), gf.get());
  Expectation e = o.values(plan);
  e.grad_potentials = download_as_double(gp, p.dtype, edges);
  e.grad_field = download_as_double(gf, p.dtype, edges);
  return e;
}

// Which of a case's inputs an expectation reads as p's and as the field's: p, q, or the difference p − q as the caller
// forms it (in the inputs' dtype, from the values stored).
enum class Input { p, q, difference };

// What a case is held to: the reference's entropy, cross-entropy and KL [B] and, for upstream gradients g, their
// gradients of p and of q (laid out as Expectation's); floors, each gradient element's size below which its error is
// not relative to it (empty: 1 for every one).
struct Divergences {
  std::vector<double> entropy, cross_entropy, kl, grad_entropy, grad_ce_p, grad_ce_q, grad_kl_p, grad_kl_q, floors;
};

Divergences crf_divergences(const ChainProblem& p, const void* hp, const void* hq, const int64_t* lengths,
                            const std::vector<double>& g) {
  const std::size_t B = std::size_t(p.B), edges = std::size_t(p.B * (p.T - 1) * p.C * p.C);
  const std::vector<double> values(B), grads(edges);
  Divergences d{values, values, values, grads, grads, grads, grads, grads, {}};
  reference::chain_entropy(p, hp, lengths, d.entropy.data());
  reference::chain_entropy_backward(p, hp, lengths, g.data(), d.grad_entropy.data());
  reference::chain_cross_entropy(p, hp, hq, lengths, d.cross_entropy.data(), d.kl.data());
  reference::chain_cross_entropy_backward(p, hp, hq, lengths, g.data(), nullptr, d.grad_ce_p.data(),
                                          d.grad_ce_q.data());
  reference::chain_cross_entropy_backward(p, hp, hq, lengths, nullptr, g.data(), d.grad_kl_p.data(),
                                          d.grad_kl_q.data());
  return d;
}

// Upstream gradients: normal, every fourth sequence's 0 (whose gradients are then zeros, whatever its values).
std::vector<double> upstream(std::mt19937_64& rng, int64_t B) {
  std::normal_distribution<double> normal(0, 1);
  std::vector<double> g(static_cast<std::size_t>(B));
  for (std::size_t b = 0; b < g.size(); ++b) g[b] = b % 4 == 3 ? 0.0 : normal(rng);
  return g;
}

// a + sign·b, element by element: two expectations' gradients of the same chain's inputs.
std::vector<double> plus(const std::vector<double>& a, const std::vector<double>& b, double sign = 1) {
  std::vector<double> out(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) out[i] = a[i] + sign * b[i];
  return out;
}

// Entropy, cross-entropy and KL composed from a form's expectations as jitbmm.torch composes them, against `ref`;
// expect(field, p's input, the field's input, gz, gm) runs one on the device. `magnitude`: the scores' scale, by which
// every rounding of their sums grows (the tolerances with it).
template <class Expect>
void check_divergences(const ChainProblem& p, const Divergences& ref, const std::vector<double>& g, Expect expect,
                       int& bad, double magnitude = 1) {
  const int64_t B = p.B;
  const std::vector<double> neg = plus(std::vector<double>(g.size(), 0.0), g, -1), zero(g.size(), 0.0);
  const bool wide = p.dtype == DType::f64, half = dtype_info(p.dtype).size_bytes == 2;
  // A sum of two gradients written in a half type carries both roundings.
  const double value_tol = magnitude * (wide ? 1e-11 : 2e-5),
               grad_tol = magnitude * (wide ? 1e-10 : 1e-4 + half_rounding(p.dtype)),
               sum_tol = grad_tol + magnitude * half_rounding(p.dtype);
  auto grads = [&](const std::string& name, const std::vector<double>& got, const std::vector<double>& want,
                   double tol) { compare(name, got, want, tol, bad, nullptr, 1.0, ref.floors); };
  std::vector<double> got(static_cast<std::size_t>(B));

  // Entropy: log Z − E_p[p's score]; p's gradient is what flows to both inputs.
  const Expectation ep = expect(ExpectationField::given, Input::p, Input::p, g, neg);
  for (int64_t b = 0; b < B; ++b) got[b] = ep.log_z[b] - ep.mean[b];
  compare("entropy", got, ref.entropy, value_tol, bad);
  grads("entropy's gradient", plus(ep.grad_potentials, ep.grad_field), ref.grad_entropy, sum_tol);

  // Cross-entropy: log Z_q − E_p[q's score]. q's log Z (and its gradient, q's marginals) from q's own expectation.
  const Expectation eq = expect(ExpectationField::given, Input::q, Input::q, g, zero),
                    cross = expect(ExpectationField::given, Input::p, Input::q, zero, neg);
  for (int64_t b = 0; b < B; ++b) got[b] = eq.log_z[b] - cross.mean[b];
  compare("cross-entropy", got, ref.cross_entropy, value_tol, bad);
  grads("cross-entropy's gradient of p", cross.grad_potentials, ref.grad_ce_p, grad_tol);
  grads("cross-entropy's gradient of q", plus(cross.grad_field, eq.grad_potentials), ref.grad_ce_q, sum_tol);

  // KL: E_p[p's score − q's] − log Z_p + log Z_q; q's gradient from q's own expectation again (g μq).
  const Expectation kl = expect(ExpectationField::given, Input::p, Input::difference, neg, g);
  for (int64_t b = 0; b < B; ++b) got[b] = kl.mean[b] - kl.log_z[b] + eq.log_z[b];
  // The KL of a half chain sums differences that its stored field p − q has rounded once more: in the HMM form two a
  // step (the transition's and the emission's) where the CRF form's potential has one.
  const double stored_difference = p.form == ChainForm::hmm ? 1e-2 : 2e-3;
  compare("KL", got, ref.kl, half ? stored_difference : value_tol, bad);
  grads("KL's gradient of p", plus(kl.grad_potentials, kl.grad_field), ref.grad_kl_p, half ? 2e-2 : sum_tol);
  grads("KL's gradient of q", plus(eq.grad_potentials, kl.grad_field, -1), ref.grad_kl_q, sum_tol);

  // The fused forms jitbmm.torch uses: q's log Z from the same pass as p's expectation of q's score (the chain
  // field), and with the difference formed in the accumulator type (no second rounding of halves).
  std::vector<double> pair(2 * g.size());
  for (int64_t b = 0; b < B; ++b) pair[b] = 0, pair[B + b] = g[b];
  const Expectation ce = expect(ExpectationField::chain, Input::p, Input::q, pair, neg);
  for (int64_t b = 0; b < B; ++b) got[b] = ce.log_z[B + b] - ce.mean[b];
  compare("fused cross-entropy", got, ref.cross_entropy, value_tol, bad);
  grads("fused cross-entropy's gradient of p", ce.grad_potentials, ref.grad_ce_p, grad_tol);
  grads("fused cross-entropy's gradient of q", ce.grad_field, ref.grad_ce_q, grad_tol);
  for (int64_t b = 0; b < B; ++b) pair[b] = -g[b];
  const Expectation dkl = expect(ExpectationField::difference, Input::p, Input::q, pair, g);
  for (int64_t b = 0; b < B; ++b) got[b] = dkl.mean[b] - dkl.log_z[b] + dkl.log_z[B + b];
  compare("fused KL", got, ref.kl, value_tol, bad);
  grads("fused KL's gradient of p", dkl.grad_potentials, ref.grad_kl_p, grad_tol);
  grads("fused KL's gradient of q", dkl.grad_field, ref.grad_kl_q, grad_tol);
}

struct Case {
  DType dtype;
  int64_t B, T, C;
  bool ragged = false;   // lengths drawn in [1, T]
  bool p_banded = false; // p's potentials −inf where |c − from| > 1
  bool q_banded = false; // q's likewise: where p gives weight q gives none, the cross-entropy and KL are +inf
  double p_special = 0;  // each of p's potentials +inf or NaN with this probability
};

std::string describe(const Case& k) {
  char text[200];
  std::snprintf(text, sizeof text, "%s B=%lld T=%lld C=%lld%s%s%s%s", dtype_info(k.dtype).name, (long long)k.B,
                (long long)k.T, (long long)k.C, k.ragged ? " ragged" : "", k.p_banded ? " p banded" : "",
                k.q_banded ? " q banded" : "", k.p_special > 0 ? " specials" : "");
  return text;
}

void run_case(const Case& k, std::mt19937_64& rng) {
  CAPTURE(describe(k));
  ChainProblem p;
  p.dtype = k.dtype;
  p.B = k.B, p.T = k.T, p.C = k.C;
  p.with_lengths = k.ragged;
  const int64_t edges = p.B * (p.T - 1) * p.C * p.C;
  std::normal_distribution<double> normal(0, 1);
  std::uniform_real_distribution<double> unit(0, 1);
  const int ib = dtype_info(p.dtype).size_bytes;
  std::vector<unsigned char> hp(edges * ib + 1), hq(edges * ib + 1), hd(edges * ib + 1);
  for (int64_t e = 0; e < edges; ++e) {
    const int64_t c = e / p.C % p.C, from = e % p.C;
    const bool off_band = std::llabs(c - from) > 1;
    double x = 1.5 * normal(rng), y = 1.5 * normal(rng);
    if (k.p_banded && off_band) x = -INFINITY;
    if (k.q_banded && off_band) y = -INFINITY;
    if (unit(rng) < k.p_special) x = unit(rng) < 0.5 ? INFINITY : NAN;
    store_element(p.dtype, hp.data(), e, x);
    store_element(p.dtype, hq.data(), e, y);
    // KL's field, p − q, as the caller forms it: in the inputs' dtype, from the values stored.
    store_element(p.dtype, hd.data(), e, load_element(p.dtype, hp.data(), e) - load_element(p.dtype, hq.data(), e));
  }
  std::vector<int64_t> lengths(p.B, p.T);
  if (k.ragged)
    for (int64_t& n : lengths) n = std::uniform_int_distribution<int64_t>(1, p.T)(rng);
  const int64_t* host_lengths = k.ragged ? lengths.data() : nullptr;
  DeviceBuffer d_p(hp.size()), d_q(hq.size()), d_d(hd.size()), d_len = upload(lengths);
  d_p.upload(hp.data(), hp.size());
  d_q.upload(hq.data(), hq.size());
  d_d.upload(hd.data(), hd.size());
  const int64_t* len = k.ragged ? static_cast<const int64_t*>(d_len.get()) : nullptr;

  const std::vector<double> g = upstream(rng, p.B);
  const DeviceBuffer* inputs[] = {&d_p, &d_q, &d_d};
  int bad = 0;
  check_divergences(
      p, crf_divergences(p, hp.data(), hq.data(), host_lengths, g), g,
      [&](ExpectationField field, Input a, Input f, const std::vector<double>& gz, const std::vector<double>& gm) {
        return expect_on_gpu(ChainExpectation::get(p, field), *inputs[int(a)], *inputs[int(f)], len, gz, gm);
      },
      bad);
  CHECK(bad == 0);
}

// The problems ChainExpectation refuses beside `p` (which it takes): another semiring, more than 1024 states, strides
// of the potentials (`stride`, which the HMM form never has).
void expect_refused_beside(const ChainProblem& p, int stride) {
  ChainProblem bad = p;
  bad.semiring = Semiring::max_plus;
  expect_invalid([&] { ChainExpectation::get(bad); }, "chain.semiring");
  bad = p;
  bad.C = 1025;
  expect_invalid([&] { ChainExpectation::get(bad); }, "chain.C");
  bad = p;
  bad.strides[stride] = 1;
  expect_invalid([&] { ChainExpectation::get(bad); }, "chain.strides");
}

} // namespace

TEST_CASE("chain expectations: entropy, cross-entropy and KL against the float64 reference, values and gradients") {
  std::mt19937_64 rng(7500);
  const Case cases[] = {
      {DType::f32, 3, 7, 5},
      {DType::f32, 5, 33, 33, true},
      {DType::f32, 4, 20, 16, true, true},             // p masked: finite, q unmasked
      {DType::f32, 3, 12, 6, false, false, true},      // q masked where p is not: +inf, NaN gradients
      {DType::f32, 4, 9, 7, true, false, false, 0.02}, // p's +inf and NaN: NaN
      {DType::f32, 2, 200, 64, true},
      {DType::f32, 3, 40, 128, true, true}, // on sm_90 clusters of 8 blocks of 16 states, terms a step ahead
      {DType::f32, 2, 9, 256, true},        // clusters of 8 blocks of 32 states
      {DType::f32, 3, 9, 130, true, true},  // clusters of 8 blocks, 17 states each and 11 in the last
      {DType::f32, 2, 5, 600},              // terms loaded round by round
      {DType::f32, 3, 6, 1, true},
      {DType::f32, 4, 1, 4},
      {DType::f64, 3, 12, 33, true},
      {DType::f64, 2, 6, 1024},
      {DType::f16, 3, 10, 8, true},
      {DType::bf16, 3, 10, 8, true, true},
      {DType::bf16, 2, 12, 64, true},
  };
  for (const Case& k : cases) run_case(k, rng);
}

TEST_CASE("chain expectations: B = 0 launches nothing; a bad length gives NaN; bad arguments name themselves") {
  ChainProblem p;
  p.B = 0;
  p.T = 4;
  p.C = 5;
  const ChainExpectation empty = ChainExpectation::get(p);
  CHECK_NOTHROW(empty(nullptr, nullptr, nullptr, nullptr, nullptr));
  CHECK(empty.kernel_name().empty());

  p.B = 2;
  p.with_lengths = true;
  const ChainExpectation plan = ChainExpectation::get(p);
  const std::vector<float> pot(2 * 3 * 25, 0.25f);
  DeviceBuffer d_pot = upload(pot), d_len = upload(std::vector<int64_t>{4, 5}), log_z(8), mean(8),
               saved(plan.saved_bytes()), grad(pot.size() * 4), g = upload(std::vector<float>{1, 1});
  const auto* len = static_cast<const int64_t*>(d_len.get());
  expect_invalid([&] { plan(nullptr, d_pot.get(), len, log_z.get(), mean.get()); }, "potentials");
  expect_invalid([&] { plan(d_pot.get(), nullptr, len, log_z.get(), mean.get()); }, "field");
  expect_invalid([&] { plan(d_pot.get(), d_pot.get(), nullptr, log_z.get(), mean.get()); }, "lengths");
  expect_invalid([&] { plan(d_pot.get(), d_pot.get(), len, nullptr, mean.get()); }, "log_z");
  expect_invalid([&] { plan(d_pot.get(), d_pot.get(), len, log_z.get(), nullptr); }, "mean");
  expect_invalid(
      [&] {
        plan.backward(d_pot.get(), d_pot.get(), len, nullptr, log_z.get(), mean.get(), g.get(), nullptr, grad.get(),
                      nullptr);
      },
      "saved");
  CHECK(plan.backward_workspace_bytes() == 0); // the backward messages are the saving forward's
  plan(d_pot.get(), d_pot.get(), len, log_z.get(), mean.get(), saved.get());
  grad.fill_bytes(0);
  plan.backward(d_pot.get(), d_pot.get(), len, saved.get(), log_z.get(), mean.get(), g.get(), nullptr, grad.get(),
                nullptr);
  float z[2];
  log_z.download(z, sizeof z);
  CHECK(std::isfinite(z[0]));
  CHECK(std::isnan(z[1]));
  // Without saved nothing is kept, and the same values come out.
  DeviceBuffer log_z2(8), mean2(8);
  plan(d_pot.get(), d_pot.get(), len, log_z2.get(), mean2.get());
  float z2[2], m[2], m2[2];
  log_z2.download(z2, sizeof z2);
  mean.download(m, sizeof m);
  mean2.download(m2, sizeof m2);
  CHECK(z2[0] == z[0]);
  CHECK(m2[0] == m[0]);
  CHECK(std::isnan(z2[1]));
  std::vector<float> gr(pot.size());
  grad.download(gr.data(), gr.size() * 4);
  CHECK(std::none_of(gr.begin(), gr.begin() + 75, [](float x) { return std::isnan(x); }));
  CHECK(std::all_of(gr.begin() + 75, gr.end(), [](float x) { return std::isnan(x); }));

  expect_refused_beside(p, 3);
  expect_invalid([&] { ChainExpectation::get(p, static_cast<ExpectationField>(3)); }, "field");
}

namespace {

// A table held contiguous ([extents]) stored in `dtype` on the device at element `strides`, in as many elements as
// they reach, the gaps NaN (a read of one shows).
DeviceBuffer at_strides(DType dtype, const std::vector<double>& v, const std::vector<int64_t>& extents,
                        const int64_t* strides) {
  int64_t span = 1;
  for (std::size_t d = 0; d < extents.size(); ++d) span += (extents[d] - 1) * strides[d];
  std::vector<double> laid(std::size_t(v.empty() ? 0 : span), NAN);
  for (std::size_t i = 0; i < v.size(); ++i) {
    int64_t rest = int64_t(i), at = 0;
    for (std::size_t d = extents.size(); d-- > 0; rest /= extents[d]) at += rest % extents[d] * strides[d];
    laid[std::size_t(at)] = v[i];
  }
  return stored(dtype, laid);
}

// An HMM's tables on the device, laid out as the problem's strides say.
struct DeviceHmm {
  DeviceBuffer emissions, transitions, initial;
  DeviceHmm(const ChainProblem& p, const HmmTables& h) {
    const HmmStrides s = hmm_strides(p);
    emissions = at_strides(p.dtype, h.emissions, {p.B, p.T, p.C}, s.emissions);
    transitions = at_strides(p.dtype, h.transitions, {p.batched_transitions ? p.B : 1, p.C, p.C}, s.transitions);
    initial = at_strides(p.dtype, h.initial, {p.batched_initial ? p.B : 1, p.C}, s.initial);
  }
  HmmInputs inputs() const { return {emissions.get(), transitions.get(), initial.get()}; }
};

// The tables' gradients on the device: contiguous, poisoned, downloaded one table after another.
struct DeviceGradients {
  DType dtype;
  HmmSizes n;
  DeviceBuffer emissions, transitions, initial;
  explicit DeviceGradients(const ChainProblem& p)
      : dtype(p.dtype), n(hmm_sizes(p)), emissions(bytes(n.emissions)), transitions(bytes(n.transitions)),
        initial(bytes(n.initial)) {
    for (DeviceBuffer* d : {&emissions, &transitions, &initial}) d->fill_bytes(poison_byte(dtype));
  }
  std::size_t bytes(int64_t count) const { return std::size_t(count) * dtype_info(dtype).size_bytes + 1; }
  HmmGradients gradients() const { return {emissions.get(), transitions.get(), initial.get()}; }
  HmmTables downloaded() const {
    return {download_as_double(emissions, dtype, n.emissions), download_as_double(transitions, dtype, n.transitions),
            download_as_double(initial, dtype, n.initial)};
  }
};

Expectation expect_hmm_on_gpu(const ChainExpectation& plan, const DeviceHmm& hmm, const DeviceHmm& field,
                              const int64_t* lengths, const std::vector<double>& gz, const std::vector<double>& gm) {
  const Outputs o(plan, gz, gm);
  const DeviceGradients gp(plan.problem()), gf(plan.problem());
  plan(hmm.inputs(), field.inputs(), lengths, o.log_z.get(), o.mean.get(), o.saved.get());
  plan.backward(hmm.inputs(), field.inputs(), lengths, o.saved.get(), o.log_z.get(), o.mean.get(), o.gz.get(),
                o.gm.get(), gp.gradients(), gf.gradients());
  Expectation e = o.values(plan);
  e.grad_potentials = flattened(gp.downloaded());
  e.grad_field = flattened(gf.downloaded());
  return e;
}

// The HMM form's references: the CRF form's of the same chain with a start edge (crf_with_start), its gradients
// mapped to the tables. A table entry's error floor is the size of what it sums: its edges' marginals under p and q,
// each times its sequence's |g|.
Divergences hmm_divergences(const ChainProblem& p, const HmmTables& hp, const HmmTables& hq,
                            const std::vector<int64_t>& lengths, const std::vector<double>& g) {
  ChainProblem crf = crf_with_start(p);
  crf.dtype = DType::f64;
  const std::vector<double> pp = potentials_with_start(p, hp), pq = potentials_with_start(p, hq);
  const std::vector<int64_t> with_start = lengths_with_start(lengths);
  Divergences d = crf_divergences(crf, pp.data(), pq.data(), with_start.data(), g);
  for (std::vector<double>* v : {&d.grad_entropy, &d.grad_ce_p, &d.grad_ce_q, &d.grad_kl_p, &d.grad_kl_q})
    *v = flattened(table_gradients(p, *v));
  std::vector<double> size(g.size()), mu(pp.size()), mu_q(pp.size());
  for (std::size_t b = 0; b < g.size(); ++b) size[b] = std::fabs(g[b]);
  reference::chain_backward(crf, pp.data(), with_start.data(), size.data(), mu.data());
  reference::chain_backward(crf, pq.data(), with_start.data(), size.data(), mu_q.data());
  d.floors = flattened(table_gradients(p, plus(mu, mu_q)));
  for (double& f : d.floors) f = std::max(1.0, f); // 1 where a sequence without a distribution made it NaN
  return d;
}

constexpr double kWideScale = 25;

struct HmmCase {
  enum : unsigned {
    kRagged = 1,             // lengths drawn in [1, T], the second sequence's 1
    kBatchedTransitions = 2, // transitions [B][C][C] (else shared)
    kBatchedInitial = 4,     // initial [B][C] (else shared)
    kStrided = 8,            // emissions stored [T][C][B], each transition table transposed, initial with gaps
    kPBanded = 16,           // p's transitions −inf where |c − from| > 1
    kQBanded = 32,           // q's likewise: where p gives weight q gives none, the cross-entropy and KL are +inf
    kWide = 64,           // both chains' transitions ×kWideScale: rows whose large transitions lie far from α's peak
    kTableSpecials = 128, // p's first table holds a NaN and a +inf, q's last a NaN: bad tiles beside good ones
  };
  DType dtype;
  int64_t B, T, C;
  unsigned flags = 0;
  double p_special = 0; // each of p's emissions +inf or NaN with this probability
  bool has(unsigned f) const { return (flags & f) != 0; }
};

std::string describe(const HmmCase& k) {
  char text[200];
  std::snprintf(text, sizeof text, "%s B=%lld T=%lld C=%lld%s%s%s%s%s%s%s%s%s", dtype_info(k.dtype).name,
                (long long)k.B, (long long)k.T, (long long)k.C, k.has(HmmCase::kRagged) ? " ragged" : "",
                k.has(HmmCase::kBatchedTransitions) ? " batched transitions" : "",
                k.has(HmmCase::kBatchedInitial) ? " batched initial" : "", k.has(HmmCase::kStrided) ? " strided" : "",
                k.has(HmmCase::kPBanded) ? " p banded" : "", k.has(HmmCase::kQBanded) ? " q banded" : "",
                k.has(HmmCase::kWide) ? " wide" : "", k.p_special > 0 ? " specials" : "",
                k.has(HmmCase::kTableSpecials) ? " table specials" : "");
  return text;
}

ChainProblem hmm_problem(DType dtype, int64_t B, int64_t T, int64_t C, unsigned flags = 0) {
  ChainProblem p;
  p.dtype = dtype;
  p.form = ChainForm::hmm;
  p.B = B, p.T = T, p.C = C;
  p.with_lengths = (flags & HmmCase::kRagged) != 0;
  p.batched_transitions = (flags & HmmCase::kBatchedTransitions) != 0;
  p.batched_initial = (flags & HmmCase::kBatchedInitial) != 0;
  if (flags & HmmCase::kStrided) {
    const int64_t emissions[] = {1, C * B, B}, transitions[] = {p.batched_transitions ? C * C + 3 : 0, 1, C},
                  initial[] = {p.batched_initial ? 1 : 0, p.batched_initial ? B : 2};
    std::copy(std::begin(emissions), std::end(emissions), p.emission_strides);
    std::copy(std::begin(transitions), std::end(transitions), p.transition_strides);
    std::copy(std::begin(initial), std::end(initial), p.initial_strides);
  }
  return p;
}

void run_hmm_case(const HmmCase& k, std::mt19937_64& rng) {
  CAPTURE(describe(k));
  const ChainProblem p = hmm_problem(k.dtype, k.B, k.T, k.C, k.flags);
  HmmTables hp = random_hmm_tables(rng, p, 0.0, false), hq = random_hmm_tables(rng, p, 0.0, false);
  for (std::size_t i = 0; i < hp.transitions.size(); ++i) {
    const int64_t c = int64_t(i) / p.C % p.C, from = int64_t(i) % p.C;
    if (k.has(HmmCase::kWide)) hp.transitions[i] *= kWideScale, hq.transitions[i] *= kWideScale;
    if (std::llabs(c - from) <= 1) continue;
    if (k.has(HmmCase::kPBanded)) hp.transitions[i] = -kInf;
    if (k.has(HmmCase::kQBanded)) hq.transitions[i] = -kInf;
  }
  if (k.has(HmmCase::kTableSpecials)) { // [b][c][from]: p's in the first and last rows of tiles, q's in the last
    const int64_t C = p.C, q_table = p.batched_transitions ? p.B - 1 : 0;
    hp.transitions[(C - 1) * C] = NAN, hp.transitions[C + 1] = kInf;
    hq.transitions[(q_table * C + C / 2) * C + C - 1] = NAN;
  }
  std::uniform_real_distribution<double> unit(0, 1);
  for (double& x : hp.emissions)
    if (unit(rng) < k.p_special) x = unit(rng) < 0.5 ? kInf : NAN;
  // The values the kernels read, and KL's field p − q as the caller forms it: from the values stored.
  hp = rounded(p.dtype, hp), hq = rounded(p.dtype, hq);
  const HmmTables hd{plus(hp.emissions, hq.emissions, -1), plus(hp.transitions, hq.transitions, -1),
                     plus(hp.initial, hq.initial, -1)};
  std::vector<int64_t> lengths = random_lengths(rng, p);
  if (k.has(HmmCase::kRagged) && p.B > 1) lengths[0] = p.T, lengths[1] = 1;
  const DeviceHmm d_p(p, hp), d_q(p, hq), d_d(p, hd);
  const DeviceBuffer d_len = upload(lengths);
  const int64_t* len = p.with_lengths ? static_cast<const int64_t*>(d_len.get()) : nullptr;

  const std::vector<double> g = upstream(rng, p.B);
  const DeviceHmm* inputs[] = {&d_p, &d_q, &d_d};
  int bad = 0;
  check_divergences(
      p, hmm_divergences(p, hp, hq, lengths, g), g,
      [&](ExpectationField field, Input a, Input f, const std::vector<double>& gz, const std::vector<double>& gm) {
        return expect_hmm_on_gpu(ChainExpectation::get(p, field), *inputs[int(a)], *inputs[int(f)], len, gz, gm);
      },
      bad, k.has(HmmCase::kWide) ? kWideScale : 1.0);
  CHECK(bad == 0);
}

} // namespace

TEST_CASE("chain expectations, the HMM form: entropy, cross-entropy and KL from the tables against the float64 "
          "reference, values and the gradients of both chains' tables") {
  std::mt19937_64 rng(7501);
  using K = HmmCase;
  const HmmCase cases[] = {
      {DType::f32, 3, 7, 5},
      {DType::f32, 4, 1, 5, K::kBatchedInitial}, // one position: a distribution over states
      {DType::f32, 4, 2, 5, K::kRagged | K::kBatchedTransitions | K::kBatchedInitial},
      {DType::f32, 5, 24, 33, K::kRagged | K::kBatchedInitial | K::kStrided},
      {DType::f32, 4, 20, 16, K::kRagged | K::kBatchedTransitions | K::kPBanded}, // p masked: finite
      {DType::f32, 3, 12, 6, K::kQBanded},                              // q masked where p is not: +inf, NaN gradients
      {DType::f32, 4, 9, 7, K::kRagged | K::kBatchedTransitions, 0.02}, // p's +inf and NaN: NaN
      {DType::f32, 5, 9, 7, K::kRagged, 0.01},                          // the same in a shared table's sums
      {DType::f32, 2, 64, 64, K::kRagged | K::kStrided},
      {DType::f32, 3, 9, 130, K::kRagged | K::kPBanded | K::kStrided | K::kBatchedTransitions}, // clusters on sm_90
      {DType::f32, 3, 6, 130, K::kRagged | K::kQBanded},
      {DType::f32, 3, 6, 1, K::kRagged},
      {DType::f32, 70, 5, 4, K::kRagged}, // shared tables summed over more sequences than a warp has lanes
      // The transitions' sums: parts of several batches of steps, tiles cut by C, and (wide) rows whose steps take
      // their terms one by one beside factored ones.
      {DType::f32, 16, 50, 100, K::kRagged},
      {DType::f32, 6, 12, 100, K::kWide | K::kStrided},
      {DType::f32, 9, 12, 37, K::kRagged | K::kWide | K::kPBanded},
      {DType::f32, 4, 12, 70, K::kRagged | K::kWide | K::kBatchedTransitions},
      {DType::f64, 3, 20, 40, K::kRagged | K::kWide},
      // NaN and +inf inside the transition tables: the sequences (or the shared sum) they reach are NaN, the others'
      // tiles are summed as before.
      {DType::f32, 4, 12, 70, K::kRagged | K::kBatchedTransitions | K::kTableSpecials},
      {DType::f32, 4, 12, 70, K::kWide | K::kBatchedTransitions | K::kStrided | K::kTableSpecials},
      {DType::f32, 3, 9, 40, K::kRagged | K::kTableSpecials},
      {DType::f64, 3, 10, 37, K::kBatchedTransitions | K::kTableSpecials},
      {DType::f64, 3, 12, 33, K::kRagged | K::kBatchedTransitions | K::kBatchedInitial | K::kStrided},
      {DType::f64, 2, 6, 130, K::kRagged},
      {DType::f16, 3, 10, 8, K::kRagged | K::kStrided},
      {DType::bf16, 3, 10, 8, K::kRagged | K::kPBanded},
      {DType::bf16, 2, 12, 64, K::kRagged | K::kBatchedTransitions | K::kBatchedInitial | K::kStrided},
      {DType::bf16, 3, 2, 5, K::kRagged},
  };
  for (const HmmCase& k : cases) run_hmm_case(k, rng);
}

TEST_CASE("chain expectations, the HMM form: B = 0 clears shared tables' gradients; a bad length gives NaN; a "
          "gradient asked alone is the same; bad arguments name themselves") {
  // No sequence: nothing is read, and a shared table's gradient is a sum of nothing (per-sequence ones are empty).
  ChainProblem none = hmm_problem(DType::f32, 0, 4, 5, HmmCase::kBatchedInitial);
  const ChainExpectation empty = ChainExpectation::get(none);
  CHECK(empty.kernel_name().empty());
  CHECK_NOTHROW(empty(HmmInputs{}, HmmInputs{}, nullptr, nullptr, nullptr));
  DeviceBuffer g_tr(25 * 4), g_in(5 * 4), f_tr(25 * 4);
  for (DeviceBuffer* d : {&g_tr, &g_in, &f_tr}) d->fill_bytes(poison_byte(DType::f32));
  empty.backward(HmmInputs{}, HmmInputs{}, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                 HmmGradients{nullptr, g_tr.get(), g_in.get()}, HmmGradients{nullptr, f_tr.get(), nullptr});
  std::vector<float> tr(25), in(5);
  for (const DeviceBuffer* d : {&g_tr, &f_tr}) {
    d->download(tr.data(), 100);
    CHECK(std::all_of(tr.begin(), tr.end(), [](float x) { return x == 0; }));
  }
  g_in.download(in.data(), 20); // per sequence: left as it was
  CHECK(std::none_of(in.begin(), in.end(), [](float x) { return x == 0; }));

  // Lengths {4, 5} of T = 4: the second sequence's log Z and mean NaN, and every gradient it reaches (its emissions,
  // and the shared tables, which sum it).
  const ChainProblem p = hmm_problem(DType::f32, 2, 4, 5, HmmCase::kRagged);
  const ChainExpectation plan = ChainExpectation::get(p);
  CHECK(plan.kernel_name().find("_hmm") != std::string::npos);
  std::mt19937_64 rng(7502);
  const HmmTables h = random_hmm_tables(rng, p, 0.0, false);
  const DeviceHmm d(p, h);
  DeviceBuffer d_len = upload(std::vector<int64_t>{4, 5}), log_z(8), mean(8), saved(plan.saved_bytes()),
               g = stored(DType::f32, {1.0, 1.0});
  const auto* len = static_cast<const int64_t*>(d_len.get());
  const HmmInputs in_p = d.inputs();
  plan(in_p, in_p, len, log_z.get(), mean.get(), saved.get());
  const DeviceGradients grads(p);
  plan.backward(in_p, in_p, len, saved.get(), log_z.get(), mean.get(), g.get(), g.get(), grads.gradients(),
                HmmGradients{});
  const std::vector<double> z = download_as_double(log_z, DType::f32, 2), m = download_as_double(mean, DType::f32, 2);
  CHECK(std::isfinite(z[0]));
  CHECK(std::isfinite(m[0]));
  CHECK(std::isnan(z[1]));
  CHECK(std::isnan(m[1]));
  const HmmTables got = grads.downloaded();
  auto nan = [](double x) { return std::isnan(x); };
  CHECK(std::none_of(got.emissions.begin(), got.emissions.begin() + 20, nan));
  CHECK(std::all_of(got.emissions.begin() + 20, got.emissions.end(), nan));
  CHECK(std::all_of(got.transitions.begin(), got.transitions.end(), nan));
  CHECK(std::all_of(got.initial.begin(), got.initial.end(), nan));
  // Without saved nothing is kept, and the same values come out.
  DeviceBuffer log_z2(8), mean2(8);
  plan(in_p, in_p, len, log_z2.get(), mean2.get());
  CHECK(download_as_double(log_z2, DType::f32, 1)[0] == z[0]);
  CHECK(download_as_double(mean2, DType::f32, 1)[0] == m[0]);

  // Each of the six gradients asked for alone (the others null) is the one computed beside the others, bit for bit.
  const ChainProblem q = hmm_problem(DType::f32, 3, 5, 4);
  const HmmTables hq = random_hmm_tables(rng, q, 0.0, false), fq = random_hmm_tables(rng, q, 0.0, false);
  const DeviceHmm dq(q, hq), dfq(q, fq);
  const ChainExpectation chain = ChainExpectation::get(q, ExpectationField::chain);
  DeviceBuffer q_log_z(24), q_mean(12), q_saved(chain.saved_bytes()),
      q_gm = stored(DType::f32, {0.5, -1.0, 2.0}), q_gz = stored(DType::f32, {0.5, -1.0, 2.0, 1.5, 0.25, -0.75});
  chain(dq.inputs(), dfq.inputs(), nullptr, q_log_z.get(), q_mean.get(), q_saved.get());
  auto backward = [&](const HmmGradients& gp, const HmmGradients& gf) {
    chain.backward(dq.inputs(), dfq.inputs(), nullptr, q_saved.get(), q_log_z.get(), q_mean.get(), q_gz.get(),
                   q_gm.get(), gp, gf);
  };
  const DeviceGradients all_p(q), all_f(q);
  backward(all_p.gradients(), all_f.gradients());
  auto only = [](const HmmGradients& all, int table) {
    return HmmGradients{table == 0 ? all.emissions : nullptr, table == 1 ? all.transitions : nullptr,
                        table == 2 ? all.initial : nullptr};
  };
  std::vector<double> HmmTables::*const tables[] = {&HmmTables::emissions, &HmmTables::transitions,
                                                    &HmmTables::initial};
  for (int i = 0; i < 6; ++i) {
    CAPTURE(i); // p's emissions, transitions, initial, then the field's
    const DeviceGradients alone_p(q), alone_f(q);
    backward(i < 3 ? only(alone_p.gradients(), i) : HmmGradients{},
             i < 3 ? HmmGradients{} : only(alone_f.gradients(), i - 3));
    CHECK((i < 3 ? alone_p : alone_f).downloaded().*tables[i % 3] ==
          (i < 3 ? all_p : all_f).downloaded().*tables[i % 3]);
  }

  // The other form's calls, missing tables, misaligned gradients and what get() refuses, each named.
  ChainProblem crf_problem;
  crf_problem.B = 2, crf_problem.T = 4, crf_problem.C = 5;
  const ChainExpectation crf = ChainExpectation::get(crf_problem);
  expect_invalid([&] { crf(in_p, in_p, nullptr, log_z.get(), mean.get()); }, "hmm");
  expect_invalid([&] { plan(d.emissions.get(), d.emissions.get(), len, log_z.get(), mean.get()); }, "potentials");
  expect_invalid(
      [&] {
        plan.backward(d.emissions.get(), d.emissions.get(), len, saved.get(), log_z.get(), mean.get(), g.get(), nullptr,
                      grads.emissions.get(), nullptr);
      },
      "potentials");
  expect_invalid(
      [&] {
        plan(HmmInputs{nullptr, in_p.transitions, in_p.initial}, in_p, len, log_z.get(), mean.get());
      },
      "hmm.emissions");
  const HmmInputs missing[] = {{nullptr, in_p.transitions, in_p.initial},
                               {in_p.emissions, nullptr, in_p.initial},
                               {in_p.emissions, in_p.transitions, nullptr}};
  const char* names[] = {"field.emissions", "field.transitions", "field.initial"};
  for (int i = 0; i < 3; ++i) {
    expect_invalid([&] { plan(in_p, missing[i], len, log_z.get(), mean.get()); }, names[i]);
    expect_invalid(
        [&] {
          plan.backward(in_p, missing[i], len, saved.get(), log_z.get(), mean.get(), g.get(), g.get(),
                        grads.gradients(), HmmGradients{});
        },
        names[i]);
  }
  void* const odd = static_cast<char*>(grads.emissions.get()) + 1;
  auto backward_p = [&](const HmmGradients& gp, const HmmGradients& gf, const Workspace& work = {}) {
    plan.backward(in_p, in_p, len, saved.get(), log_z.get(), mean.get(), g.get(), g.get(), gp, gf, nullptr, work);
  };
  expect_invalid([&] { backward_p(HmmGradients{odd, nullptr, nullptr}, HmmGradients{}); }, "grad_hmm.emissions");
  expect_invalid([&] { backward_p(HmmGradients{}, HmmGradients{nullptr, nullptr, odd}); }, "grad_field.initial");
  expect_invalid([&] { backward_p(grads.gradients(), HmmGradients{}, Workspace{saved.get(), 8}); }, "workspace");
  expect_invalid(
      [&] {
        plan.backward(in_p, in_p, len, nullptr, log_z.get(), mean.get(), g.get(), g.get(), grads.gradients(),
                      HmmGradients{});
      },
      "saved");
  expect_refused_beside(p, 0);
}
