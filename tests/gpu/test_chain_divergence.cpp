// Chain expectations on the GPU (ChainExpectation) composed into entropy, cross-entropy and KL as jitbmm.torch
// composes them, against the CPU reference (reference/chain_divergence*.cpp) in double: values and the gradients of
// both chains' potentials, on odd sizes, ragged lengths, −inf masks, ±inf and NaN, half inputs; outputs poisoned
// first so that an element the kernels skip shows.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "chain_arrays.hpp"
#include "expect.hpp"
#include "jitbmm/chain_expectation.hpp"
#include "jitbmm/reference.hpp"
#include "runtime/device_memory.hpp"

using namespace jitbmm;
using test::compare;
using test::download_as_double;
using test::expect_invalid;
using test::upload;

namespace {

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

// One chain expectation on the device: log Z ([B], or [2][B] with log Z_q where the field is a chain), E[F] and, for
// upstream gradients gz (as log Z) and gm, both inputs' gradients.
struct Expectation {
  std::vector<double> log_z, mean, grad_potentials, grad_field;
};

Expectation expect_on_gpu(const ChainExpectation& plan, const DeviceBuffer& pot, const DeviceBuffer& field,
                          const int64_t* lengths, const std::vector<double>& gz, const std::vector<double>& gm) {
  const ChainProblem& p = plan.problem();
  const DType out = chain_output_dtype(p);
  const int64_t B = p.B, edges = p.B * (p.T - 1) * p.C * p.C;
  const int64_t Z = plan.field() == ExpectationField::given ? B : 2 * B; // log Z's elements
  REQUIRE(int64_t(gz.size()) == Z);
  const int ob = dtype_info(out).size_bytes, ib = dtype_info(p.dtype).size_bytes;
  DeviceBuffer log_z(Z * ob + 1), mean(B * ob + 1), saved(plan.saved_bytes() + 1), d_gz(Z * ob + 1), d_gm(B * ob + 1),
      gp(edges * ib + 1), gf(edges * ib + 1);
  for (DeviceBuffer* d : {&log_z, &mean}) d->fill_bytes(test::poison_byte(out));
  for (DeviceBuffer* d : {&gp, &gf}) d->fill_bytes(test::poison_byte(p.dtype));
  saved.fill_bytes(0xff); // NaN: a backward that reads what the forward did not write shows
  std::vector<unsigned char> host(Z * ob + 1);
  for (int64_t b = 0; b < Z; ++b) store_element(out, host.data(), b, gz[b]);
  d_gz.upload(host.data(), host.size());
  for (int64_t b = 0; b < B; ++b) store_element(out, host.data(), b, gm[b]);
  d_gm.upload(host.data(), B * ob + 1);
  plan(pot.get(), field.get(), lengths, log_z.get(), mean.get(), saved.get());
  plan.backward(pot.get(), field.get(), lengths, saved.get(), log_z.get(), mean.get(), d_gz.get(), d_gm.get(), gp.get(),
                gf.get());
  return {download_as_double(log_z, out, Z), download_as_double(mean, out, B), download_as_double(gp, p.dtype, edges),
          download_as_double(gf, p.dtype, edges)};
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

  std::vector<double> g(p.B);
  for (double& x : g) x = normal(rng);
  std::vector<double> neg(g), zero(p.B, 0.0);
  for (double& x : neg) x = -x;
  const ChainExpectation plan = ChainExpectation::get(p);
  const bool wide = p.dtype == DType::f64, half = dtype_info(p.dtype).size_bytes == 2;
  const double value_tol = wide ? 1e-11 : 2e-5, grad_tol = wide ? 1e-10 : 1e-4 + test::half_rounding(p.dtype);
  int bad = 0;

  // Entropy: log Z − E_p[p's score]; p's gradient is what flows to both inputs.
  std::vector<double> ref(p.B), ref_gp(edges), ref_gq(edges);
  reference::chain_entropy(p, hp.data(), host_lengths, ref.data());
  reference::chain_entropy_backward(p, hp.data(), host_lengths, g.data(), ref_gp.data());
  Expectation ep = expect_on_gpu(plan, d_p, d_p, len, g, neg);
  std::vector<double> got(p.B), got_gp(edges), got_gq(edges);
  for (int64_t b = 0; b < p.B; ++b) got[b] = ep.log_z[b] - ep.mean[b];
  for (int64_t e = 0; e < edges; ++e) got_gp[e] = ep.grad_potentials[e] + ep.grad_field[e];
  compare("entropy", got, ref, value_tol, bad);
  compare("entropy's gradient", got_gp, ref_gp, grad_tol, bad);

  // Cross-entropy: log Z_q − E_p[q's score]. q's log Z (and its gradient, q's marginals) from q's own expectation.
  std::vector<double> ref_kl(p.B);
  reference::chain_cross_entropy(p, hp.data(), hq.data(), host_lengths, ref.data(), ref_kl.data());
  reference::chain_cross_entropy_backward(p, hp.data(), hq.data(), host_lengths, g.data(), nullptr, ref_gp.data(),
                                          ref_gq.data());
  const Expectation eq = expect_on_gpu(plan, d_q, d_q, len, g, zero);
  const Expectation cross = expect_on_gpu(plan, d_p, d_q, len, zero, neg);
  for (int64_t b = 0; b < p.B; ++b) got[b] = eq.log_z[b] - cross.mean[b];
  for (int64_t e = 0; e < edges; ++e) {
    got_gp[e] = cross.grad_potentials[e];
    got_gq[e] = cross.grad_field[e] + eq.grad_potentials[e];
  }
  compare("cross-entropy", got, ref, value_tol, bad);
  compare("cross-entropy's gradient of p", got_gp, ref_gp, grad_tol, bad);
  compare("cross-entropy's gradient of q", got_gq, ref_gq, grad_tol, bad);

  // KL: E_p[p's score − q's] − log Z_p + log Z_q.
  reference::chain_cross_entropy_backward(p, hp.data(), hq.data(), host_lengths, nullptr, g.data(), ref_gp.data(),
                                          ref_gq.data());
  const Expectation kl = expect_on_gpu(plan, d_p, d_d, len, neg, g);
  for (int64_t b = 0; b < p.B; ++b) got[b] = kl.mean[b] - kl.log_z[b] + eq.log_z[b];
  for (int64_t e = 0; e < edges; ++e) {
    got_gp[e] = kl.grad_potentials[e] + kl.grad_field[e];
    got_gq[e] = -kl.grad_field[e] + eq.grad_potentials[e];
  }
  // The KL of a half chain sums differences that its stored field p − q has rounded once more.
  compare("KL", got, ref_kl, half ? 2e-3 : value_tol, bad);
  compare("KL's gradient of p", got_gp, ref_gp, half ? 2e-2 : grad_tol, bad);
  compare("KL's gradient of q", got_gq, ref_gq, grad_tol, bad);

  // The fused forms jitbmm.torch uses: q's log Z from the same pass as p's expectation of q's score (the chain
  // field), and with the difference formed in the accumulator type (no second rounding of halves).
  std::vector<double> pair(2 * p.B);
  for (int64_t b = 0; b < p.B; ++b) pair[b] = 0, pair[p.B + b] = g[b];
  const Expectation ce = expect_on_gpu(ChainExpectation::get(p, ExpectationField::chain), d_p, d_q, len, pair, neg);
  reference::chain_cross_entropy_backward(p, hp.data(), hq.data(), host_lengths, g.data(), nullptr, ref_gp.data(),
                                          ref_gq.data());
  for (int64_t b = 0; b < p.B; ++b) got[b] = ce.log_z[p.B + b] - ce.mean[b];
  compare("fused cross-entropy", got, ref, value_tol, bad);
  compare("fused cross-entropy's gradient of p", ce.grad_potentials, ref_gp, grad_tol, bad);
  compare("fused cross-entropy's gradient of q", ce.grad_field, ref_gq, grad_tol, bad);
  for (int64_t b = 0; b < p.B; ++b) pair[b] = -g[b];
  const Expectation dkl = expect_on_gpu(ChainExpectation::get(p, ExpectationField::difference), d_p, d_q, len, pair, g);
  reference::chain_cross_entropy_backward(p, hp.data(), hq.data(), host_lengths, nullptr, g.data(), ref_gp.data(),
                                          ref_gq.data());
  for (int64_t b = 0; b < p.B; ++b) got[b] = dkl.mean[b] - dkl.log_z[b] + dkl.log_z[p.B + b];
  compare("fused KL", got, ref_kl, value_tol, bad);
  compare("fused KL's gradient of p", dkl.grad_potentials, ref_gp, grad_tol, bad);
  compare("fused KL's gradient of q", dkl.grad_field, ref_gq, grad_tol, bad);
  CHECK(bad == 0);
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
  expect_invalid(
      [&] {
        plan.backward(d_pot.get(), d_pot.get(), len, saved.get(), log_z.get(), mean.get(), g.get(), nullptr, grad.get(),
                      nullptr, nullptr, Workspace{saved.get(), 8});
      },
      "workspace");
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

  ChainProblem bad = p;
  bad.semiring = Semiring::max_plus;
  expect_invalid([&] { ChainExpectation::get(bad); }, "chain.semiring");
  bad = p;
  bad.C = 1025;
  expect_invalid([&] { ChainExpectation::get(bad); }, "chain.C");
  bad = p;
  bad.strides[3] = 1;
  expect_invalid([&] { ChainExpectation::get(bad); }, "chain.strides");
  bad = p;
  bad.form = ChainForm::hmm;
  bad.with_lengths = true;
  expect_invalid([&] { ChainExpectation::get(bad); }, "chain.form");
  expect_invalid([&] { ChainExpectation::get(p, static_cast<ExpectationField>(3)); }, "field");
}
