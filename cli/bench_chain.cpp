// jitbmm bench --chain C [--hmm]: the linear-chain kernels of one problem on this GPU (a benchmark, not a test). Per
// variant: the forward (score only), the forward that saves its messages for a backward, the backward, and for
// max_plus the forward with the best path; median device times of CUDA-event-timed runs after warm-up on standard
// normal potentials, terms/s (B·(T − 1)·C² per second), and the first sequence's score checked against the CPU
// reference so that no broken variant is timed silently. --sweep compares the default first, then the rule's blocks
// for every cluster size (sm_90 on), then the variants a block of 128 to 1024 threads with 1 to 32 lanes per state
// makes in the default's clusters (both forwards alike, the backward messages' lanes by their rule).
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

// The variants --sweep compares: the default, the rule's blocks for each cluster size the device runs, then every
// block of 128 to 1024 threads with a power-of-two number of lanes per state (1 to 32) that the spec check accepts.
std::vector<ChainSpec> sweep_specs(const ChainProblem& problem, const ChainSpec& first, bool clusters) {
  std::vector<ChainSpec> specs = {first};
  for (int k = 1; k <= (clusters ? kMaxChainCluster : 1); k *= 2) {
    const ChainSpec s = clustered_chain_spec(problem, k);
    if (!(s == first)) specs.push_back(s);
  }
  for (int threads = 128; threads <= 1024; threads *= 2)
    for (int lanes = 1; lanes <= 32; lanes *= 2) {
      ChainSpec s = first;
      s.forward = {threads, lanes, first.forward.cluster};
      s.saving = {threads, lanes, first.saving.cluster};
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
  const int reps = reps_from(args);
  const bool log = p.semiring == Semiring::log;
  chain_spec_from(args, p, 0); // a bad flag's error before the device's
  const auto device = current_device();
  const ChainSpec chosen = chain_spec_from(args, p, cluster_sms(*device));
  ScopedContext scope(device->context);

  // The inputs and their gradients in the problem's dtype; score and grad_score in the output dtype.
  const DType out = chain_output_dtype(p);
  const int bytes = dtype_info(p.dtype).size_bytes, out_bytes = dtype_info(out).size_bytes;
  const bool hmm = p.form == ChainForm::hmm;
  const int64_t n = B * (T - 1) * p.C * p.C;
  // The inputs, standard normal: the potentials [B][T − 1][C][C], or the HMM form's emissions [B][T][C],
  // transitions [C][C] and initial [C] one after the other.
  const int64_t n_input = hmm ? B * T * p.C + p.C * p.C + p.C : n;
  std::vector<unsigned char> host(std::size_t(n_input) * bytes);
  std::mt19937_64 rng(2024);
  std::normal_distribution<double> normal(0.0, 1.0);
  for (int64_t i = 0; i < n_input; ++i) store_element(p.dtype, host.data(), i, normal(rng));
  DeviceBuffer pot(host.size() + 1), score(B * out_bytes), grad(host.size() + 1), g(B * out_bytes),
      path(log ? 0 : B * T * 4);
  pot.upload(host.data(), host.size());
  std::vector<unsigned char> ones(B * out_bytes);
  for (int64_t b = 0; b < B; ++b) store_element(out, ones.data(), b, 1.0);
  g.upload(ones.data(), ones.size());
  auto tables = [&](const DeviceBuffer& d) {
    char* base = static_cast<char*>(d.get());
    return std::pair{HmmInputs{base, base + B * T * p.C * bytes, base + (B * T * p.C + p.C * p.C) * bytes},
                     HmmGradients{base, base + B * T * p.C * bytes, base + (B * T * p.C + p.C * p.C) * bytes}};
  };
  const HmmInputs inputs = tables(pot).first;
  const HmmGradients grads = tables(grad).second;

  // The first sequence's score on the CPU: every variant must agree with it.
  ChainProblem first = p;
  first.B = 1;
  double want = 0;
  if (hmm) {
    const HmmInputs on_host{host.data(), host.data() + B * T * p.C * bytes,
                            host.data() + (B * T * p.C + p.C * p.C) * bytes};
    reference::chain_forward(first, on_host, nullptr, &want, nullptr, nullptr);
  } else {
    reference::chain_forward(first, host.data(), nullptr, &want, nullptr, nullptr);
  }
  const double tolerance = out == DType::f32 ? 1e-5 : 1e-11;

  const double terms = double(n);
  std::printf("device: %s; chain%s %s %s B=%lld T=%lld C=%lld (terms/s: B*(T-1)*C^2 per second of the forward)\n",
              device->name.c_str(), hmm ? " (hmm form)" : "", semiring_info(p.semiring).name, dtype_info(p.dtype).name, (long long)B,
              (long long)T, (long long)p.C);
  // A loop as threads x lanes (x cluster blocks), and where its potentials wait: registers, a ring of N stages, or
  // plain loads.
  auto loop = [](const ChainSpec& s, const ChainLoop& l) {
    return std::to_string(l.threads) + "x" + std::to_string(l.lanes) +
           (l.cluster > 1 ? "x" + std::to_string(l.cluster) : std::string()) + ":" +
           (s.prefetch(l) ? std::string("regs") : s.stages(l) ? "ring" + std::to_string(s.stages(l)) : "loads");
  };
  std::printf("%-16s %-16s %-16s %10s %10s %12s %10s %10s %s\n", "forward", log ? "saving" : "", log ? "beta" : "",
              "fwd ms", "terms/s", log ? "fwd+saved" : "fwd+path", "backward", "fwd+bwd", "check");
  // Each row as soon as it is measured: a sweep compiles a module a variant, and a cut-short run keeps its rows.
  bool all_checked = true;
  const std::vector<ChainSpec> specs =
      args.has("--sweep") ? sweep_specs(p, chosen, cluster_sms(*device) > 0) : std::vector<ChainSpec>{chosen};
  for (const ChainSpec& spec : specs) {
    try {
      check_chain_spec(spec, p);
    } catch (const std::invalid_argument&) {
      continue; // a sweep's variant this problem cannot use
    }
    const ChainPlan plan = chain_plan_for(p, spec);
    DeviceBuffer saved(plan.saved_bytes() + 1), workspace(plan.workspace_bytes(true) + 1),
        backward_workspace(plan.backward_workspace_bytes() + 1);
    const Workspace ws{workspace.get(), plan.workspace_bytes(true)};
    const Workspace bws{backward_workspace.get(), plan.backward_workspace_bytes()};
    // The forward with `saved` or the best path as asked, and the backward from them, in either form.
    auto forward = [&](Stream st, void* keep, int32_t* best) {
      if (hmm)
        plan(inputs, nullptr, score.get(), keep, nullptr, best, st, ws);
      else
        plan(pot.get(), nullptr, score.get(), keep, nullptr, best, st, ws);
    };
    auto backward = [&](Stream st, const void* keep, const int32_t* best) {
      if (hmm)
        plan.backward(inputs, nullptr, keep, best, g.get(), grads, st, bws);
      else
        plan.backward(pot.get(), nullptr, keep, best, g.get(), grad.get(), st);
    };
    ChainRow row{spec};
    row.forward_ms = time_launches([&](Stream st) { forward(st, nullptr, nullptr); }, 3, reps).median_ms;
    void* keep = log ? saved.get() : nullptr;
    auto* best = log ? nullptr : static_cast<int32_t*>(path.get());
    row.saving_ms = time_launches([&](Stream st) { forward(st, keep, best); }, 3, reps).median_ms;
    row.backward_ms = time_launches([&](Stream st) { backward(st, keep, best); }, 3, reps).median_ms;
    std::vector<unsigned char> got(out_bytes);
    score.download(got.data(), got.size());
    row.checked = std::fabs(load_element(out, got.data(), 0) - want) <= tolerance * std::max(1.0, std::fabs(want));
    all_checked = all_checked && row.checked;
    std::printf("%-16s %-16s %-16s %10.4f %10.3g %12.4f %10.4f %10.4f %s\n", loop(spec, spec.forward).c_str(),
                log ? loop(spec, spec.saving).c_str() : "", log ? loop(spec, spec.beta()).c_str() : "",
                row.forward_ms, terms / (row.forward_ms * 1e-3), row.saving_ms, row.backward_ms,
                row.saving_ms + row.backward_ms, row.checked ? "ok" : "WRONG");
    std::fflush(stdout);
  }

  return all_checked ? 0 : 1;
}

} // namespace jitbmm::cli
