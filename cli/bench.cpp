// jitbmm bench: a benchmark program, not a test. Per shape and strategy: median device time of CUDA-event-timed
// runs after warm-up on fresh random (never zero) inputs, terms/s (B·M·N·K per second), and the share of the
// ceiling measured on this GPU (exp2 rate for log; FP32 instruction rate for the others).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "cli/args.hpp"
#include "cli/commands.hpp"
#include "cli/spec_args.hpp"
#include "jitbmm/plan.hpp"
#include "jitbmm/reference.hpp"
#include "runtime/device_memory.hpp"
#include "support/layout.hpp"
#include "runtime/probes.hpp"
#include "runtime/timing.hpp"

namespace jitbmm::cli {

namespace {

struct Ceilings {
  double exp_per_s = 0, fma_per_s = 0;
};

// Terms per second the unit that bounds this semiring allows: log pays one exp per term; max/min-plus and
// max-times one add or multiply plus one max/min (two FP32-pipe instructions); plus-times one FMA.
double ceiling_terms_per_s(Semiring s, const Ceilings& c) {
  switch (s) {
  case Semiring::log:
    return c.exp_per_s;
  case Semiring::plus_times:
    return c.fma_per_s;
  default:
    return c.fma_per_s / 2;
  }
}

struct Row {
  Problem problem;
  KernelSpec spec;
  double ms = 0, terms_per_s = 0, share = 0;
  int registers = 0, mismatches = 0, checked = 0;
};

// The exit status of a run: 1, said on stderr, where a row's outputs differ from the reference (its check column).
int mismatched(const std::vector<Row>& rows) {
  int n = 0;
  for (const Row& r : rows) n += r.mismatches;
  if (n == 0) return 0;
  std::fprintf(stderr, "jitbmm bench: %d checked outputs differ from the reference\n", n);
  return 1;
}

Row run_one(const Problem& p, const KernelSpec& spec, const Ceilings& ceilings, int reps, std::mt19937_64& rng) {
  const Shape& s = p.shape;
  const int in_bytes = dtype_info(p.dtype).size_bytes, out_bytes = dtype_info(p.output_dtype()).size_bytes;
  const int64_t na = s.B * s.M * s.K, nb = s.B * s.K * s.N, no = s.B * s.M * s.N;
  std::normal_distribution<double> normal(0.0, 1.0);
  const bool non_negative = semiring_info(p.semiring).nonnegative_inputs;
  std::vector<unsigned char> ha(na * in_bytes), hb(nb * in_bytes);
  for (int64_t i = 0; i < na; ++i)
    store_element(p.dtype, ha.data(), i, non_negative ? std::fabs(normal(rng)) : normal(rng));
  for (int64_t i = 0; i < nb; ++i)
    store_element(p.dtype, hb.data(), i, non_negative ? std::fabs(normal(rng)) : normal(rng));
  DeviceBuffer a(ha.size()), b(hb.size()), out(no * out_bytes), arg(p.with_argmax ? no * 4 : 0);
  a.upload(ha.data(), ha.size());
  b.upload(hb.data(), hb.size());
  out.fill_bytes(0x7f);
  const SemiringBMM plan = SemiringBMM::get(p, spec);
  auto* argp = p.with_argmax ? static_cast<int32_t*>(arg.get()) : nullptr;
  const Timing t = time_launches([&](Stream st) { plan(a.get(), b.get(), out.get(), argp, st); }, 3, reps);
  Row row{p, spec};
  row.ms = t.median_ms;
  row.terms_per_s = double(s.terms()) / (t.median_ms * 1e-3);
  row.share = row.terms_per_s / ceiling_terms_per_s(p.semiring, ceilings);
  row.registers = plan.registers();
  // A sample checked against the CPU reference, so no broken kernel is timed silently.
  std::vector<unsigned char> ho(no * out_bytes);
  out.download(ho.data(), ho.size());
  std::uniform_int_distribution<int64_t> pick(0, std::max<int64_t>(no - 1, 0)); // drawn from only when no > 0
  for (int n = 0; n < 32 && no > 0; ++n, ++row.checked) {
    const int64_t o = pick(rng);
    const MatrixIndex at = index_of(s.M, s.N, o);
    const auto want = reference::element(p, ha.data(), hb.data(), at.batch, at.row, at.col);
    if (!reference::close(p.output_dtype(), load_element(p.output_dtype(), ho.data(), o), want,
                          reference::tolerance(p)))
      ++row.mismatches;
  }
  return row;
}

// The standard benchmark table (`jitbmm bench` without flags): the training shapes with the default spec and the
// alternatives worth comparing.
std::vector<std::pair<Problem, std::vector<KernelSpec>>> default_suite() {
  std::vector<std::pair<Problem, std::vector<KernelSpec>>> suite;
  auto add = [&](Semiring s, DType d, Shape shape, const std::vector<Strategy>& extra) {
    Problem p;
    p.semiring = s;
    p.dtype = d;
    p.shape = shape;
    std::vector<KernelSpec> specs = {default_spec(p)};
    for (Strategy st : extra) specs.push_back(default_spec(p, st));
    suite.emplace_back(p, specs);
  };
  add(Semiring::log, DType::f32, {64, 512, 512, 512}, {Strategy::linear, Strategy::warp});
  add(Semiring::log, DType::f32, {512, 128, 128, 128}, {Strategy::linear});
  add(Semiring::max_plus, DType::f32, {64, 512, 512, 512}, {Strategy::linear});
  add(Semiring::log, DType::f32, {8, 64, 64, 64}, {Strategy::linear, Strategy::tiled});
  add(Semiring::log, DType::f32, {4, 64, 65536, 64}, {Strategy::tiled, Strategy::warp, Strategy::block_tree});
  add(Semiring::log, DType::f16, {64, 512, 512, 512}, {});
  add(Semiring::log, DType::bf16, {64, 512, 512, 512}, {});
  add(Semiring::plus_times, DType::f32, {64, 512, 512, 512}, {});
  return suite;
}

} // namespace

int run_bench(int argc, char** argv) {
  std::set<std::string> flags = spec_flags();
  flags.insert({"--reps", "--arch", "--chain", "--batch", "--length", "--cluster", "--threads", "--lanes",
                "--beta-lanes", "--saving-blocks", "--chunk"});
  std::set<std::string> switches = spec_switches();
  const std::vector<std::string> modes = {"--first-call", "--compile-times", "--backward", "--exp-matmul", "--chain"};
  switches.insert(modes.begin(), modes.end());
  switches.erase("--chain"); // a flag (the number of states)
  switches.insert({"--json", "--verbose", "--sweep", "--hmm", "--stepped", "--step"});
  const Args args(argc, argv, 2, flags, switches);
  // Each mode reads its own flags; one given to a mode that ignores it is an error.
  std::string mode;
  for (const std::string& m : modes)
    if (args.has(m) && !(m == "--chain" && mode == "--first-call")) { // a chain's first call: --chain the states
      if (!mode.empty()) throw std::invalid_argument(m + ": not used with " + mode + " (one bench mode at a time)");
      mode = m;
    }
  std::set<std::string> used = problem_flags();
  used.insert({"--argmax", mode});
  if (mode == "--first-call" && args.has("--chain")) {
    args.require_only({"--first-call", "--chain", "--hmm", "--semiring", "--dtype", "--batch", "--length"},
                      "bench --first-call --chain");
    return run_chain_first_call(args);
  }
  if (mode == "--first-call") {
    used.insert("--step");
    args.require_only(used, "bench --first-call");
    return run_first_call(args);
  }
  if (mode == "--compile-times") {
    used.insert({"--arch", "--verbose"});
    args.require_only(used, "bench --compile-times");
    return run_compile_times(args);
  }
  if (mode == "--backward") {
    used.insert("--reps");
    // Its check reads the gradients as contiguous row-major arrays, as it lays the operands out; a selecting
    // semiring's forward saves its argmax whatever --argmax says (what a training step runs), so the flag is not its.
    used.erase("--a-layout"), used.erase("--b-layout"), used.erase("--argmax");
    args.require_only(used, "bench --backward");
    return run_backward_bench(args);
  }
  if (mode == "--chain") {
    args.require_only({"--chain", "--hmm", "--semiring", "--dtype", "--batch", "--length", "--cluster", "--threads",
                       "--lanes", "--beta-lanes", "--saving-blocks", "--sweep", "--chunk", "--stepped", "--reps"},
                      "bench --chain");
    return run_chain_bench(args);
  }
  if (mode == "--exp-matmul") {
    args.require_only({"--exp-matmul", "--shape", "--dtype", "--reps"}, "bench --exp-matmul");
    return run_exp_matmul_bench(args);
  }
  used = spec_flags();
  used.erase("--pass"); // bench times the forward; bench --backward times the gradients
  for (const std::string& s : spec_switches()) used.insert(s);
  used.insert({"--reps", "--json"});
  args.require_only(used, "bench (it times forward kernels; --arch and --verbose belong to --compile-times)");
  const int reps = reps_from(args);
  // Any problem or variant flag: that one problem; none: the standard table.
  const bool one_problem = std::any_of(args.given().begin(), args.given().end(),
                                       [](const std::string& flag) { return flag != "--reps" && flag != "--json"; });
  std::vector<std::pair<Problem, std::vector<KernelSpec>>> suite;
  if (one_problem) { // checked before the GPU is touched: a bad flag is reported as such, at once
    const Problem p = problem_from(args, "bench");
    suite.push_back({p, {spec_from(args, p)}});
  } else {
    suite = default_suite();
  }
  const auto device = current_device();
  ScopedContext scope(device->context);
  Ceilings ceilings{measure_exp_per_second(*device), measure_fma_per_second(*device)};
  std::mt19937_64 rng(12345);
  std::vector<Row> rows;
  for (const auto& [p, specs] : suite)
    for (const KernelSpec& spec : specs) rows.push_back(run_one(p, spec, ceilings, reps, rng));
  const bool json = args.has("--json");
  if (json) {
    std::printf("{\"device\": \"%s\", \"exp_per_s\": %.4g, \"fma_per_s\": %.4g, \"rows\": [\n", device->name.c_str(),
                ceilings.exp_per_s, ceilings.fma_per_s);
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      std::printf("  {\"problem\": \"%s\", \"spec\": \"%s\", \"ms\": %.5f, \"terms_per_s\": %.4g, \"share\": %.4f, "
                  "\"registers\": %d, \"mismatches\": %d}%s\n",
                  describe(r.problem).c_str(), to_string(r.spec).c_str(), r.ms, r.terms_per_s, r.share, r.registers,
                  r.mismatches, i + 1 < rows.size() ? "," : "");
    }
    std::printf("]}\n");
    return mismatched(rows);
  }
  std::printf("device: %s; measured exp2 %.3g /s, FP32 FMA %.3g /s\n", device->name.c_str(), ceilings.exp_per_s,
              ceilings.fma_per_s);
  std::printf("%-10s %-5s %-17s %-52s %9s %10s %7s %5s %s\n", "semiring", "dtype", "shape", "variant", "time ms",
              "terms/s", "ceiling", "regs", "check");
  for (const Row& r : rows) {
    std::string variant = to_string(r.spec);
    variant = variant.substr(variant.find("strategy="));
    std::printf("%-10s %-5s %-17s %-52s %9.4f %10.3g %6.1f%% %5d %d/%d\n", semiring_info(r.problem.semiring).name,
                dtype_info(r.problem.dtype).name, to_string(r.problem.shape).c_str(), variant.c_str(), r.ms,
                r.terms_per_s, 100 * r.share, r.registers, r.checked - r.mismatches, r.checked);
  }
  return mismatched(rows);
}

} // namespace jitbmm::cli
