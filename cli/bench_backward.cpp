// jitbmm bench --backward: forward and backward times of one problem, with each gradient's variant, the
// ratio (forward + backward) / forward, the device memory the backward allocates beyond the gradients
// themselves, and a sampled check of both gradients against the CPU reference. A benchmark, not a test.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <thread>
#include <vector>

#include "cli/args.hpp"
#include "cli/commands.hpp"
#include "cli/spec_args.hpp"
#include "jitbmm/plan.hpp"
#include "jitbmm/reference.hpp"
#include "runtime/device_memory.hpp"
#include "support/layout.hpp"
#include "runtime/timing.hpp"

namespace jitbmm::cli {

int run_backward_bench(const Args& args) {
  const Problem p = problem_from(args, "bench --backward");
  const int reps = reps_from(args);
  const auto device = current_device();
  ScopedContext scope(device->context);
  const Shape& s = p.shape;
  const bool scatter = semiring_info(p.semiring).backward == BackwardKind::argmax_scatter;
  const int in = dtype_info(p.dtype).size_bytes, ob = dtype_info(p.output_dtype()).size_bytes;
  const int64_t na = s.B * s.M * s.K, nb = s.B * s.K * s.N, no = s.B * s.M * s.N;
  std::mt19937_64 rng(4242);
  std::normal_distribution<double> normal(0.0, 1.0);
  auto random = [&](DType dt, int64_t n, bool non_negative) {
    std::vector<unsigned char> h(n * dtype_info(dt).size_bytes);
    for (int64_t i = 0; i < n; ++i) store_element(dt, h.data(), i, non_negative ? std::fabs(normal(rng)) : normal(rng));
    return h;
  };
  const auto ha = random(p.dtype, na, semiring_info(p.semiring).nonnegative_inputs);
  const auto hb = random(p.dtype, nb, semiring_info(p.semiring).nonnegative_inputs);
  const auto hg = random(p.output_dtype(), no, false);
  DeviceBuffer a(ha.size()), b(hb.size()), g(hg.size()), out(no * ob), arg(scatter ? no * 4 : 0), ga(na * in),
      gb(nb * in);
  a.upload(ha.data(), ha.size());
  b.upload(hb.data(), hb.size());
  g.upload(hg.data(), hg.size());
  Problem fp = p;
  fp.with_argmax = scatter; // the forward a training step runs: it saves the argmax for the backward
  const SemiringBMM plan = SemiringBMM::get(fp);
  // The chosen variants, not a stand-in's quick builds of the defaults (docs/caching-and-tuning.md, "First calls").
  while (!plan.settled()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  auto* argp = scatter ? static_cast<int32_t*>(arg.get()) : nullptr;
  const Timing fwd = time_launches([&](Stream st) { plan(a.get(), b.get(), out.get(), argp, st); }, 3, reps);
  const Timing both = time_launches(
      [&](Stream st) { plan.backward(a.get(), b.get(), out.get(), argp, g.get(), ga.get(), gb.get(), st); }, 3, reps);
  const Timing only_a = time_launches(
      [&](Stream st) { plan.backward(a.get(), b.get(), out.get(), argp, g.get(), ga.get(), nullptr, st); }, 3, reps);
  const Timing only_b = time_launches(
      [&](Stream st) { plan.backward(a.get(), b.get(), out.get(), argp, g.get(), nullptr, gb.get(), st); }, 3, reps);
  plan.backward(a.get(), b.get(), out.get(), argp, g.get(), ga.get(), gb.get());
  // Sampled check of both gradients (the reference uses the forward's out and argmax, as the kernels do).
  std::vector<unsigned char> ho(no * ob), hga(na * in), hgb(nb * in);
  std::vector<int32_t> harg(scatter ? no : 0);
  out.download(ho.data(), ho.size());
  ga.download(hga.data(), hga.size());
  gb.download(hgb.data(), hgb.size());
  if (scatter) arg.download(harg.data(), harg.size() * 4);
  std::vector<double> out_flat(no), g_flat(no);
  for (int64_t o = 0; o < no; ++o)
    out_flat[o] = load_element(p.output_dtype(), ho.data(), o),
    g_flat[o] = load_element(p.output_dtype(), hg.data(), o);
  int checked = 0, wrong = 0;
  std::uniform_int_distribution<int64_t> pick_a(0, std::max<int64_t>(0, na - 1)),
      pick_b(0, std::max<int64_t>(0, nb - 1));
  for (int n = 0; n < 16 && na > 0 && nb > 0; ++n) {
    const int64_t ea = pick_a(rng), eb = pick_b(rng);
    const MatrixIndex ia = index_of(s.M, s.K, ea), ib = index_of(s.K, s.N, eb);
    const auto wa =
        reference::gradient_element(p, ha.data(), hb.data(), out_flat.data(), scatter ? harg.data() : nullptr,
                                    g_flat.data(), Pass::grad_a, ia.batch, ia.row, ia.col);
    const auto wb =
        reference::gradient_element(p, ha.data(), hb.data(), out_flat.data(), scatter ? harg.data() : nullptr,
                                    g_flat.data(), Pass::grad_b, ib.batch, ib.row, ib.col);
    const double tol = reference::tolerance(p.dtype);
    wrong += !reference::close_gradient(p.dtype, load_element(p.dtype, hga.data(), ea), wa, tol);
    wrong += !reference::close_gradient(p.dtype, load_element(p.dtype, hgb.data(), eb), wb, tol);
    checked += 2;
  }
  // What the backward takes beyond the gradients: its scratch, from jitbmm's pool here (exp_matmul's H and V, the
  // scatter's accumulators, ...), as the plan counts it for the calls above.
  const double extra_mb = double(plan.backward_workspace_bytes(true, true, argp != nullptr)) / 1e6;
  const double io_mb = double(na + nb) * in / 1e6 + double(no) * ob / 1e6;
  std::printf("backward %s on %s\n", describe(p).c_str(), device->name.c_str());
  std::printf("  forward %s: %.4f ms\n", to_string(plan.spec()).c_str(), fwd.median_ms);
  std::printf("  grad_a  %s: %.4f ms\n", to_string(plan.grad_spec(Pass::grad_a)).c_str(), only_a.median_ms);
  std::printf("  grad_b  %s: %.4f ms\n", to_string(plan.grad_spec(Pass::grad_b)).c_str(), only_b.median_ms);
  std::printf("  backward (both) %.4f ms; forward+backward %.4f ms = %.2f x forward; backward = %.2f x forward\n",
              both.median_ms, fwd.median_ms + both.median_ms, (fwd.median_ms + both.median_ms) / fwd.median_ms,
              both.median_ms / fwd.median_ms);
  std::printf("  the backward's scratch (jitbmm's pool): %.1f MB (inputs + outputs: %.1f MB); check %d/%d\n",
              extra_mb, io_mb, checked - wrong, checked);
  return wrong == 0 ? 0 : 1;
}

} // namespace jitbmm::cli
