// The histogram backward (templates/grad/histogram.cuh) where the general backward suite does not reach: K in many
// chunks of bins, every output choosing the same k (the most lanes summed into one bin at once), a broadcast
// gradient over several chunks, and the same bits on a second run.
#include <doctest/doctest.h>

#include "grad_case.hpp"

using namespace jitbmm;

namespace {

// Every element x: every term then ties, and the argmax is k = 0 for every output.
test::HostTensor constant_tensor(DType dtype, int64_t elements, double x) {
  test::HostTensor t;
  t.dtype = dtype, t.elements = elements;
  t.bytes.resize(static_cast<std::size_t>(elements) * dtype_info(dtype).size_bytes);
  for (int64_t e = 0; e < elements; ++e) store_element(dtype, t.data(), e, x);
  return t;
}

} // namespace

TEST_CASE("histogram gradients: K in chunks, one k chosen by every output, broadcast, the same bits every run") {
  std::mt19937_64 rng(7100);
  int cases = 0;
  for (Semiring semiring : {Semiring::max_plus, Semiring::min_plus, Semiring::max_times})
    for (DType dtype : {DType::f32, DType::f64, DType::bf16})
      for (Pass pass : {Pass::grad_a, Pass::grad_b})
        for (bool tied : {false, true})
          for (bool broadcast : {false, true}) {
            Problem p;
            p.semiring = semiring, p.dtype = dtype;
            p.shape = {3, 37, 900, 41};
            const Shape& s = p.shape;
            if (broadcast && pass == Pass::grad_a) p.a_strides = Strides{0, s.K, 1};
            if (broadcast && pass == Pass::grad_b) p.b_strides = Strides{0, 1, s.K}; // and transposed
            const int64_t na = test::storage_elements(s.B, s.M, s.K, p.a());
            const int64_t nb = test::storage_elements(s.B, s.K, s.N, p.b());
            test::Specials sp;
            sp.non_negative = semiring == Semiring::max_times;
            test::GradInputs in =
                tied ? test::grad_inputs_from(p, constant_tensor(dtype, na, 1), constant_tensor(dtype, nb, 1), rng, 0)
                     : test::grad_inputs_from(p, test::random_tensor(dtype, na, rng, sp),
                                              test::random_tensor(dtype, nb, rng, sp), rng, 2);
            // 16 warps a block: grad_a's bins hold 768 k (f32; f64 384) and grad_b's 96 (48), so K = 900 takes 2 (3)
            // and 10 (19) chunks.
            for (int threads : {32, 512}) {
              KernelSpec spec = default_grad_spec(p, pass, Strategy::histogram);
              spec.block_x = threads;
              test::HostTensor first, second;
              const test::CaseResult r = test::run_grad_case_on(p, spec, in, &first);
              test::report_failure(r, p, spec, 7100);
              CHECK(r.ok());
              test::run_grad_case_on(p, spec, in, &second);
              CHECK_MESSAGE(first.bytes == second.bytes, "a second run differs: " << to_string(spec));
              ++cases;
            }
          }
  MESSAGE(cases << " histogram cases");
}
