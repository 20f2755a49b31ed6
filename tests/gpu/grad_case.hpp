// Runs one backward pass on the GPU and compares every gradient element with the CPU reference (which uses the
// forward's out and argmax as read back from the GPU, exactly what the backward kernels read). The gradient buffer
// is poisoned first, so an unwritten element shows, and gaps between strided elements must keep the poison.
#pragma once

#include <algorithm>
#include <cstring>
#include <sstream>
#include <string>

#include "differential.hpp"
#include "runtime/backward.hpp"
#include "support/layout.hpp"

namespace jitbmm::test {

struct GradInputs {
  HostTensor a, b, g;           // g: grad_out in out's layout
  std::vector<double> g_flat;   // grad_out, contiguous [B][M][N]
  std::vector<double> out_flat; // the forward's out, contiguous
  std::vector<int32_t> argmax;  // the forward's argmax (selecting semirings)
  DeviceBuffer da, db, dout, dg, darg;
};

// Given operands (in the problem's layouts): grad_out N(0,1)·g_scale with exact zeros (and NaN in flavour 2), and
// the forward computed on the GPU.
inline GradInputs grad_inputs_from(const Problem& p, HostTensor a, HostTensor b, std::mt19937_64& rng, int flavour,
                                   double g_scale = 1.0) {
  const Shape& s = p.shape;
  const Strides so = p.out();
  GradInputs in;
  in.a = std::move(a), in.b = std::move(b);
  const DType od = p.output_dtype();
  const int64_t out_elems = storage_elements(s.B, s.M, s.N, so), outputs = s.B * s.M * s.N;
  Specials gs;
  gs.p_nan = flavour == 2 ? 0.01 : 0;
  in.g = random_tensor(od, out_elems, rng, gs);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  in.g_flat.resize(outputs);
  for (int64_t o = 0; o < outputs; ++o) {
    const int64_t at = offset_of(so, s.M, s.N, o);
    if (u(rng) < 0.1) store_element(od, in.g.data(), at, 0.0); // exact zeros contribute exactly nothing
    if (g_scale != 1.0) store_element(od, in.g.data(), at, in.g.at(at) * g_scale);
    in.g_flat[o] = in.g.at(at);
  }
  in.da = DeviceBuffer(in.a.bytes.size()), in.db = DeviceBuffer(in.b.bytes.size());
  in.dg = DeviceBuffer(in.g.bytes.size());
  in.da.upload(in.a.data(), in.a.bytes.size());
  in.db.upload(in.b.data(), in.b.bytes.size());
  in.dg.upload(in.g.data(), in.g.bytes.size());
  const bool scatter = semiring_info(p.semiring).backward == BackwardKind::argmax_scatter;
  Problem fwd = p;
  fwd.with_argmax = scatter;
  in.dout = DeviceBuffer(out_elems * dtype_info(od).size_bytes);
  in.darg = DeviceBuffer(scatter ? outputs * 4 : 0);
  if (outputs > 0) {
    SemiringBMM::get(fwd, default_spec(fwd))(in.da.get(), in.db.get(), in.dout.get(),
                                             scatter ? static_cast<int32_t*>(in.darg.get()) : nullptr, nullptr);
    check(driver().cuCtxSynchronize(), "cuCtxSynchronize after the forward");
  }
  HostTensor out;
  out.dtype = od;
  out.bytes.resize(out_elems * dtype_info(od).size_bytes);
  in.dout.download(out.data(), out.bytes.size());
  in.out_flat.resize(outputs);
  for (int64_t o = 0; o < outputs; ++o) in.out_flat[o] = out.at(offset_of(so, s.M, s.N, o));
  in.argmax.resize(scatter ? outputs : 0);
  in.darg.download(in.argmax.data(), in.argmax.size() * 4);
  return in;
}

// Inputs with edge values (never huge: the gradient of a sum of huge terms is ill-conditioned in f32).
inline GradInputs make_grad_inputs(const Problem& p, std::mt19937_64& rng, int flavour) {
  const Shape& s = p.shape;
  const Strides sa = p.a(), sb = p.b();
  Specials sp = specials_for(p.semiring, flavour);
  sp.p_huge = 0;
  HostTensor a = random_tensor(p.dtype, storage_elements(s.B, s.M, s.K, sa), rng, sp);
  HostTensor b = random_tensor(p.dtype, storage_elements(s.B, s.K, s.N, sb), rng, sp);
  if (sp.p_neg_inf_row > 0) mask_rows(a, sa.batch ? s.B : 1, s.M, s.K, sa, sp.p_neg_inf_row, rng);
  return grad_inputs_from(p, std::move(a), std::move(b), rng, flavour);
}

// Compares a gradient read back from the device (in its operand's layout) with the reference, element by element;
// a broadcast gradient against the sum over the batch.
inline CaseResult check_gradient(const Problem& p, Pass pass, const GradInputs& in, const HostTensor& got) {
  const Shape& s = p.shape;
  const Strides sd = pass == Pass::grad_a ? p.a() : p.b();
  const int64_t rows = pass == Pass::grad_a ? s.M : s.K, cols = pass == Pass::grad_a ? s.K : s.N;
  const bool broadcast = sd.batch == 0;
  std::vector<char> covered(got.elements, 0); // one element each row writes: no two threads share one
  // What the gradient is computed in: half dtypes in f32 (close_gradient allows their rounding to the dtype apart,
  // so the dtype's own 1e-2 would let a gradient off by its whole size pass), with one TF32 product per term as at
  // precision fast, which a half gradient may take whatever its precision (the generator's single_tf32_allowed);
  // else the dtype's own, or at precision fast the TF32 forms' tolerance, whichever is larger.
  const bool half = p.dtype == DType::f16 || p.dtype == DType::bf16;
  Problem in_computed = p;
  const DType computed = half ? DType::f32 : p.dtype;
  in_computed.dtype = computed;
  in_computed.out_dtype = computed;
  if (half) in_computed.precision = Precision::fast;
  const double tol = std::max(reference::tolerance(computed), reference::tolerance(in_computed));
  const int64_t batches = broadcast ? std::min<int64_t>(s.B, 1) : s.B;
  CaseResult r = check_rows_in_parallel<CaseResult>(
      batches * rows,
      [&](int64_t first, int64_t last, CaseResult& r) {
        for (int64_t line = first; line < last; ++line) {
          const int64_t bt = line / rows, row = line % rows;
          for (int64_t col = 0; col < cols; ++col) {
            reference::GradElement want;
            for (int64_t z = broadcast ? 0 : bt; z < (broadcast ? s.B : bt + 1); ++z) {
              const auto part = reference::gradient_element(p, in.a.data(), in.b.data(), in.out_flat.data(),
                                                            in.argmax.empty() ? nullptr : in.argmax.data(),
                                                            in.g_flat.data(), pass, z, row, col);
              want.value += part.value, want.scale += part.scale, want.floor += part.floor;
            }
            const int64_t at = offset_of(sd, {bt, row, col});
            covered[at] = 1;
            ++r.checked;
            const double value = got.at(at);
            if (reference::close_gradient(p.dtype, value, want, tol)) continue;
            if (++r.mismatches == 1) {
              std::ostringstream os;
              os.precision(17);
              os << pass_name(pass) << "[" << bt << "," << row << "," << col << "] = " << value << ", reference "
                 << want.value << " (scale " << want.scale << ")";
              r.first_failure = os.str();
            }
          }
        }
      },
      merge_results, threads_for_terms(s.B * s.M * s.N * s.K));
  const int bytes = dtype_info(p.dtype).size_bytes;
  const std::vector<unsigned char> poison(bytes, poison_byte(p.dtype));
  for (int64_t e = 0; e < got.elements; ++e)
    if (!covered[e] && std::memcmp(&got.bytes[e * bytes], poison.data(), bytes) != 0) ++r.clobbered;
  return r;
}

// One backward kernel (spec.pass) against the reference, on given inputs; the gradient as read back in *got_out.
inline CaseResult run_grad_case_on(const Problem& p, const KernelSpec& spec, const GradInputs& in,
                                   HostTensor* got_out = nullptr) {
  const Shape& s = p.shape;
  const Strides sd = spec.pass == Pass::grad_a ? p.a() : p.b();
  const int64_t rows = spec.pass == Pass::grad_a ? s.M : s.K, cols = spec.pass == Pass::grad_a ? s.K : s.N;
  HostTensor got;
  got.dtype = p.dtype;
  got.elements = storage_elements(s.B, rows, cols, sd);
  got.bytes.resize(got.elements * dtype_info(p.dtype).size_bytes);
  DeviceBuffer dgrad(got.bytes.size());
  dgrad.fill_bytes(poison_byte(p.dtype));
  const DeviceInfo& device = *current_device();
  // The pass's accumulator, poisoned: the launch must zero what it adds into.
  DeviceBuffer workspace(grad_workspace_bytes(grad_problem(p), spec));
  workspace.fill_bytes(0xff);
  launch_grad(grad_problem(p), spec, *load_kernel(device, spec),
              {in.da.get(), in.db.get(), in.dout.get(), in.dg.get(),
               in.argmax.empty() ? nullptr : static_cast<const int32_t*>(in.darg.get()), dgrad.get(), workspace.get()},
              nullptr);
  check(driver().cuCtxSynchronize(), "cuCtxSynchronize after the backward");
  dgrad.download(got.data(), got.bytes.size());
  const CaseResult r = check_gradient(p, spec.pass, in, got);
  if (got_out) *got_out = std::move(got);
  return r;
}

// One backward kernel (spec.pass) against the reference, on inputs with edge values.
inline CaseResult run_grad_case(const Problem& p, const KernelSpec& spec, std::mt19937_64& rng, int flavour) {
  return run_grad_case_on(p, spec, make_grad_inputs(p, rng, flavour));
}

} // namespace jitbmm::test
