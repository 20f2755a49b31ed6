// Runs one problem on the GPU and compares every output with the CPU reference. Outputs (and the gaps between
// strided outputs) are poisoned first, so an unwritten element or a write outside the layout shows as a mismatch.
#pragma once

#include <cmath>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <string>

#include "generator/strategies/common.hpp"
#include "jitbmm/plan.hpp"
#include "runtime/device_memory.hpp"
#include "support/layout.hpp"
#include "parallel_rows.hpp"
#include "poison.hpp"
#include "support.hpp"

namespace jitbmm::test {

struct CaseResult {
  int64_t checked = 0, mismatches = 0, argmax_mismatches = 0, clobbered = 0;
  int64_t ties = 0, nan_outputs = 0; // outputs where the reference saw a tie / a NaN (argmax cases: tests prove coverage)
  std::string first_failure;
  bool ok() const { return mismatches == 0 && argmax_mismatches == 0 && clobbered == 0; }
};
// part's counts added to into's, and its first failure where into has none (part's rows come after into's).
inline void merge_results(CaseResult& into, const CaseResult& part) {
  into.checked += part.checked, into.mismatches += part.mismatches;
  into.argmax_mismatches += part.argmax_mismatches, into.clobbered += part.clobbered;
  into.ties += part.ties, into.nan_outputs += part.nan_outputs;
  if (into.first_failure.empty()) into.first_failure = part.first_failure;
}

// The problem a variant computes, at a shape (row-major layouts).
inline Problem problem_for(const KernelSpec& spec, Shape shape) {
  Problem p;
  p.semiring = spec.semiring;
  p.dtype = spec.dtype;
  p.out_dtype = spec.out_dtype;
  p.with_argmax = spec.with_argmax;
  p.shape = shape;
  // One TF32 product needs precision fast, unless the kernel's result is f16 or bf16.
  if (spec.strategy == Strategy::exp_matmul && single_tf32(spec.math) && !strategies::single_tf32_allowed(spec, p))
    p.precision = Precision::fast;
  return p;
}

// One line per failed case, with what it takes to replay it.
inline void report_failure(const CaseResult& r, const Problem& p, const KernelSpec& spec, uint64_t seed) {
  if (r.ok()) return;
  std::printf("FAIL seed=%llu %s spec[%s]: %lld/%lld mismatches, %lld argmax, %lld clobbered; first: %s\n",
              static_cast<unsigned long long>(seed), describe(p).c_str(), to_string(spec).c_str(),
              static_cast<long long>(r.mismatches), static_cast<long long>(r.checked),
              static_cast<long long>(r.argmax_mismatches), static_cast<long long>(r.clobbered),
              r.first_failure.c_str());
}

// One problem's inputs on the device and its outputs (out and argmax), poisoned.
struct DeviceCase {
  DeviceBuffer a, b, out, argmax;
  int32_t* argmax_ptr() const { return argmax.size() ? static_cast<int32_t*>(argmax.get()) : nullptr; }
};

inline void poison_outputs(const Problem& p, DeviceCase& d) {
  d.out.fill_bytes(poison_byte(p.output_dtype()));
  d.argmax.fill_bytes(0x7f);
}

inline DeviceCase upload_case(const Problem& p, const HostTensor& a, const HostTensor& b) {
  const Shape& s = p.shape;
  const int64_t out_elems = storage_elements(s.B, s.M, s.N, p.out()), outputs = s.B * s.M * s.N;
  DeviceCase d{DeviceBuffer(a.bytes.size()), DeviceBuffer(b.bytes.size()),
               DeviceBuffer(out_elems * dtype_info(p.output_dtype()).size_bytes),
               DeviceBuffer(p.with_argmax ? outputs * 4 : 0)};
  d.a.upload(a.data(), a.bytes.size());
  d.b.upload(b.data(), b.bytes.size());
  poison_outputs(p, d);
  return d;
}

// Whether every byte of out and argmax still holds the poison (nothing has written them yet).
inline bool outputs_untouched(const Problem& p, const DeviceCase& d) {
  std::vector<unsigned char> out(d.out.size()), arg(d.argmax.size());
  d.out.download(out.data(), out.size());
  d.argmax.download(arg.data(), arg.size());
  for (unsigned char c : out)
    if (c != poison_byte(p.output_dtype())) return false;
  for (unsigned char c : arg)
    if (c != 0x7f) return false;
  return true;
}

// Reads back out and argmax and checks every output against the reference (inputs a, b on the host).
inline CaseResult check_outputs(const Problem& p, const HostTensor& a, const HostTensor& b, const DeviceCase& d) {
  const Shape& s = p.shape;
  const Strides so = p.out();
  const DType od = p.output_dtype();
  const int64_t out_elems = storage_elements(s.B, s.M, s.N, so), outputs = s.B * s.M * s.N;
  const std::size_t out_bytes = out_elems * dtype_info(od).size_bytes;
  HostTensor out;
  out.dtype = od;
  out.elements = out_elems;
  out.bytes.resize(out_bytes);
  d.out.download(out.data(), out_bytes);
  std::vector<int32_t> arg(p.with_argmax ? outputs : 0);
  d.argmax.download(arg.data(), arg.size() * 4);

  std::vector<char> covered(out_elems, 0); // one element each row writes: no two threads share one
  const double tol = reference::tolerance(p);
  CaseResult r = check_rows_in_parallel<CaseResult>(
      s.B * s.M,
      [&](int64_t first, int64_t last, CaseResult& r) {
        for (int64_t row = first; row < last; ++row) {
          const int64_t bt = row / s.M, i = row % s.M;
          for (int64_t j = 0; j < s.N; ++j) {
            const int64_t at = offset_of(so, {bt, i, j});
            covered[at] = 1;
            const auto want = reference::element(p, a.data(), b.data(), bt, i, j);
            const double got = out.at(at);
            ++r.checked;
            const bool value_ok = reference::close(od, got, want, tol);
            const int64_t flat = (bt * s.M + i) * s.N + j;
            const int32_t want_arg = p.with_argmax ? reference::kernel_argmax(p, a.data(), b.data(), bt, i, j, want) : -1;
            const bool arg_ok = !p.with_argmax || arg[flat] == want_arg;
            r.ties += want.tie;
            r.nan_outputs += std::isnan(want.value);
            if (!value_ok) ++r.mismatches;
            if (!arg_ok) ++r.argmax_mismatches;
            if ((!value_ok || !arg_ok) && r.first_failure.empty()) {
              std::ostringstream os;
              os.precision(17);
              os << "out[" << bt << "," << i << "," << j << "] = " << got << ", reference " << want.value
                 << " (rounded " << round_to(od, want.value) << ")";
              if (p.with_argmax)
                os << "; argmax " << arg[flat] << ", expected " << want_arg << (want.tie ? " (a tie: smallest k)" : "");
              r.first_failure = os.str();
            }
          }
        }
      },
      merge_results, threads_for_terms(outputs * s.K));
  // Elements between strided outputs must still hold the poison.
  HostTensor poison;
  poison.dtype = od;
  poison.bytes.assign(dtype_info(od).size_bytes, poison_byte(od));
  for (int64_t e = 0; e < out_elems; ++e)
    if (!covered[e] && std::memcmp(&out.bytes[e * poison.bytes.size()], poison.bytes.data(), poison.bytes.size()) != 0)
      ++r.clobbered;
  return r;
}

// Runs one problem on given host inputs (laid out as the problem's strides say) and checks every output.
inline CaseResult run_case_on(const Problem& p, const KernelSpec& spec, const HostTensor& a, const HostTensor& b) {
  DeviceCase d = upload_case(p, a, b);
  const SemiringBMM plan = SemiringBMM::get(p, spec);
  plan(d.a.get(), d.b.get(), d.out.get(), d.argmax_ptr());
  check(driver().cuCtxSynchronize(), "cuCtxSynchronize after the kernel");
  return check_outputs(p, a, b, d);
}

inline CaseResult run_case(const Problem& p, const KernelSpec& spec, std::mt19937_64& rng, const Specials& sp) {
  const Shape& s = p.shape;
  const Strides sa = p.a(), sb = p.b();
  HostTensor a = random_tensor(p.dtype, storage_elements(s.B, s.M, s.K, sa), rng, sp);
  HostTensor b = random_tensor(p.dtype, storage_elements(s.B, s.K, s.N, sb), rng, sp);
  if (sp.p_neg_inf_row > 0) mask_rows(a, sa.batch ? s.B : 1, s.M, s.K, sa, sp.p_neg_inf_row, rng);
  return run_case_on(p, spec, a, b);
}

} // namespace jitbmm::test
