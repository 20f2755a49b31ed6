// jitbmm bench --chain C: the linear-chain kernels of one problem on this GPU (a benchmark, not a test). Per
// variant: the forward (score only), the forward that saves its messages for a backward, the backward, and for
// max_plus the forward with the best path; median device times of CUDA-event-timed runs after warm-up on standard
// normal potentials, terms/s (B·(T − 1)·C² per second), and the first sequence's score checked against the CPU
// reference so that no broken variant is timed silently. --sweep compares the variants a block of 128 to 1024
// threads with 1 to 32 lanes per state makes (both forwards alike, the backward messages' lanes by their rule), the
// default first.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "cli/args.hpp"
#include "cli/chain_args.hpp"
#include "cli/commands.hpp"
#include "jitbmm/reference.hpp"
#include "runtime/chain_plan.hpp"
#include "runtime/device.hpp"
#include "runtime/device_memory.hpp"
#include "runtime/timing.hpp"
#include "support/layout.hpp"

namespace jitbmm::cli {

namespace {

struct ChainRow {
  ChainSpec spec;
  double forward_ms = 0, saving_ms = 0, backward_ms = 0;
  bool checked = false;
};

// The variants --sweep compares: the default, then every block of 128 to 1024 threads with a power-of-two number of
// lanes per state (1 to 32) that the spec check accepts.
std::vector<ChainSpec> sweep_specs(const ChainProblem& problem, const ChainSpec& first) {
  std::vector<ChainSpec> specs = {first};
  for (int threads = 128; threads <= 1024; threads *= 2)
    for (int lanes = 1; lanes <= 32; lanes *= 2) {
      ChainSpec s = first;
      s.forward = s.saving = {threads, lanes};
      s.beta_lanes = default_beta_lanes(s);
      if (s == first || lanes > 2 * problem.C) continue;
      specs.push_back(s);
    }
  return specs;
}

} // namespace

int run_chain_bench(const Args& args) {
  const int64_t B = parse_int(args.get("--batch", "32"), "--batch", 1, 1 << 20);
  const int64_t T = parse_int(args.get("--length", "512"), "--length", 1, 1 << 24);
  const ChainProblem p = chain_problem_from(args, B, T);
  const ChainSpec chosen = chain_spec_from(args, p);
  const int reps = reps_from(args);
  const bool log = p.semiring == Semiring::log;
  const auto device = current_device();
  ScopedContext scope(device->context);

  const int bytes = dtype_info(p.dtype).size_bytes;
  const int64_t n = B * (T - 1) * p.C * p.C;
  std::vector<unsigned char> host(std::size_t(n) * bytes);
  std::mt19937_64 rng(2024);
  std::normal_distribution<double> normal(0.0, 1.0);
  for (int64_t i = 0; i < n; ++i) store_element(p.dtype, host.data(), i, normal(rng));
  DeviceBuffer pot(host.size() + 1), score(B * bytes), grad(host.size() + 1), g(B * bytes),
      path(log ? 0 : B * T * 4);
  pot.upload(host.data(), host.size());
  std::vector<unsigned char> ones(B * bytes);
  for (int64_t b = 0; b < B; ++b) store_element(p.dtype, ones.data(), b, 1.0);
  g.upload(ones.data(), ones.size());

  // The first sequence's score on the CPU: every variant must agree with it.
  ChainProblem first = p;
  first.B = 1;
  double want = 0;
  reference::chain_forward(first, host.data(), nullptr, &want, nullptr, nullptr);
  const double tolerance = p.dtype == DType::f32 ? 1e-5 : 1e-11;

  std::vector<ChainRow> rows;
  const std::vector<ChainSpec> specs = args.has("--sweep") ? sweep_specs(p, chosen) : std::vector<ChainSpec>{chosen};
  for (const ChainSpec& spec : specs) {
    try {
      check_chain_spec(spec, p);
    } catch (const std::invalid_argument&) {
      continue; // a sweep's variant this problem cannot use
    }
    const ChainPlan plan = chain_plan_for(p, spec);
    DeviceBuffer saved(plan.saved_bytes() + 1), workspace(plan.workspace_bytes(true) + 1);
    const Workspace ws{workspace.get(), plan.workspace_bytes(true)};
    ChainRow row{spec};
    row.forward_ms = time_launches([&](Stream st) { plan(pot.get(), nullptr, score.get(), nullptr, nullptr,
                                                         nullptr, st); }, 3, reps).median_ms;
    if (log) {
      row.saving_ms = time_launches([&](Stream st) { plan(pot.get(), nullptr, score.get(), saved.get(), nullptr,
                                                          nullptr, st); }, 3, reps).median_ms;
      row.backward_ms = time_launches([&](Stream st) { plan.backward(pot.get(), nullptr, saved.get(), nullptr,
                                                                     g.get(), grad.get(), st); }, 3, reps).median_ms;
    } else {
      auto* best = static_cast<int32_t*>(path.get());
      row.saving_ms = time_launches([&](Stream st) { plan(pot.get(), nullptr, score.get(), nullptr, nullptr, best,
                                                          st, ws); }, 3, reps).median_ms;
      row.backward_ms = time_launches([&](Stream st) { plan.backward(pot.get(), nullptr, nullptr, best, g.get(),
                                                                     grad.get(), st); }, 3, reps).median_ms;
    }
    std::vector<unsigned char> got(bytes);
    score.download(got.data(), got.size());
    row.checked = std::fabs(load_element(p.dtype, got.data(), 0) - want) <= tolerance * std::max(1.0, std::fabs(want));
    rows.push_back(row);
  }

  const double terms = double(n);
  std::printf("device: %s; chain %s %s B=%lld T=%lld C=%lld (terms/s: B*(T-1)*C^2 per second of the forward)\n",
              device->name.c_str(), semiring_info(p.semiring).name, dtype_info(p.dtype).name, (long long)B,
              (long long)T, (long long)p.C);
  // A loop as threads x lanes, and where its potentials wait: registers, a ring of N stages, or plain loads.
  auto loop = [](const ChainSpec& s, const ChainLoop& l) {
    return std::to_string(l.threads) + "x" + std::to_string(l.lanes) + ":" +
           (s.prefetch(l) ? std::string("regs") : s.stages(l) ? "ring" + std::to_string(s.stages(l)) : "loads");
  };
  std::printf("%-16s %-16s %-16s %10s %10s %12s %10s %10s %s\n", "forward", log ? "saving" : "", log ? "beta" : "",
              "fwd ms", "terms/s", log ? "fwd+saved" : "fwd+path", "backward", "fwd+bwd", "check");
  for (const ChainRow& r : rows)
    std::printf("%-16s %-16s %-16s %10.4f %10.3g %12.4f %10.4f %10.4f %s\n", loop(r.spec, r.spec.forward).c_str(),
                log ? loop(r.spec, r.spec.saving).c_str() : "", log ? loop(r.spec, r.spec.beta()).c_str() : "",
                r.forward_ms, terms / (r.forward_ms * 1e-3), r.saving_ms, r.backward_ms, r.saving_ms + r.backward_ms,
                r.checked ? "ok" : "WRONG");
  for (const ChainRow& r : rows)
    if (!r.checked) return 1;
  return 0;
}

} // namespace jitbmm::cli
