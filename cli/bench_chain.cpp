// jitbmm bench --chain C [--hmm]: the linear-chain kernels of one problem on this GPU (a benchmark, not a test). Per
// variant: the forward (score only), the forward that saves its messages for a backward, the backward, and for
// max_plus the forward with the best path; median device times of CUDA-event-timed runs after warm-up on standard
// normal potentials, terms/s (B·(T − 1)·C² per second), and the first sequence's score checked against the CPU
// reference so that no broken variant is timed silently. The default is the variant a plan takes (a stored decision's
// from jitbmm tune --chain, else the rule's). --sweep compares the default first, then the rule's blocks
// for every cluster size (sm_90 on), then the variants a block of 128 to 1024 threads with 1 to 32 lanes per state
// makes in the default's clusters (both forwards alike, the backward messages' lanes by their rule). --chunk L[,L...]
// adds the chunked strategy in chunks of each L steps (up to 1024 states; log's chain of chunks in the variant its
// own plan takes). Where the plan itself takes the chunked strategy, its row comes first, then the
// sequential kernels'.
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "cli/args.hpp"
#include "cli/chain_args.hpp"
#include "cli/commands.hpp"
#include "runtime/chain_candidate.hpp"
#include "runtime/chain_chunked.hpp"
#include "runtime/chain_plan.hpp"
#include "runtime/device.hpp"
#include "runtime/device_memory.hpp"
#include "runtime/timing.hpp"
#include "runtime/tuner/chain_trials.hpp"
#include "support/layout.hpp"

namespace jitbmm::cli {

namespace {

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

// Whether flags name a variant of the module (then the plan's own strategy is not the default row).
bool has_variant_flags(const Args& args) {
  for (const char* flag : {"--cluster", "--threads", "--lanes", "--beta-lanes", "--saving-blocks"})
    if (args.has(flag)) return true;
  return false;
}

// --chunk's comma-separated steps per chunk, each a power of two the problem can be computed in.
std::vector<int64_t> chunks_from(const Args& args, const ChainProblem& problem) {
  std::vector<int64_t> chunks;
  std::stringstream list(args.get("--chunk", ""));
  const std::string text = args.get("--chunk", "");
  if (!text.empty() && text.back() == ',') throw std::invalid_argument("--chunk: '" + text + "' ends in a comma");
  for (std::string item; std::getline(list, item, ',');) {
    const int64_t chunk = parse_int(item, "--chunk", 2, int(kMaxChainChunk));
    if (const std::string why = chunk_unfit(problem, chunk); !why.empty())
      throw std::invalid_argument("--chunk" + why.substr(std::string("chunk").size()));
    chunks.push_back(chunk);
  }
  return chunks;
}

} // namespace

int run_chain_bench(const Args& args) {
  const ChainProblem p = sized_chain_problem_from(args);
  const int64_t B = p.B, T = p.T;
  const int reps = reps_from(args);
  const bool log = p.semiring == Semiring::log;
  if (p.C <= kMaxSequentialChainStates)
    chain_spec_from(args, p, default_chain_spec(p)); // a bad flag's error before the device's
  else // the sequential kernels' variants, and their sweep; only the stepped strategy takes this many
    for (const char* flag : {"--cluster", "--threads", "--lanes", "--beta-lanes", "--saving-blocks", "--sweep"})
      if (args.has(flag))
        throw std::invalid_argument(
            std::string(flag) + (std::string(flag) == "--sweep" ? ": sweeps the variants" : ": a variant") +
            " of the sequential kernels, which take at most " + std::to_string(kMaxSequentialChainStates) +
            " states (--chain " + std::to_string(p.C) + " runs the stepped strategy)");
  const std::vector<int64_t> chunks = chunks_from(args, p);
  const auto device = current_device();
  // Without flags, the variant ChainPlan::get takes: a stored decision's (jitbmm tune --chain) or the rule's.
  const ChainChoice choice = choose_chain_spec(p, *device);
  const ChainSpec chosen = p.C <= kMaxSequentialChainStates ? chain_spec_from(args, p, choice.spec) : choice.spec;
  ScopedContext scope(device->context);
  ChainTrial trial(p);
  const double terms = double(B * (T - 1) * p.C * p.C);
  std::printf("device: %s; chain%s %s %s B=%lld T=%lld C=%lld (terms/s: B*(T-1)*C^2 per second of the forward)\n",
              device->name.c_str(), p.form == ChainForm::hmm ? " (hmm form)" : "", semiring_info(p.semiring).name,
              dtype_info(p.dtype).name, (long long)B, (long long)T, (long long)p.C);
  // A loop as threads x lanes (x cluster blocks), and where its potentials wait: registers, a ring of N stages, a
  // slab the block stages (the saving forward's backward messages), or plain loads.
  auto loop = [](const ChainSpec& s, const ChainLoop& l, bool staged = false) {
    return std::to_string(l.threads) + "x" + std::to_string(l.lanes) +
           (l.cluster > 1 ? "x" + std::to_string(l.cluster) : std::string()) + ":" +
           (staged          ? std::string("slab")
            : s.prefetch(l) ? std::string("regs")
            : s.stages(l)   ? "ring" + std::to_string(s.stages(l))
                            : "loads");
  };
  std::printf("%-16s %-16s %-16s %6s %10s %10s %12s %10s %10s %s\n", "forward", log ? "saving" : "",
              log ? "beta" : "", "chunk", "fwd ms", "terms/s", log ? "fwd+saved" : "fwd+path", "backward", "fwd+bwd",
              "check");
  // Each row as soon as it is measured: a sweep compiles a module a variant, and a cut-short run keeps its rows.
  bool all_checked = true;
  const std::vector<ChainSpec> specs =
      args.has("--sweep") ? sweep_specs(p, chosen, cluster_sms(*device) > 0) : std::vector<ChainSpec>{chosen};
  // A variant's row, measured on a plan of its own (`chunk`, `stepped` and `steps` as chain_plan_for takes them; the
  // stepped strategy's rows have no loops: "steps" by its products, "fused" in one launch a pass, "streamed" the
  // fused form staging both sides of each chunk in turn).
  auto row = [&](const ChainSpec& spec, int64_t chunk = 0, bool stepped = false,
                 StepKernel steps = StepKernel::products) {
    const ChainMeasure m =
        trial.measure(chain_candidate(chain_plan_for(p, spec, chunk, false, stepped, stepped ? steps : StepKernel::rule)),
                      reps);
    all_checked = all_checked && m.checked;
    const std::string forward = stepped ? "" : loop(spec, spec.forward),
                      saving = log && !stepped ? loop(spec, spec.saving) : "",
                      beta = log && !stepped ? loop(spec, spec.beta(), spec.beta_staged()) : "",
                      strategy = !stepped                              ? (chunk ? std::to_string(chunk) : "-")
                                 : steps == StepKernel::fused          ? "fused"
                                 : steps == StepKernel::fused_streamed ? "streamed"
                                                                       : "steps";
    std::printf("%-16s %-16s %-16s %6s %10.4f %10.3g %12.4f %10.4f %10.4f %s\n", forward.c_str(), saving.c_str(),
                beta.c_str(), strategy.c_str(), m.forward_ms, terms / (m.forward_ms * 1e-3), m.saving_ms,
                m.backward_ms, m.saving_ms + m.backward_ms, m.checked ? "ok" : "WRONG");
    std::fflush(stdout);
  };
  // The plan's own choice first: in chunks or steps where it takes them (then the sequential kernels beside it);
  // --stepped adds the stepped strategy where the plan does not take it.
  const int64_t planned = has_variant_flags(args) ? 0 : choice.chunk;
  if (args.has("--stepped") || (!has_variant_flags(args) && choice.stepped)) {
    if (fused_steps_apply(p)) {
      row(chosen, 0, true, StepKernel::fused);
      row(chosen, 0, true, StepKernel::fused_streamed);
    }
    row(chosen, 0, true, StepKernel::products);
  }
  if (planned > 0) row(chosen, planned);
  for (const ChainSpec& spec : specs) {
    try {
      check_chain_spec(spec, p);
    } catch (const std::invalid_argument&) {
      continue; // a sweep's variant this problem cannot use
    }
    row(spec);
  }
  for (const int64_t chunk : chunks)
    if (chunk != planned) row(chosen, chunk);

  return all_checked ? 0 : 1;
}

} // namespace jitbmm::cli
