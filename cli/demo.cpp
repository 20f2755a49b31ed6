// jitbmm demo: the log semiring end to end on this machine's GPU, or, without one, everything short of the launch.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <stdexcept>
#include <vector>

#include "cache/disk_cache.hpp"
#include "cli/args.hpp"
#include "cli/commands.hpp"
#include "cli/spec_args.hpp"
#include "generator/emit_source.hpp"
#include "jitbmm/errors.hpp"
#include "jitbmm/plan.hpp"
#include "jitbmm/reference.hpp"
#include "runtime/device_memory.hpp"
#include "support/layout.hpp"
#include "runtime/nvrtc_compiler.hpp"
#include "runtime/probes.hpp"
#include "runtime/timing.hpp"

namespace jitbmm::cli {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::vector<float> randn(std::size_t n, std::mt19937_64& rng) {
  std::normal_distribution<float> dist(0.f, 1.f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

int demo_gpu(const Shape& shape) {
  const auto device = current_device();
  std::printf("device: %s (%s, %d SMs), driver CUDA %d.%d, NVRTC %s\n", device->name.c_str(), device->arch().c_str(),
              device->sm_count, device->driver_version / 1000, device->driver_version % 1000 / 10,
              nvrtc_version().c_str());
  ScopedContext scope(device->context);
  const double exp_rate = measure_exp_per_second(*device);
  std::printf("measured exp2 throughput: %.3g /s\n", exp_rate);

  const auto t0 = std::chrono::steady_clock::now();
  const JitLogBMM plan = JitLogBMM::get(shape);
  std::printf("kernel: %s, %d registers, ready in %.0f ms (generate + NVRTC + load)\n",
              plan.plan().kernel_name().c_str(), plan.plan().registers(), 1e3 * seconds_since(t0));

  std::mt19937_64 rng(20261122);
  const std::size_t na = shape.B * shape.M * shape.K, nb = shape.B * shape.K * shape.N,
                    no = shape.B * shape.M * shape.N;
  const std::vector<float> ha = randn(na, rng), hb = randn(nb, rng);
  DeviceBuffer a(na * 4), b(nb * 4), out(no * 4);
  a.upload(ha.data(), na * 4);
  b.upload(hb.data(), nb * 4);
  out.fill_bytes(0xff); // NaN everywhere: any output the kernel fails to write shows up
  const auto* pa = static_cast<const float*>(a.get());
  const auto* pb = static_cast<const float*>(b.get());
  auto* po = static_cast<float*>(out.get());
  plan(pa, pb, po);
  check(driver().cuCtxSynchronize(), "cuCtxSynchronize");
  std::vector<float> ho(no);
  out.download(ho.data(), no * 4);

  const std::size_t unwritten = std::count_if(ho.begin(), ho.end(), [](float x) { return std::isnan(x); });
  Problem problem = plan.plan().problem();
  std::uniform_int_distribution<int64_t> pick(0, std::max<int64_t>(static_cast<int64_t>(no) - 1, 0)); // none drawn at 0
  const int samples = static_cast<int>(std::min<std::size_t>(1000, no));
  int bad = 0;
  double worst = 0;
  for (int s = 0; s < samples; ++s) {
    const int64_t idx = pick(rng);
    const MatrixIndex at = index_of(shape.M, shape.N, idx);
    const auto ref = reference::element(problem, ha.data(), hb.data(), at.batch, at.row, at.col);
    const bool close = reference::close(DType::f32, ho[idx], ref, reference::tolerance(DType::f32));
    if (!close) ++bad;
    // NaN: a special value the reference agrees with has no error; an unwritten or wrong one is the worst there is
    const double rel = std::fabs(ho[idx] - ref.value) / ref.scale;
    worst = std::max(worst, std::isnan(rel) ? (close ? 0.0 : INFINITY) : rel);
  }
  std::printf("check: %d sampled outputs vs the CPU reference: %d mismatches, max rel. error %.2e; "
              "%zu of %zu outputs unwritten\n",
              samples, bad, worst, unwritten, no);

  const Timing t = time_launches([&](Stream s) { plan(pa, pb, po, s); }, 3, 20);
  const double terms_per_s = double(shape.terms()) / (t.median_ms * 1e-3);
  std::printf("\n%-22s %-12s %-14s %-18s\n", "shape BxMxKxN", "time (ms)", "terms/s", "share of exp unit");
  std::printf("%-22s %-12.3f %-14.3g %.1f%%\n", to_string(shape).c_str(), t.median_ms, terms_per_s,
              100.0 * terms_per_s / exp_rate);
  const DiskCache* disk = DiskCache::process_cache();
  std::printf("NVRTC compiles in this process: %ld (disk cache: %s)\n", stats().nvrtc_compiles,
              disk ? disk->dir().c_str() : "off");
  const bool ok = bad == 0 && unwritten == 0;
  std::printf("%s\n", ok ? "demo: verified" : "demo: FAILED verification");
  return ok ? 0 : 1;
}

int demo_without_gpu(const Shape& shape, const NoDriverError& why) {
  std::printf("no GPU: %s\n\n", why.what());
  Problem problem;
  problem.shape = shape;
  const KernelSpec spec = default_spec(problem);
  const GeneratedKernel kernel = emit_kernel(spec);
  const auto t0 = std::chrono::steady_clock::now();
  const CompiledKernel cubin = compile_to_cubin(kernel, "sm_90", PtxasReport::wanted);
  const PtxasResources res = parse_ptxas_log(cubin.log, kernel.name);
  std::printf("generated %s (%zu bytes of CUDA) and compiled it with NVRTC %s for sm_90 in %.0f ms:\n"
              "  cubin %zu bytes, %d registers, %d bytes stack, %d bytes spilled\n",
              kernel.name.c_str(), kernel.source.size(), nvrtc_version().c_str(), 1e3 * seconds_since(t0),
              cubin.binary.size(), res.registers, res.stack_bytes, res.spill_store_bytes);

  Problem small;
  small.shape = {2, 3, 5, 4};
  std::mt19937_64 rng(7);
  std::vector<float> a = randn(2 * 3 * 5, rng), b = randn(2 * 5 * 4, rng);
  for (int k = 0; k < 5; ++k) a[5 + k] = -INFINITY; // row 1 of batch 0: every term −inf
  const auto ref = reference::compute(small, a.data(), b.data());
  std::printf("\nCPU reference, log semiring, shape %s (row 1 of batch 0 is all -inf):\n",
              to_string(small.shape).c_str());
  for (int64_t i = 0; i < 3; ++i) {
    std::printf("  out[0,%lld,:] =", static_cast<long long>(i));
    for (int64_t j = 0; j < 4; ++j) std::printf(" %9.5f", ref[i * 4 + j].value);
    std::printf("\n");
  }
  std::printf("demo: no GPU, so nothing was launched; generation, NVRTC and the reference work\n");
  return 0;
}

} // namespace

int run_demo(int argc, char** argv) {
  const Args args(argc, argv, 2, {"--shape"}, {});
  const Shape shape = parse_flag(args, "--shape", "64x512x512x512", parse_shape);
  Problem problem;
  problem.shape = shape;
  try {
    validate(problem);
  } catch (const std::invalid_argument& e) {
    throw_for_flag(args, e);
  }
  try {
    current_device();
  } catch (const NoDriverError& e) {
    return demo_without_gpu(shape, e);
  }
  return demo_gpu(shape);
}

} // namespace jitbmm::cli
