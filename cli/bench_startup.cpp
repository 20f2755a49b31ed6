// The autotuner's and the disk cache's benchmarks: how long a new process takes to its
// first result, and how long NVRTC takes per variant. Programs to run on the GPU machine, not tests.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "cli/args.hpp"
#include "cli/chain_args.hpp"
#include "cli/commands.hpp"
#include "cli/spec_args.hpp"
#include "jitbmm/chain.hpp"
#include "jitbmm/plan.hpp"
#include "runtime/autotune.hpp"
#include "runtime/device_memory.hpp"
#include "runtime/nvrtc_compiler.hpp"
#include "runtime/tuner/search_space.hpp"

namespace jitbmm::cli {

namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

} // namespace

// From entering this function to the first result copied back to the host: driver and context, the plan (a
// stored decision and a cubin from the disk cache when warm), allocation, one launch; with --step a first training
// step instead: both passes' kernels built ahead (SemiringBMM::prepare), the forward and the backward of both
// gradients. Prints the split, which kernels ran it (a stand-in's quick builds while the chosen ones build:
// docs/caching-and-tuning.md, "First calls") and when the plan settled, the number of NVRTC compilations by then (0
// when the disk cache served everything) and the spec the plan chose.
int run_first_call(const Args& args) {
  const auto t0 = Clock::now();
  const Problem p = problem_from(args, "bench --first-call");
  const bool step = args.has("--step");
  const auto device = current_device();
  ScopedContext scope(device->context);
  const double t_context = ms_since(t0);
  if (step) SemiringBMM::prepare(p, true, true);
  const SemiringBMM plan = SemiringBMM::get(p);
  const double t_plan = ms_since(t0) - t_context;
  const bool stand_in = !plan.settled();
  const std::string ran = plan.kernel_name();
  const Shape& s = p.shape;
  const int in = dtype_info(p.dtype).size_bytes, outb = dtype_info(p.output_dtype()).size_bytes;
  DeviceBuffer a(s.B * s.M * s.K * in), b(s.B * s.K * s.N * in), out(s.B * s.M * s.N * outb),
      argmax(p.with_argmax ? s.B * s.M * s.N * 4 : 0);
  a.fill_bytes(0), b.fill_bytes(0);
  auto* best = static_cast<int32_t*>(argmax.get());
  const auto t_launch0 = Clock::now();
  plan(a.get(), b.get(), out.get(), best, Stream{nullptr});
  // The first bytes of a result, so that the time includes the work's end: at most one element's, none of an empty one.
  unsigned char first[8] = {};
  if (step) {
    DeviceBuffer ga(a.size()), gb(b.size());
    plan.backward(a.get(), b.get(), out.get(), best, out.get(), ga.get(), gb.get());
    if (ga.size()) ga.download(first, std::min(sizeof first, ga.size()));
  } else if (out.size()) {
    out.download(first, std::min(sizeof first, out.size()));
  }
  const double t_launch = ms_since(t_launch0), total = ms_since(t0);
  while (!plan.settled()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const double t_settled = ms_since(t0);
  std::printf("first %s %s: context %.1f ms, plan %.1f ms, first launch and copy %.1f ms; total %.1f ms, "
              "jitbmm's part (plan + launch) %.1f ms; run by %s%s, settled at %.1f ms; NVRTC compilations %ld; "
              "spec %s\n",
              step ? "training step" : "call", describe(p).c_str(), t_context, t_plan, t_launch, total,
              t_plan + t_launch, ran.c_str(), stand_in ? " (a stand-in)" : "", t_settled, stats().nvrtc_compiles,
              to_string(plan.spec()).c_str());
  return 0;
}

// A chain's first call, from entering this function: the plan (ChainPlan::get: its kernels compiled, or a stand-in's
// while the chosen strategy is built: docs/caching-and-tuning.md, "First calls"), then a forward with what its
// backward reads (log: saved; max_plus: the path) and, for log, the backward, on zeroed inputs, to its score copied
// back; then when the plan settled on its chosen strategy and the number of NVRTC compilations.
int run_chain_first_call(const Args& args) {
  const auto t0 = Clock::now();
  const ChainProblem p = sized_chain_problem_from(args);
  const auto device = current_device();
  ScopedContext scope(device->context);
  const double t_context = ms_since(t0);
  const ChainPlan plan = ChainPlan::get(p);
  const double t_plan = ms_since(t0) - t_context;
  const bool log = p.semiring == Semiring::log, hmm = p.form == ChainForm::hmm;
  const std::size_t element = std::size_t(dtype_info(p.dtype).size_bytes);
  const std::size_t emissions = std::size_t(p.B * p.T * p.C) * element, table = std::size_t(p.C * p.C) * element;
  const std::size_t inputs = hmm ? emissions + table + std::size_t(p.C) * element
                                 : std::size_t(p.B * (p.T - 1)) * table;
  DeviceBuffer in(std::max<std::size_t>(inputs, 1)), grads(std::max<std::size_t>(inputs, 1)),
      score(std::max<std::size_t>(std::size_t(p.B) * 8, 1)), ones(std::max<std::size_t>(std::size_t(p.B) * 8, 1)),
      saved(std::max<std::size_t>(plan.saved_bytes(), 1)), path(std::max<std::size_t>(std::size_t(p.B * p.T) * 4, 1));
  in.fill_bytes(0);
  ones.fill_bytes(0);
  char* x = static_cast<char*>(in.get());
  char* g = static_cast<char*>(grads.get());
  const HmmInputs tables{x, x + emissions, x + emissions + table};
  const HmmGradients table_grads{g, g + emissions, g + emissions + table};
  void* keep = log ? saved.get() : nullptr;
  int32_t* best = log ? nullptr : static_cast<int32_t*>(path.get());
  if (hmm)
    plan(tables, nullptr, score.get(), keep, nullptr, best);
  else
    plan(in.get(), nullptr, score.get(), keep, nullptr, best);
  // Who ran it: a forward that saves may wait for the chosen strategy (where the stand-in lays `saved` out otherwise).
  const std::string ran = plan.strategy();
  const bool stand_in = !plan.settled();
  if (log && hmm) plan.backward(tables, nullptr, keep, nullptr, ones.get(), table_grads);
  if (log && !hmm) plan.backward(in.get(), nullptr, keep, nullptr, ones.get(), grads.get());
  float first = 0;
  score.download(&first, sizeof first);
  const double t_call = ms_since(t0);
  while (!plan.settled()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  std::printf("first call of chain %s %s%s %lldx%lldx%lld (%s): context %.1f ms, plan %.1f ms; its first %s done at "
              "%.1f ms, run by %s%s; the %s strategy from %.1f ms; NVRTC compilations %ld\n",
              semiring_info(p.semiring).name, dtype_info(p.dtype).name, hmm ? " hmm" : "", (long long)p.B,
              (long long)p.T, (long long)p.C, device->name.c_str(), t_context, t_plan,
              log ? "forward + backward" : "forward with the path", t_call, ran.c_str(),
              stand_in ? " (a stand-in)" : "", plan.strategy(), ms_since(t0), stats().nvrtc_compiles);
  return 0;
}

// NVRTC + ptxas time of every tuning candidate of the problem, compiled one after another on one thread for
// --arch (default sm_90; no GPU needed, the disk cache is bypassed), reported as a distribution.
int run_compile_times(const Args& args) {
  const Problem p = problem_from(args, "bench --compile-times");
  const std::string arch = arch_from(args);
  require_nvrtc_targets(arch);
  // The candidates a GPU of that architecture tunes: its features and its shared memory.
  const int sm = parse_sm(arch, "--arch");
  const DeviceLimits limits{1024, jb::kMaxStaticSharedBytes, least_shared_optin_bytes(sm), arch_features(sm)};
  std::vector<double> ms;
  for (const KernelSpec& spec : tuning_candidates(p, limits)) {
    const GeneratedKernel kernel = emit_kernel(spec);
    const auto t0 = Clock::now();
    compile_to_cubin(kernel, arch);
    ms.push_back(ms_since(t0));
    if (args.has("--verbose")) std::printf("%8.0f ms  %s\n", ms.back(), to_string(spec).c_str());
  }
  std::sort(ms.begin(), ms.end());
  auto at = [&](double q) { return ms[std::min(ms.size() - 1, std::size_t(q * ms.size()))]; };
  std::printf("NVRTC compile of %zu variants of %s for %s: min %.0f ms, median %.0f ms, p90 %.0f ms, max %.0f ms\n",
              ms.size(), describe(p).c_str(), arch.c_str(), ms.front(), at(0.5), at(0.9), ms.back());
  return 0;
}

} // namespace jitbmm::cli
