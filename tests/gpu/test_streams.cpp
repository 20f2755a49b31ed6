// Launches follow the caller's stream: the stream is held (test::StreamGate) while the plan is called, so a kernel
// queued on the right stream cannot have run when we look, and one launched anywhere else (the legacy or per-thread
// default stream) can. Every strategy's passes (split_k's combine, exp_matmul's prepare / product / repair) and the
// backward's are covered; values are checked once the stream is released.
#include <doctest/doctest.h>

#include <cstring>
#include <vector>

#include "differential.hpp"
#include "feature_level.hpp"
#include "grad_case.hpp"
#include "stream_gate.hpp"
#include "variants.hpp"

using namespace jitbmm;

namespace {

// The forward variants the stream test runs: every f32 strategy of log (its multi-pass strategies) and of
// max_plus with argmax (split_k writes partial argmaxes), those the device's feature level runs.
std::vector<KernelSpec> stream_variants() {
  std::vector<KernelSpec> out;
  for (const KernelSpec& spec : test::runnable_here(test::all_variants())) {
    if (spec.dtype != DType::f32 || spec.out_dtype != DType::f32 || spec.index64) continue;
    if (spec.semiring == Semiring::log || (spec.semiring == Semiring::max_plus && spec.with_argmax))
      out.push_back(spec);
  }
  return out;
}

bool bytes_equal(const DeviceBuffer& d, unsigned char value) {
  std::vector<unsigned char> host(d.size());
  d.download(host.data(), host.size());
  for (unsigned char c : host)
    if (c != value) return false;
  return true;
}

} // namespace

TEST_CASE("every strategy's launches follow the given stream: nothing runs while it is held") {
  const Shape shape{3, 37, 70, 33}; // three split-K chunks of 24
  uint64_t seed = 52000;
  int specs = 0;
  for (const KernelSpec& spec : stream_variants()) {
    CAPTURE(to_string(spec));
    const Problem p = test::problem_for(spec, shape);
    std::mt19937_64 rng(++seed);
    const test::Specials sp = test::specials_for(p.semiring, 0);
    const test::HostTensor a = test::random_tensor(p.dtype, shape.B * shape.M * shape.K, rng, sp);
    const test::HostTensor b = test::random_tensor(p.dtype, shape.B * shape.K * shape.N, rng, sp);
    test::TestStream stream;
    test::DeviceCase d = test::upload_case(p, a, b);
    const SemiringBMM plan = SemiringBMM::get(p, spec);
    const Stream s = reinterpret_cast<Stream>(stream.get());
    // A first run loads every kernel of the plan (module loading may synchronise the context, which must not
    // happen while the stream is held) and allocates what it keeps.
    plan(d.a.get(), d.b.get(), d.out.get(), d.argmax_ptr(), s);
    check(driver().cuStreamSynchronize(stream.get()), "cuStreamSynchronize");
    test::poison_outputs(p, d);
    {
      test::StreamGate gate(stream.get());
      plan(d.a.get(), d.b.get(), d.out.get(), d.argmax_ptr(), s);
      CHECK(stream.query() == CUDA_ERROR_NOT_READY);
      CHECK_MESSAGE(test::outputs_untouched(p, d), "an output was written while its stream was held");
      gate.release();
      check(driver().cuStreamSynchronize(stream.get()), "cuStreamSynchronize");
      CHECK_FALSE(gate.timed_out()); // the plan call returned without waiting on the held stream
    }
    CHECK(stream.query() == CUDA_SUCCESS);
    const test::CaseResult r = test::check_outputs(p, a, b, d);
    test::report_failure(r, p, spec, seed);
    CHECK(r.ok());
    CHECK(r.checked == shape.B * shape.M * shape.N);
    ++specs;
  }
  CHECK(specs >= 10);
  MESSAGE(specs << " variants on a held stream");
}

TEST_CASE("plan.backward follows the given stream: nothing runs while it is held") {
  for (Semiring sr : {Semiring::log, Semiring::max_plus, Semiring::max_times, Semiring::plus_times}) {
    Problem p;
    p.semiring = sr;
    p.shape = {3, 37, 45, 29};
    CAPTURE(describe(p));
    std::mt19937_64 rng(53000 + static_cast<int>(sr));
    const test::GradInputs in = test::make_grad_inputs(p, rng, 0);
    const bool scatter = semiring_info(sr).backward == BackwardKind::argmax_scatter;
    const Shape& s = p.shape;
    test::HostTensor ha, hb;
    ha.dtype = hb.dtype = p.dtype;
    ha.elements = s.B * s.M * s.K, hb.elements = s.B * s.K * s.N;
    ha.bytes.resize(ha.elements * 4), hb.bytes.resize(hb.elements * 4);
    DeviceBuffer ga(ha.bytes.size()), gb(hb.bytes.size());
    const SemiringBMM plan = SemiringBMM::get(p);
    const int32_t* arg = scatter ? static_cast<const int32_t*>(in.darg.get()) : nullptr;
    test::TestStream stream;
    const Stream st = reinterpret_cast<Stream>(stream.get());
    auto run = [&] { plan.backward(in.da.get(), in.db.get(), in.dout.get(), arg, in.dg.get(), ga.get(), gb.get(), st); };
    run(); // loads both passes' kernels (see above)
    check(driver().cuStreamSynchronize(stream.get()), "cuStreamSynchronize");
    const unsigned char poison = test::poison_byte(p.dtype);
    ga.fill_bytes(poison);
    gb.fill_bytes(poison);
    {
      test::StreamGate gate(stream.get());
      run();
      CHECK(stream.query() == CUDA_ERROR_NOT_READY);
      CHECK_MESSAGE(bytes_equal(ga, poison), "grad_a was written while its stream was held");
      CHECK_MESSAGE(bytes_equal(gb, poison), "grad_b was written while its stream was held");
      gate.release();
      check(driver().cuStreamSynchronize(stream.get()), "cuStreamSynchronize");
      CHECK_FALSE(gate.timed_out());
    }
    ga.download(ha.data(), ha.bytes.size());
    gb.download(hb.data(), hb.bytes.size());
    const test::CaseResult ra = test::check_gradient(p, Pass::grad_a, in, ha);
    const test::CaseResult rb = test::check_gradient(p, Pass::grad_b, in, hb);
    test::report_failure(ra, p, plan.grad_spec(Pass::grad_a), 53000);
    test::report_failure(rb, p, plan.grad_spec(Pass::grad_b), 53000);
    CHECK(ra.ok());
    CHECK(rb.ok());
  }
}

TEST_CASE("the stream gate itself: work queued behind it waits, and runs once released") {
  // Proves the instrument: a driver memset queued behind the gate does not happen until release().
  test::TestStream stream;
  DeviceBuffer buf(4096);
  buf.fill_bytes(0x11);
  {
    test::StreamGate gate(stream.get());
    check(driver().cuMemsetD8Async(reinterpret_cast<CUdeviceptr>(buf.get()), 0x22, buf.size(), stream.get()),
          "cuMemsetD8Async");
    CHECK(stream.query() == CUDA_ERROR_NOT_READY);
    CHECK(bytes_equal(buf, 0x11));
    gate.release();
    check(driver().cuStreamSynchronize(stream.get()), "cuStreamSynchronize");
    CHECK_FALSE(gate.timed_out());
  }
  CHECK(bytes_equal(buf, 0x22));
}
