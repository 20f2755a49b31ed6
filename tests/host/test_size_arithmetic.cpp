// Sizes near and past 2^62: every product of sizes and strides is checked, and a problem too large for any kernel
// is std::invalid_argument naming the size, from validate, the reference, the planning steps before the driver and
// the C ABI. Nothing here loops forever, overflows (build with -fsanitize=undefined to check) or allocates.
#include <doctest/doctest.h>

#include <cstdint>
#include <limits>
#include <string>

#include "expect.hpp"
#include "jitbmm/c_api.h"
#include "jitbmm/plan.hpp"
#include "jitbmm/reference.hpp"
#include "runtime/autotune.hpp"
#include "support/checked_size.hpp"

using namespace jitbmm;
using test::expect_invalid;

namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t k2_62 = int64_t(1) << 62;

Problem with_size(char dim, int64_t v, DType dtype = DType::f32) {
  Problem p;
  p.dtype = dtype;
  p.shape = {1, 1, 1, 1};
  (dim == 'B' ? p.shape.B : dim == 'M' ? p.shape.M : dim == 'K' ? p.shape.K : p.shape.N) = v;
  return p;
}

} // namespace

TEST_CASE("checked helpers: zero-aware products, bounded round-up") {
  CHECK(try_product({0, kMax, kMax}) == 0);
  CHECK(try_product({kMax, kMax, 0}) == 0);
  CHECK_FALSE(try_product({k2_62, 2}));
  CHECK(checked_product({3, 5, 7}, "x") == 105);
  expect_invalid([] { checked_product({k2_62, 4}, "shape.N"); }, "shape.N");
  CHECK(checked_round_up_pow2(0, "x") == 0);
  CHECK(checked_round_up_pow2(5, "x") == 8);
  CHECK(checked_round_up_pow2(k2_62, "x") == k2_62);
  expect_invalid([] { checked_round_up_pow2(k2_62 + 1, "shape.M"); }, "shape.M");
  expect_invalid([] { checked_round_up_pow2(kMax, "shape.M"); }, "shape.M");
}

TEST_CASE("each size near 2^62 and at 2^63-1 is refused by validate, naming that size") {
  for (char dim : {'B', 'M', 'K', 'N'}) {
    const std::string name = std::string("shape.") + dim;
    for (int64_t v : {k2_62 - 1, k2_62, k2_62 + 1, kMax}) {
      CAPTURE(name);
      CAPTURE(v);
      expect_invalid([&] { validate(with_size(dim, v)); }, name);
      expect_invalid([&] { validate(with_size(dim, v, DType::f16)); }, name);
    }
  }
  // The report's case: log f64, N = 2^61 + 1 (b and out hold 2^64 + 8 bytes).
  expect_invalid([] { validate(with_size('N', (int64_t(1) << 61) + 1, DType::f64)); }, "shape.N");
  // The default strides M*K would overflow: the shape is named, not a_strides.
  Problem square;
  square.shape = {1, int64_t(1) << 40, int64_t(1) << 40, 1};
  expect_invalid([&] { validate(square); }, "shape.");
  // Terms: each operand fits, B*M*N*K does not.
  Problem terms;
  terms.dtype = DType::f16;
  terms.shape = {1, int64_t(1) << 30, int64_t(1) << 30, int64_t(1) << 30};
  expect_invalid([&] { validate(terms); }, "terms");
  expect_invalid([&] { (void)terms.shape.terms(); }, "shape");
  // Empty problems hold nothing, whatever the other sizes (up to 2^62).
  Problem empty;
  empty.shape = {0, k2_62, 1, 1};
  CHECK_NOTHROW(validate(empty));
  empty.shape = {k2_62, k2_62, 0, 0};
  CHECK_NOTHROW(validate(empty));
  empty.shape = {0, k2_62, k2_62, k2_62};
  CHECK(empty.shape.terms() == 0);
  expect_invalid([&] { validate(empty); }, "shape: M*K"); // its default strides cannot be formed
  // Strides that reach past 2^62 bytes name the strides.
  Problem strided;
  strided.shape = {2, 1, 1, 1};
  strided.b_strides = Strides{int64_t(1) << 61, 1, 1};
  expect_invalid([&] { validate(strided); }, "b_strides");
}

TEST_CASE("a Problem with explicit strides never forms the default M*K") {
  Problem p;
  p.shape = {1, kMax, kMax, 1};
  p.a_strides = Strides{0, 1, 1};
  p.b_strides = Strides{0, 1, 1};
  p.out_strides = Strides{0, 1, 1};
  CHECK(p.a() == Strides{0, 1, 1}); // UB before (M*K evaluated as value_or's argument); UBSan-clean now
  CHECK(p.b() == Strides{0, 1, 1});
  CHECK(p.out() == Strides{0, 1, 1});
  p.a_strides.reset();
  expect_invalid([&] { (void)p.a(); }, "shape: M*K");
  expect_invalid([] { row_major(kMax, 2); }, "row_major");
}

TEST_CASE("the reference refuses what it cannot compute, naming the size, and returns at once when empty") {
  Problem empty;
  empty.shape = {int64_t(1) << 60, 0, 1, 1}; // looped over 2^60 empty batches before
  CHECK(reference::compute(empty, nullptr, nullptr).empty());
  for (char dim : {'B', 'M', 'K', 'N'})
    for (int64_t v : {k2_62, kMax})
      expect_invalid([&] { reference::compute(with_size(dim, v), nullptr, nullptr); }, std::string("shape.") + dim);
  expect_invalid([] { reference::compute(with_size('K', reference::kMaxReferenceK + 1), nullptr, nullptr); },
                 "shape.K");
  expect_invalid([] { reference::compute(with_size('N', reference::kMaxReferenceOutputs + 1), nullptr, nullptr); },
                 "shape.N");
  Problem many;
  many.shape = {1, 1 << 14, 1 << 14, 1 << 14}; // 2^42 terms
  expect_invalid([&] { reference::compute(many, nullptr, nullptr); }, "shape.K");
  const Problem long_k = with_size('K', reference::kMaxReferenceK + 1);
  expect_invalid([&] { reference::element(long_k, nullptr, nullptr, 0, 0, 0); }, "shape.K");
}

TEST_CASE("an empty output is computed (as nothing) whatever K is, as planning accepts it") {
  const int64_t long_k = reference::kMaxReferenceK + 1;
  for (const Shape& shape :
       {Shape{0, 3, long_k, 4}, Shape{2, 0, long_k, 4}, Shape{2, 3, long_k, 0}, Shape{1, 0, int64_t(1) << 40, 1}}) {
    const std::string what = to_string(shape);
    CAPTURE(what);
    Problem p;
    p.shape = shape;
    CHECK(reference::compute(p, nullptr, nullptr).empty());
    CHECK_NOTHROW(reference::backward(p, nullptr, nullptr, nullptr, nullptr, nullptr));
    jitbmm_problem c{};
    c.semiring = "log";
    c.dtype = "f32";
    c.B = shape.B, c.M = shape.M, c.K = shape.K, c.N = shape.N;
    const int64_t a[3] = {shape.M * shape.K, shape.K, 1}, b[3] = {shape.K * shape.N, shape.N, 1},
                  o[3] = {shape.M * shape.N, shape.N, 1};
    for (int i = 0; i < 3; ++i) c.a_strides[i] = a[i], c.b_strides[i] = b[i], c.out_strides[i] = o[i];
    CHECK(jitbmm_reference(&c, nullptr, nullptr, nullptr, nullptr) == JITBMM_OK);
  }
  // A single output still holds its K terms: refused, naming K.
  expect_invalid([] { reference::compute(with_size('K', reference::kMaxReferenceK + 1), nullptr, nullptr); },
                 "shape.K");
}

TEST_CASE("planning steps before the driver refuse huge sizes, naming them; nothing loops or overflows") {
  for (char dim : {'B', 'M', 'K', 'N'})
    for (int64_t v : {k2_62 + 1, kMax}) {
      const Problem p = with_size(dim, v, DType::f64);
      const std::string name = std::string("shape.") + dim;
      CAPTURE(name);
      expect_invalid([&] { SemiringBMM::get(p); }, name); // validate runs before the device is asked for
      expect_invalid([&] { default_spec(p); }, name);
      expect_invalid([&] { tuning_candidates(p, {}); }, name);
      expect_invalid([&] { shape_bucket(p.shape); }, name);
      expect_invalid([&] { JitLogBMM::get(p.shape); }, name);
    }
  CHECK(shape_bucket({k2_62, 3, 0, 1}) == Shape{k2_62, 4, 0, 1});
  // Large but valid: the default is a kernel whose grid holds it, candidates fit, the trial is not run.
  Problem wide = with_size('N', int64_t(1) << 40);
  const KernelSpec spec = default_spec(wide);
  CHECK(spec.strategy != Strategy::linear); // 2^35 column blocks: more than one grid holds
  CHECK(spec.index64);
  KernelSpec linear = spec;
  linear.strategy = Strategy::linear, linear.block_x = 32, linear.block_y = 8;
  expect_invalid([&] { check_spec_fits(linear, wide); }, "shape.N");
  for (const KernelSpec& s : tuning_candidates(wide, {})) CHECK_NOTHROW(check_spec_fits(s, wide));
  CHECK_FALSE(tunable(wide));
  CHECK(tunable(with_size('N', 1 << 20)));
  CHECK_FALSE(tunable(with_size('K', reference::kMaxReferenceK + 1)));
  // exp_matmul's padded workspace: 128 padded rows per row of a.
  Problem padded;
  padded.shape = {1, 1, int64_t(1) << 56, 16};
  KernelSpec em = default_spec(with_size('M', 256), Strategy::exp_matmul);
  em.index64 = true;
  expect_invalid([&] { check_spec_fits(em, padded); }, "shape");
}

TEST_CASE("the C ABI turns a huge shape into JITBMM_INVALID_ARGUMENT naming the size") {
  const int64_t n = (int64_t(1) << 61) + 1;
  jitbmm_problem c{};
  c.semiring = "log";
  c.dtype = "f64";
  c.B = c.M = c.K = 1;
  c.N = n;
  const int64_t a[3] = {1, 1, 1}, b[3] = {n, n, 1}, o[3] = {n, n, 1};
  for (int i = 0; i < 3; ++i) c.a_strides[i] = a[i], c.b_strides[i] = b[i], c.out_strides[i] = o[i];
  jitbmm_plan* plan = nullptr;
  CHECK(jitbmm_plan_create(&c, &plan) == JITBMM_INVALID_ARGUMENT);
  CHECK(plan == nullptr);
  CHECK(std::string(jitbmm_last_error()).find("shape.N") != std::string::npos);
  CHECK(jitbmm_reference(&c, nullptr, nullptr, nullptr, nullptr) == JITBMM_INVALID_ARGUMENT);
  CHECK(std::string(jitbmm_last_error()).find("shape.N") != std::string::npos);
}

TEST_CASE("a trial is sized before anything is drawn: device and host bytes, against what is free now") {
  Problem p;
  p.semiring = Semiring::log;
  p.dtype = DType::f32;
  p.shape = {16, 4096, 1, 4096};
  const auto fwd = trial_bytes(p, Pass::forward);
  REQUIRE(fwd);
  const int64_t out = int64_t(16) * 4096 * 4096 * 4, a = 16 * 4096 * 4, b = 16 * 4096 * 4;
  CHECK(fwd->device == a + b + out);
  CHECK(fwd->host == a + b);
  const auto ga = trial_bytes(p, Pass::grad_a);
  REQUIRE(ga);
  CHECK(ga->device == a + b + 2 * out + a);             // grad_out and out in out's layout, the gradient
  CHECK(ga->host == a + b + 2 * out + out / 4 * 16 + a); // + grad_out and out as doubles, the gradient read back
  Problem sel = p;
  sel.semiring = Semiring::max_plus;
  sel.with_argmax = true;
  CHECK(trial_bytes(sel, Pass::forward)->device == fwd->device + out); // int32 argmax, as wide as an f32 output
  CHECK(trial_bytes(sel, Pass::grad_b)->host == ga->host - a + b + out);
  // Half of what is free on each side.
  CHECK(trial_memory_refusal(*fwd, std::size_t(4) << 30, std::size_t(1) << 30).empty());
  CHECK(trial_memory_refusal(*fwd, std::size_t(512) << 20, std::size_t(1) << 30) ==
        "its trial needs 1025 MiB of device memory and may take at most half of the 512 MiB free");
  CHECK(trial_memory_refusal(*fwd, std::size_t(1536) << 20, std::size_t(1) << 30) == // fits the memory, not the share
        "its trial needs 1025 MiB of device memory and may take at most half of the 1536 MiB free");
  CHECK(trial_memory_refusal(*ga, std::size_t(80) << 30, std::size_t(2) << 30) ==
        "its trial needs 6145 MiB of host memory and may take at most half of the 2048 MiB available");
  CHECK_FALSE(trial_bytes(with_size('B', int64_t(1) << 62, DType::f64), Pass::forward));
}
