// jitbmm bench --exp-matmul: the exp-matmul strategy against the direct log kernels (tiled, tiled_online), per input
// kind. Per row: median
// time, terms/s, the relative error of sampled outputs against the float64 CPU reference, and the share of outputs
// the guard sent to the exact repair pass.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli/args.hpp"
#include "cli/commands.hpp"
#include "cli/spec_args.hpp"
#include "jitbmm/plan.hpp"
#include "jitbmm/reference.hpp"
#include "runtime/device_memory.hpp"
#include "runtime/timing.hpp"
#include "support/layout.hpp"

namespace jitbmm::cli {

namespace {

// The input kinds: randn, randn·50 and randn·500 (row and column maxima far apart: most outputs fail the plain
// shift), and a banded −inf mask (CRF-style structured zeros: most outputs exactly −inf).
enum class Inputs { randn, spread50, spread500, banded };
const char* inputs_name(Inputs k) {
  return k == Inputs::randn       ? "randn"
         : k == Inputs::spread50  ? "randn*50"
         : k == Inputs::spread500 ? "randn*500"
                                  : "banded";
}

void fill(const Problem& p, Inputs kind, std::vector<unsigned char>& ha, std::vector<unsigned char>& hb,
          std::mt19937_64& rng) {
  const Shape& s = p.shape;
  const double spread = kind == Inputs::spread50 ? 50 : kind == Inputs::spread500 ? 500 : 1;
  std::normal_distribution<double> normal(0.0, spread);
  const int64_t band = std::max<int64_t>(4, s.K / 64);
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t i = 0; i < s.M; ++i)
      for (int64_t k = 0; k < s.K; ++k) {
        const bool masked = kind == Inputs::banded && std::llabs(i * s.K / std::max<int64_t>(1, s.M) - k) > band;
        store_element(p.dtype, ha.data(), (b * s.M + i) * s.K + k, masked ? -INFINITY : normal(rng));
      }
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t k = 0; k < s.K; ++k)
      for (int64_t j = 0; j < s.N; ++j) {
        const bool masked = kind == Inputs::banded && std::llabs(j * s.K / std::max<int64_t>(1, s.N) - k) > band;
        store_element(p.dtype, hb.data(), (b * s.K + k) * s.N + j, masked ? -INFINITY : normal(rng));
      }
}

struct Row {
  std::string variant;
  Inputs inputs;
  double ms = 0, terms_per_s = 0, max_rel = 0, mean_rel = 0, repaired = -1;
  int mismatches = 0, checked = 0;
};

} // namespace

int run_exp_matmul_bench(const Args& args) {
  const int reps = reps_from(args);
  std::vector<Shape> shapes = {{64, 512, 512, 512}, {4, 2048, 2048, 2048}};
  if (args.has("--shape")) shapes = {parse_flag(args, "--shape", "", parse_shape)};
  const DType dtype = parse_flag(args, "--dtype", "f32", parse_dtype);
  for (const Shape& shape : shapes) { // every problem checked before the GPU is touched (and sizes are computed)
    Problem p;
    p.shape = shape;
    p.dtype = dtype;
    try {
      validate(p);
    } catch (const std::invalid_argument& e) {
      throw_for_flag(args, e);
    }
    if (shape.terms() == 0) // its check samples outputs, and it times terms
      throw std::invalid_argument("--shape: " + to_string(shape) + " has no terms; bench --exp-matmul times products "
                                                                   "of at least one output and one term each");
  }
  const auto device = current_device();
  ScopedContext scope(device->context);
  std::mt19937_64 rng(2026);
  int mismatched = 0;
  std::printf("device: %s\n", device->name.c_str());
  std::printf("%-17s %-9s %-40s %9s %10s %10s %10s %9s %s\n", "shape", "inputs", "variant", "time ms", "terms/s",
              "max rel", "mean rel", "repaired", "check");
  for (const Shape& shape : shapes) {
    Problem p;
    p.shape = shape;
    p.dtype = dtype;
    const Shape& s = p.shape;
    const int in_bytes = dtype_info(p.dtype).size_bytes, out_bytes = dtype_info(p.output_dtype()).size_bytes;
    std::vector<unsigned char> ha(s.B * s.M * s.K * in_bytes), hb(s.B * s.K * s.N * in_bytes),
        ho(s.B * s.M * s.N * out_bytes);
    DeviceBuffer a(ha.size()), b(hb.size()), out(ho.size());
    // The variants: the direct kernel (tuned tile), exp_matmul with FMA, 3xTF32, and 1xTF32 (precision = fast).
    std::vector<std::pair<std::string, std::pair<Problem, KernelSpec>>> variants;
    KernelSpec direct = default_spec(p, Strategy::tiled);
    variants.push_back({"direct tiled", {p, direct}});
    const bool f32_acc = !dtype_info(p.dtype).wide_acc(); // tiled_online and the tensor-core forms
    if (f32_acc)
      variants.push_back({"direct tiled_online", {p, default_spec(p, Strategy::tiled_online)}});
    KernelSpec em = default_spec(p, Strategy::exp_matmul);
    if (f32_acc) {
      em.math = Math::fma, em.tile_m = 128, em.tile_n = 64, em.tile_k = 16, em.thread_m = 8, em.thread_n = 4;
      em.min_blocks = 2;
      variants.push_back({"exp_matmul fma 128x64 t8x4", {p, em}});
      em = default_spec(p, Strategy::exp_matmul);
      variants.push_back({"exp_matmul tf32x3 " + std::to_string(em.tile_m) + "x" + std::to_string(em.tile_n), {p, em}});
      Problem fast = p;
      fast.precision = Precision::fast;
      em.math = Math::tf32;
      variants.push_back({"exp_matmul tf32 (fast)", {fast, em}});
    } else {
      variants.push_back({"exp_matmul fma", {p, em}});
    }
    for (Inputs kind : {Inputs::randn, Inputs::spread50, Inputs::spread500, Inputs::banded}) {
      fill(p, kind, ha, hb, rng);
      a.upload(ha.data(), ha.size());
      b.upload(hb.data(), hb.size());
      // The sampled outputs and their float64 reference, shared by every variant.
      std::uniform_int_distribution<int64_t> pick(0, std::max<int64_t>(s.B * s.M * s.N - 1, 0));
      std::vector<std::pair<int64_t, reference::Element>> samples;
      for (int n = 0; n < 256; ++n) {
        const int64_t o = pick(rng);
        const MatrixIndex at = index_of(s.M, s.N, o);
        samples.emplace_back(o, reference::element(p, ha.data(), hb.data(), at.batch, at.row, at.col));
      }
      for (const auto& [name, pv] : variants) {
        const auto& [vp, spec] = pv;
        Row row{name, kind};
        const SemiringBMM plan = SemiringBMM::get(vp, spec);
        out.fill_bytes(0x7f);
        if (spec.strategy == Strategy::exp_matmul) {
          const auto report = plan.run_with_repair_report(a.get(), b.get(), out.get());
          row.repaired = double(report.repaired_outputs) / double(report.outputs);
        } else {
          plan(a.get(), b.get(), out.get());
        }
        out.download(ho.data(), ho.size());
        double sum_rel = 0;
        int finite = 0;
        for (const auto& [o, want] : samples) {
          const double got = load_element(p.output_dtype(), ho.data(), o);
          ++row.checked;
          if (!reference::close(p.output_dtype(), got, want, reference::tolerance(vp))) ++row.mismatches;
          if (std::isfinite(want.value) && want.value != 0) {
            const double rel = std::fabs(got - want.value) / std::fabs(want.value);
            row.max_rel = std::max(row.max_rel, std::isnan(rel) ? INFINITY : rel);
            sum_rel += rel, ++finite;
          }
        }
        row.mean_rel = finite ? sum_rel / finite : 0;
        const Timing t = time_launches([&](Stream st) { plan(a.get(), b.get(), out.get(), st); }, 3, reps);
        row.ms = t.median_ms;
        row.terms_per_s = double(s.terms()) / (t.median_ms * 1e-3);
        char repaired[32] = "-";
        if (row.repaired >= 0) std::snprintf(repaired, sizeof repaired, "%.2f%%", 100 * row.repaired);
        std::printf("%-17s %-9s %-40s %9.4f %10.3g %10.2e %10.2e %9s %d/%d\n", to_string(s).c_str(), inputs_name(kind),
                    row.variant.c_str(), row.ms, row.terms_per_s, row.max_rel, row.mean_rel, repaired,
                    row.checked - row.mismatches, row.checked);
        std::fflush(stdout);
        mismatched += row.mismatches;
      }
    }
  }
  if (mismatched == 0) return 0;
  std::fprintf(stderr, "jitbmm bench --exp-matmul: %d sampled outputs differ from the reference (the check column)\n",
               mismatched);
  return 1;
}

} // namespace jitbmm::cli
