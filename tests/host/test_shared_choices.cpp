// Sharing choices across processes (runtime/tuner/shared_choices.hpp), the host half: the problem's text form
// round-trips every field, and malformed text is refused naming the line before any device is looked at. The
// round trip through two processes' caches is in tests/fake_driver (it needs a device).
#include <doctest/doctest.h>

#include <string>

#include "runtime/autotune.hpp"

using namespace jitbmm;

TEST_CASE("a problem's text form round-trips every field") {
  Problem p;
  p.semiring = Semiring::max_plus;
  p.dtype = DType::bf16;
  p.out_dtype = DType::f32;
  p.shape = {3, 40, 24, 56};
  p.a_strides = Strides{0, 24, 1};       // broadcast
  p.b_strides = column_major(24, 56);    // transposed
  p.out_strides = Strides{2240, 56, 1};
  p.with_argmax = true;
  const Problem q = parse_problem_text(problem_text(p));
  CHECK(problem_text(q) == problem_text(p));
  CHECK(describe(q) == describe(p));
  CHECK(q.with_argmax);
  CHECK(q.output_dtype() == DType::f32);
  Problem fast;
  fast.shape = {2, 8, 8, 8};
  fast.precision = Precision::fast;
  CHECK(parse_problem_text(problem_text(fast)).precision == Precision::fast);
}

TEST_CASE("malformed choices are refused naming the line, before the device") {
  Problem p;
  p.shape = {2, 8, 8, 8};
  const std::string good = "choice forward " + problem_text(p) + " | " + to_string(default_spec(p)) + "\n";
  CHECK_THROWS_WITH_AS(import_choices(good + "choice forward log f32 | x\n"), doctest::Contains("line 2"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(import_choices("chose forward " + problem_text(p) + " | x\n"), doctest::Contains("line 1"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(import_choices("choice sideways " + problem_text(p) + " | " + to_string(default_spec(p))),
                       doctest::Contains("line 1"), std::invalid_argument);
  // A spec that does not fit its problem (argmax on a problem without it).
  KernelSpec wrong = default_spec(p);
  wrong.with_argmax = true;
  CHECK_THROWS_AS(import_choices("choice forward " + problem_text(p) + " | " + to_string(wrong)),
                  std::invalid_argument);
  // A variant of another pass than its choice's: a backward kernel would run as the forward, or the reverse.
  CHECK_THROWS_WITH_AS(
      import_choices("choice forward " + problem_text(p) + " | " + to_string(default_grad_spec(p, Pass::grad_b))),
      doctest::Contains("pass"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(import_choices("choice grad_a " + problem_text(p) + " | " + to_string(default_spec(p))),
                       doctest::Contains("pass"), std::invalid_argument);
  CHECK_THROWS_AS(parse_problem_text(problem_text(p) + " extra"), std::invalid_argument);
  CHECK_THROWS_AS(parse_problem_text("log f32 f32 2 8 8 8"), std::invalid_argument);
}
