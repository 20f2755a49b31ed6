#include <doctest/doctest.h>

#include <climits>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "expect.hpp"
#include "jitbmm/c_api.h"
#include "jitbmm/kernel_spec.hpp"
#include "jitbmm/types.hpp"
#include "support/log.hpp"

using namespace jitbmm;

using test::expect_invalid;

TEST_CASE("shapes parse and print as BxMxKxN") {
  const Shape s = parse_shape("64x512x256x128");
  CHECK(s == Shape{64, 512, 256, 128});
  CHECK(to_string(s) == "64x512x256x128");
  CHECK(s.terms() == 64LL * 512 * 256 * 128);
  for (const char* bad : {"", "1x2x3", "1x2x3x4x5", "ax1x1x1", "1x2x3x4z", "1,2,3,4"})
    expect_invalid([&] { parse_shape(bad); }, "shape");
}

TEST_CASE("shape sizes are digits only, as every other number") {
  CHECK(parse_shape("0x2X3x4") == Shape{0, 2, 3, 4});
  for (const char* bad : {" 2x3x4x5", "2x3x4x5 ", "2x+3x4x5", "2x 3x4x5", "-2x3x4x5", "2x3x4x-5", "2xx3x4x5",
                          "2x3x4x", "x2x3x4", "2x3x4x0x5", "2x3x4x9223372036854775808", "2x3x4x5\n"})
    expect_invalid([&] { parse_shape(bad); }, "shape: expected BxMxKxN");
  CHECK(parse_shape("1x1x1x9223372036854775807").N == INT64_MAX); // validate(), not the parser, bounds the sizes
}

TEST_CASE("dtype and semiring names round-trip; unknown names are errors that name the argument") {
  for (DType d : {DType::f32, DType::f64, DType::f16, DType::bf16}) CHECK(parse_dtype(dtype_info(d).name) == d);
  for (Semiring s : {Semiring::log, Semiring::max_plus, Semiring::min_plus, Semiring::max_times, Semiring::plus_times})
    CHECK(parse_semiring(semiring_info(s).name) == s);
  CHECK(dtype_info(DType::f16).size_bytes == 2);
  CHECK(std::string(dtype_info(DType::bf16).acc_type) == "float");
  expect_invalid([] { parse_dtype("int32"); }, "dtype");
  expect_invalid([] { parse_semiring("sum"); }, "semiring");
}

TEST_CASE("each dtype's row agrees with itself: the accumulator's size, the half types") {
  for (int i = 0; i < dtype_count(); ++i) {
    const DTypeInfo& row = dtype_info(static_cast<DType>(i));
    CAPTURE(row.name);
    const std::string acc = row.acc_type;
    CHECK(row.acc_bytes == (acc == "double" ? 8 : acc == "float" ? 4 : 0));
    CHECK(row.acc_bytes >= row.size_bytes);
    CHECK(row.wide_acc() == (row.acc_bytes == 8));
    // A half type is a 2-byte float that accumulates in f32, and may write an f32 output (validate()).
    CHECK(row.half == (row.size_bytes == 2 && acc == "float"));
  }
  CHECK(dtype_info(DType::f16).half);
  CHECK(dtype_info(DType::bf16).half);
  CHECK_FALSE(dtype_info(DType::f32).half);
  CHECK(dtype_info(DType::f64).wide_acc());
  CHECK_FALSE(dtype_info(DType::f32).wide_acc());
}

TEST_CASE("enum spellings: one name per dtype, and the errors read exactly as before") {
  for (const char* other : {"float32", "float", "float64", "double", "float16", "half", "bfloat16"})
    expect_invalid([other] { parse_dtype(other); },
                   "dtype: unsupported '" + std::string(other) + "' (expected f32, f64, f16 or bf16)");
  CHECK(parse_log_level("debug") == LogLevel::debug);
  const auto message = [](auto f) {
    try {
      f();
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(message([] { parse_dtype("int32"); }) == "dtype: unsupported 'int32' (expected f32, f64, f16 or bf16)");
  CHECK(message([] { parse_semiring("sum"); }) ==
        "semiring: unsupported 'sum' (expected log, max_plus, min_plus, max_times or plus_times)");
  CHECK(message([] { parse_log_level("loud"); }) == "JITBMM_LOG: expected warn, info or debug, got 'loud'");
  CHECK(message([] { parse_precision("slow"); }) == "precision: unsupported 'slow' (expected exact or fast)");
  CHECK(message([] { dtype_info(static_cast<DType>(7)); }) == "dtype: unknown enum value 7");
  CHECK(message([] { semiring_info(static_cast<Semiring>(-1)); }) == "semiring: unknown enum value -1");
}

TEST_CASE("each semiring's row says its backward consistently") {
  for (Semiring s :
       {Semiring::log, Semiring::max_plus, Semiring::min_plus, Semiring::max_times, Semiring::plus_times}) {
    const SemiringInfo& row = semiring_info(s);
    CAPTURE(row.name);
    // A marginal backward has gradient weights; a scatter one routes through the forward's argmax.
    CHECK((row.backward == BackwardKind::marginal) == (row.grad != nullptr));
    if (row.backward == BackwardKind::argmax_scatter) CHECK(row.has_argmax);
    if (row.scatter_times) CHECK(row.backward == BackwardKind::argmax_scatter);
  }
  CHECK(semiring_info(Semiring::max_times).scatter_times);
  CHECK_FALSE(semiring_info(Semiring::max_plus).scatter_times);
  // Only max_times is meant for non-negative inputs (its zero is 0: README's contract).
  for (int i = 0; i < semiring_count(); ++i) {
    const auto s = static_cast<Semiring>(i);
    CHECK(semiring_info(s).nonnegative_inputs == (s == Semiring::max_times));
  }
}

TEST_CASE("the C ABI lists the semiring and dtype tables by enum value; other indices give NULL or -1") {
  REQUIRE(jitbmm_semiring_count() == semiring_count());
  REQUIRE(jitbmm_semiring_count() == 5);
  for (int i = 0; i < jitbmm_semiring_count(); ++i) {
    const SemiringInfo& row = semiring_info(static_cast<Semiring>(i));
    CHECK(std::string(jitbmm_semiring_name(i)) == row.name);
    CHECK(jitbmm_semiring_has_argmax(i) == int(row.has_argmax));
    CHECK(jitbmm_semiring_backward(i) == static_cast<int>(row.backward));
  }
  CHECK(jitbmm_semiring_backward(static_cast<int>(Semiring::log)) == JITBMM_BACKWARD_MARGINAL);
  CHECK(jitbmm_semiring_backward(static_cast<int>(Semiring::max_times)) == JITBMM_BACKWARD_ARGMAX_SCATTER);
  REQUIRE(jitbmm_dtype_count() == dtype_count());
  REQUIRE(jitbmm_dtype_count() == 4);
  for (int i = 0; i < jitbmm_dtype_count(); ++i) {
    const DTypeInfo& row = dtype_info(static_cast<DType>(i));
    CHECK(std::string(jitbmm_dtype_name(i)) == row.name);
    CHECK(jitbmm_dtype_size(i) == row.size_bytes);
  }
  // The names listed are the names taken: no other spelling.
  jitbmm_problem problem{};
  CHECK(jitbmm_problem_row_major(&problem, "log", "f16", 1, 1, 1, 1) == JITBMM_OK);
  CHECK(jitbmm_problem_row_major(&problem, "log", "half", 1, 1, 1, 1) == JITBMM_INVALID_ARGUMENT);
  CHECK(std::string(jitbmm_last_error()).find("dtype: unsupported 'half'") != std::string::npos);
  for (int bad : {-1, 5, 99, INT_MIN, INT_MAX}) {
    CAPTURE(bad);
    CHECK(jitbmm_semiring_name(bad) == nullptr);
    CHECK(jitbmm_semiring_has_argmax(bad) == -1);
    CHECK(jitbmm_semiring_backward(bad) == -1);
  }
  for (int bad : {-1, 4, INT_MIN, INT_MAX}) {
    CAPTURE(bad);
    CHECK(jitbmm_dtype_name(bad) == nullptr);
    CHECK(jitbmm_dtype_size(bad) == -1);
  }
}

TEST_CASE("validate names the offending field") {
  Problem p;
  p.shape = {2, 3, 4, 5};
  CHECK_NOTHROW(validate(p));
  Problem neg = p;
  neg.shape.K = -1;
  expect_invalid([&] { validate(neg); }, "shape.K");
  Problem arg = p;
  arg.with_argmax = true;
  expect_invalid([&] { validate(arg); }, "with_argmax");
  arg.semiring = Semiring::max_plus;
  CHECK_NOTHROW(validate(arg));
  Problem fast = p;
  fast.precision = Precision::fast;
  CHECK_NOTHROW(validate(fast)); // log: one TF32 product per term allowed
  for (Semiring s : {Semiring::max_plus, Semiring::min_plus, Semiring::max_times, Semiring::plus_times}) {
    fast.semiring = s;
    expect_invalid([&] { validate(fast); }, std::string("precision: fast is for the log semiring only, not ") +
                                                semiring_info(s).name);
  }
  Problem out = p;
  out.out_dtype = DType::f16;
  expect_invalid([&] { validate(out); }, "out_dtype");
  out.dtype = DType::bf16;
  out.out_dtype = DType::f32;
  CHECK_NOTHROW(validate(out));
  Problem st = p;
  st.a_strides = Strides{-1, 4, 1};
  expect_invalid([&] { validate(st); }, "a_strides");
  Problem overlap = p;
  overlap.out_strides = Strides{0, 5, 1}; // every batch writes the same matrix
  expect_invalid([&] { validate(overlap); }, "out_strides");
  Problem huge = p;
  huge.b_strides = Strides{INT64_MAX, 1, 1};
  expect_invalid([&] { validate(huge); }, "b_strides");
  Problem zero = p;
  zero.shape = {0, 0, 0, 0};
  CHECK_NOTHROW(validate(zero));
}

TEST_CASE("layouts: row-major, column-major and broadcast strides") {
  CHECK(row_major(3, 4) == Strides{12, 4, 1});
  CHECK(column_major(3, 4) == Strides{12, 1, 3});
  Problem p;
  p.shape = {4, 3, 5, 6};
  p.a_strides = Strides{0, 5, 1}; // one matrix broadcast over the batch: fine for inputs
  p.b_strides = column_major(5, 6);
  CHECK_NOTHROW(validate(p));
  p.out_strides = Strides{1, 24, 4}; // batch innermost: still one address per element
  CHECK_NOTHROW(validate(p));
  Problem interleaved;
  interleaved.shape = {1, 2, 4, 3};
  interleaved.out_strides = Strides{8, 3, 2}; // addresses 0 2 4 / 3 5 7: distinct, though not nested
  CHECK_NOTHROW(validate(interleaved));
}

TEST_CASE("default specs pick 64-bit indices only when 32-bit math would overflow") {
  Problem p;
  p.shape = {64, 512, 512, 512};
  KernelSpec s = default_spec(p);
  CHECK_FALSE(s.index64);
  CHECK(s.strategy == Strategy::tiled);
  p.shape = {1, 70000, 40000, 1}; // a has 2.8e9 elements
  s = default_spec(p);
  CHECK(s.index64);
  KernelSpec narrow = s;
  narrow.index64 = false;
  expect_invalid([&] { check_spec_fits(narrow, p); }, "spec.index64");
  // Grid-stride loops whose step is about their whole count (the histogram backward's rows and k, linear's rows at
  // a tall block) and split-K's chunk ends need room for twice the size, not only the operands' offsets.
  Problem tall;
  tall.semiring = Semiring::max_plus;
  tall.shape = {1, 1100000000, 1, 1};
  CHECK(default_grad_spec(tall, Pass::grad_a).index64);
  tall.shape = {1, 2100000000, 1, 1};
  KernelSpec rows = default_spec(tall, Strategy::linear);
  rows.block_x = 1, rows.block_y = 1024, rows.index64 = false;
  expect_invalid([&] { check_spec_fits(rows, tall); }, "spec.index64");
  tall.shape = {1, 1, 2100000000, 1};
  KernelSpec chunks = default_spec(tall, Strategy::split_k);
  chunks.k_chunk = 100000000, chunks.index64 = false;
  expect_invalid([&] { check_spec_fits(chunks, tall); }, "spec.index64");
  // The tiled kernels' grid holds one block a column tile, forward as backward.
  tall.shape = {1, 1, 1, 2200000000};
  KernelSpec thin = default_spec(tall, Strategy::tiled);
  thin.tile_m = 32, thin.tile_n = 1, thin.tile_k = 1, thin.thread_m = thin.thread_n = 1;
  expect_invalid([&] { check_spec_fits(thin, tall); }, "shape.N");
  KernelSpec wrong = default_spec(Problem{});
  wrong.dtype = DType::f64;
  expect_invalid([&] { check_spec_fits(wrong, Problem{}); }, "spec.dtype");
  KernelSpec blocks = default_spec(Problem{});
  blocks.block_x = 48;
  blocks.block_y = 1;
  expect_invalid([&] { check_spec_fits(blocks, Problem{}); }, "spec.block");
}
