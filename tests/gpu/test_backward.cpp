// Backward kernels against the CPU reference's gradients: every variant on odd shapes, edge values, strided,
// transposed and broadcast layouts; the plan API (argmax given or recomputed, errors); a central finite-difference
// check in fp64.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>

#include "adversarial.hpp"
#include "cache/disk_cache.hpp"
#include "expect.hpp"
#include "feature_level.hpp"
#include "grad_case.hpp"
#include "needs.hpp"
#include "runtime/tuner/autotune.hpp"
#include "variants.hpp"

using namespace jitbmm;
using test::expect_invalid;

namespace {

using test::problem_for;

void expect_ok(const test::CaseResult& r, const Problem& p, const KernelSpec& spec, uint64_t seed) {
  test::report_failure(r, p, spec, seed);
  CHECK(r.ok());
}

// Layouts rotated through the cases: row-major, transposed, padded, broadcast a or b.
void set_layout(Problem& p, int v) {
  const Shape& s = p.shape;
  p.a_strides.reset(), p.b_strides.reset(), p.out_strides.reset();
  switch (v % 5) {
  case 1:
    p.a_strides = column_major(s.M, s.K);
    p.out_strides = column_major(s.M, s.N);
    break;
  case 2:
    p.b_strides = Strides{s.K * (s.N + 3), s.N + 3, 1};
    p.out_strides = Strides{s.M * (s.N + 5), s.N + 5, 1};
    break;
  case 3:
    p.a_strides = Strides{0, s.K, 1}; // one a for every batch: grad_a sums over the batch
    break;
  case 4:
    p.b_strides = Strides{0, 1, s.K}; // broadcast and transposed
    p.a_strides = Strides{s.M * s.K * 2, s.K * 2, 2};
    break;
  default:
    break;
  }
}

} // namespace

TEST_CASE("every backward variant matches the reference gradients on odd shapes, layouts and edge values") {
  const Shape shapes[] = {{1, 1, 1, 1}, {3, 17, 33, 29}, {2, 40, 70, 3}, {1, 129, 5, 65}, {2, 5, 0, 7}, {2, 6, 9, 0}};
  uint64_t seed = 30000;
  int cases = 0;
  for (const KernelSpec& spec : test::runnable_here(test::grad_variants()))
    for (const Shape& shape : shapes)
      for (int flavour = 0; flavour < 3; ++flavour) {
        Problem p = problem_for(spec, shape);
        set_layout(p, cases);
        if (spec.strategy == Strategy::exp_matmul) { // a shape with no outputs to reduce over is refused (tested below)
          try {
            check_spec_fits(spec, grad_problem(p));
          } catch (const std::invalid_argument&) {
            ++cases;
            continue;
          }
        }
        std::mt19937_64 rng(++seed);
        expect_ok(test::run_grad_case(p, spec, rng, flavour), p, spec, seed);
        ++cases;
      }
  MESSAGE(cases << " backward cases");
}

namespace {

struct Buffers {
  test::GradInputs in;
  DeviceBuffer ga, gb;
  test::HostTensor ha, hb;
};

// Runs plan.backward (with or without the forward's argmax) for both gradients, and reads them back.
Buffers plan_backward_on(const Problem& p, test::GradInputs in, bool pass_argmax, bool caller_workspace) {
  Buffers x{std::move(in), {}, {}, {}, {}};
  const Shape& s = p.shape;
  x.ha.dtype = x.hb.dtype = p.dtype;
  x.ha.elements = test::storage_elements(s.B, s.M, s.K, p.a());
  x.hb.elements = test::storage_elements(s.B, s.K, s.N, p.b());
  x.ha.bytes.resize(x.ha.elements * dtype_info(p.dtype).size_bytes);
  x.hb.bytes.resize(x.hb.elements * dtype_info(p.dtype).size_bytes);
  x.ga = DeviceBuffer(x.ha.bytes.size()), x.gb = DeviceBuffer(x.hb.bytes.size());
  x.ga.fill_bytes(test::poison_byte(p.dtype));
  x.gb.fill_bytes(test::poison_byte(p.dtype));
  const SemiringBMM plan = SemiringBMM::get(p);
  const int32_t* arg = pass_argmax && !x.in.argmax.empty() ? static_cast<const int32_t*>(x.in.darg.get()) : nullptr;
  // The caller's workspace, poisoned (what it holds must not matter), or jitbmm's pool.
  DeviceBuffer workspace(caller_workspace ? plan.backward_workspace_bytes(true, true, arg != nullptr) : 0);
  if (caller_workspace) workspace.fill_bytes(0xff);
  plan.backward(x.in.da.get(), x.in.db.get(), x.in.dout.get(), arg, x.in.dg.get(), x.ga.get(), x.gb.get(), nullptr,
                Workspace{workspace.get(), workspace.size()});
  check(driver().cuCtxSynchronize(), "cuCtxSynchronize after backward");
  x.ga.download(x.ha.data(), x.ha.bytes.size());
  x.gb.download(x.hb.data(), x.hb.bytes.size());
  return x;
}

Buffers plan_backward(const Problem& p, std::mt19937_64& rng, int flavour, bool pass_argmax, bool caller_workspace) {
  return plan_backward_on(p, test::make_grad_inputs(p, rng, flavour), pass_argmax, caller_workspace);
}

} // namespace

TEST_CASE("plan.backward: both gradients, every semiring and dtype, argmax given or recomputed, any workspace") {
  uint64_t seed = 40000;
  for (const KernelSpec& kind : test::problem_kinds()) {
    if (kind.with_argmax) continue;
    Problem p = problem_for(kind, {3, 37, 45, 29});
    set_layout(p, static_cast<int>(seed));
    for (int mode = 0; mode < 4; ++mode) {
      const bool pass_argmax = mode % 2 == 0, caller_workspace = mode >= 2;
      std::mt19937_64 rng(++seed);
      CAPTURE(describe(p));
      CAPTURE(pass_argmax);
      CAPTURE(caller_workspace);
      Buffers x = plan_backward(p, rng, static_cast<int>(seed % 3), pass_argmax, caller_workspace);
      const KernelSpec spec_a = SemiringBMM::get(p).grad_spec(Pass::grad_a);
      expect_ok(test::check_gradient(p, Pass::grad_a, x.in, x.ha), p, spec_a, seed);
      expect_ok(test::check_gradient(p, Pass::grad_b, x.in, x.hb), p, SemiringBMM::get(p).grad_spec(Pass::grad_b),
                seed);
    }
  }
}

// A plan whose two passes are both exp_matmul (stored decisions): grad_b runs second and takes the line maxima and
// G maximum grad_a left in their shared workspace (StrategyDef::second_pass_launches). Against the reference in every
// layout, f32 and bf16, on inputs whose guard gives outputs up (±inf and NaN; maxima far apart, so that the repair
// runs in both passes), in jitbmm's pool and in a poisoned workspace of the caller's.
TEST_CASE("plan.backward with exp_matmul in both passes: the second takes the first's line maxima and G maximum" *
          doctest::test_suite(test::kNeedsDiskCache)) {
  REQUIRE(DiskCache::process_cache()); // the decisions are stored there
  const auto device = current_device();
  const test::Kind apart = [] {
    for (const test::Kind& k : test::adversarial_kinds())
      if (std::string(k.name) == "maxima apart (gap 120)") return k;
    throw std::logic_error("no kind 'maxima apart (gap 120)'");
  }();
  uint64_t seed = 41000;
  int cases = 0;
  for (DType dtype : {DType::f32, DType::bf16})
    for (int layout = 0; layout < 5; ++layout) {
      Problem p;
      p.semiring = Semiring::log, p.dtype = dtype;
      p.shape = {3, 71, 53, 97 + layout}; // shapes no other test plans, so that the decisions below are the ones used
      set_layout(p, layout);
      CAPTURE(describe(p));
      // The exp_matmul backward has no FMA form: a level without its tensor-core math skips the case (counted).
      if (test::runnable_here({default_grad_spec(p, Pass::grad_a, Strategy::exp_matmul),
                               default_grad_spec(p, Pass::grad_b, Strategy::exp_matmul)})
              .size() < 2)
        continue;
      for (Pass pass : {Pass::grad_a, Pass::grad_b}) {
        TuneReport report;
        report.best = default_grad_spec(p, pass, Strategy::exp_matmul);
        report.candidates.push_back({report.best, 1.0, "ok"});
        store_decision(grad_problem(p), *device, report, false, pass);
      }
      const SemiringBMM plan = SemiringBMM::get(p);
      REQUIRE(plan.grad_spec(Pass::grad_a).strategy == Strategy::exp_matmul);
      REQUIRE(plan.grad_spec(Pass::grad_b).strategy == Strategy::exp_matmul);
      for (int data = 0; data < 4; ++data) {
        CAPTURE(data);
        std::mt19937_64 rng(++seed);
        test::GradInputs in;
        if (data < 3) {
          in = test::make_grad_inputs(p, rng, data);
        } else {
          test::HostTensor a = test::fill(p, true, apart, rng), b = test::fill(p, false, apart, rng);
          in = test::grad_inputs_from(p, std::move(a), std::move(b), rng, 0, 1.0);
        }
        Buffers x = plan_backward_on(p, std::move(in), false, data % 2 == 1);
        expect_ok(test::check_gradient(p, Pass::grad_a, x.in, x.ha), p, plan.grad_spec(Pass::grad_a), seed);
        expect_ok(test::check_gradient(p, Pass::grad_b, x.in, x.hb), p, plan.grad_spec(Pass::grad_b), seed);
        ++cases;
      }
    }
  MESSAGE(cases << " cases");
}

TEST_CASE("grad_out = 0 gives exactly zero gradients, even with inf and NaN inputs; all-−inf rows give 0, not NaN") {
  Problem p;
  p.semiring = Semiring::log;
  p.shape = {2, 9, 11, 13};
  std::mt19937_64 rng(5);
  test::GradInputs in = test::make_grad_inputs(p, rng, 2);
  const SemiringBMM plan = SemiringBMM::get(p);
  DeviceBuffer zeros(in.g.bytes.size()), ga(in.a.bytes.size()), gb(in.b.bytes.size());
  zeros.fill_bytes(0);
  ga.fill_bytes(0x7f), gb.fill_bytes(0x7f);
  plan.backward(in.da.get(), in.db.get(), in.dout.get(), zeros.get(), ga.get(), gb.get());
  std::vector<float> ha(in.a.elements), hb(in.b.elements);
  ga.download(ha.data(), ha.size() * 4);
  gb.download(hb.data(), hb.size() * 4);
  for (float v : ha) CHECK(v == 0.0f);
  for (float v : hb) CHECK(v == 0.0f);
  // A row of a that is all −inf makes its outputs −inf: its gradient is 0 whatever grad_out holds (here NaN-free).
  std::vector<float> a(in.a.elements);
  for (int64_t e = 0; e < in.a.elements; ++e) a[e] = static_cast<float>(std::sin(double(e)));
  for (int k = 0; k < 11; ++k) a[4 * 11 + k] = -INFINITY; // batch 0, row 4
  in.da.upload(a.data(), a.size() * 4);
  std::vector<float> b(in.b.elements);
  for (int64_t e = 0; e < in.b.elements; ++e) b[e] = static_cast<float>(std::cos(double(e)));
  in.db.upload(b.data(), b.size() * 4);
  plan(in.da.get(), in.db.get(), in.dout.get());
  std::vector<float> g(in.g.elements, 1.0f);
  in.dg.upload(g.data(), g.size() * 4);
  plan.backward(in.da.get(), in.db.get(), in.dout.get(), in.dg.get(), ga.get(), gb.get());
  ga.download(ha.data(), ha.size() * 4);
  gb.download(hb.data(), hb.size() * 4);
  for (int k = 0; k < 11; ++k) CHECK(ha[4 * 11 + k] == 0.0f);
  for (float v : hb) CHECK(std::isfinite(v));
}

TEST_CASE("plan.backward rejects bad arguments, naming them") {
  Problem p;
  p.semiring = Semiring::log;
  p.shape = {2, 8, 8, 8};
  DeviceBuffer a(2 * 64 * 4), b(2 * 64 * 4), out(2 * 64 * 4), g(2 * 64 * 4), ga(2 * 64 * 4), gb(2 * 64 * 4),
      arg(2 * 64 * 4);
  const SemiringBMM plan = SemiringBMM::get(p);
  expect_invalid([&] { plan.backward(a.get(), b.get(), out.get(), nullptr, ga.get(), gb.get()); }, "grad_out");
  expect_invalid([&] { plan.backward(a.get(), b.get(), nullptr, g.get(), ga.get(), gb.get()); }, "out");
  expect_invalid(
      [&] {
        plan.backward(a.get(), b.get(), out.get(), static_cast<const int32_t*>(arg.get()), g.get(), ga.get(), gb.get());
      },
      "argmax");
  expect_invalid(
      [&] { plan.backward(a.get(), b.get(), out.get(), g.get(), static_cast<char*>(ga.get()) + 2, nullptr); },
      "grad_a");
  Problem expanded = p;
  expanded.a_strides = Strides{64, 0, 1}; // every row of a is the same memory: grad_a cannot be written there
  expect_invalid([&] { SemiringBMM::get(expanded).backward(a.get(), b.get(), out.get(), g.get(), ga.get(), nullptr); },
                 "a_strides");
  // Only grad_b asked: the expanded a is fine then.
  SemiringBMM::get(expanded).backward(a.get(), b.get(), out.get(), g.get(), nullptr, gb.get());
  plan.backward(a.get(), b.get(), out.get(), g.get(), nullptr, nullptr); // nothing asked: nothing done
  check(driver().cuCtxSynchronize(), "cuCtxSynchronize");
}

TEST_CASE("fp64 gradients agree with central finite differences of the GPU forward") {
  for (Semiring sr :
       {Semiring::log, Semiring::max_plus, Semiring::min_plus, Semiring::max_times, Semiring::plus_times}) {
    Problem p;
    p.semiring = sr;
    p.dtype = DType::f64;
    p.shape = {2, 5, 7, 6};
    const Shape& s = p.shape;
    std::mt19937_64 rng(77);
    test::GradInputs in = test::make_grad_inputs(p, rng, 0);
    const SemiringBMM plan = SemiringBMM::get(p);
    DeviceBuffer ga(in.a.bytes.size()), gb(in.b.bytes.size()), out(s.B * s.M * s.N * 8);
    plan.backward(in.da.get(), in.db.get(), in.dout.get(), in.dg.get(), ga.get(), gb.get());
    std::vector<double> grad_a(in.a.elements), grad_b(in.b.elements), o(s.B * s.M * s.N);
    ga.download(grad_a.data(), grad_a.size() * 8);
    gb.download(grad_b.data(), grad_b.size() * 8);
    // L(a, b) = Σ G · out, evaluated on the GPU.
    auto loss = [&](const std::vector<double>& a, const std::vector<double>& b) {
      in.da.upload(a.data(), a.size() * 8);
      in.db.upload(b.data(), b.size() * 8);
      plan(in.da.get(), in.db.get(), out.get());
      out.download(o.data(), o.size() * 8);
      double l = 0;
      for (std::size_t e = 0; e < o.size(); ++e) l += in.g_flat[e] * o[e];
      return l;
    };
    std::vector<double> a(in.a.elements), b(in.b.elements);
    for (int64_t e = 0; e < in.a.elements; ++e) a[e] = in.a.at(e);
    for (int64_t e = 0; e < in.b.elements; ++e) b[e] = in.b.at(e);
    const double h = 1e-6;
    auto fd_check = [&](std::vector<double>& x, const std::vector<double>& grad, const char* name) {
      for (std::size_t e = 0; e < x.size(); ++e) {
        const double keep = x[e];
        x[e] = keep + h;
        const double up = loss(a, b);
        x[e] = keep - h;
        const double down = loss(a, b);
        x[e] = keep;
        CAPTURE(semiring_info(sr).name);
        CAPTURE(name);
        CAPTURE(e);
        CHECK(grad[e] == doctest::Approx((up - down) / (2 * h)).epsilon(1e-5).scale(1.0));
      }
    };
    fd_check(a, grad_a, "grad_a");
    fd_check(b, grad_b, "grad_b");
  }
}
