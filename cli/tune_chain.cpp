// jitbmm tune --chain C: time a chain problem's strategies on this GPU: the sequential kernels' cluster sizes (the
// rule's blocks for one block per sequence and clusters of 2, 4 and 8 where their registers fit) and, in the
// forward's best cluster, its other lanes (1 to 32, the rule's threads for each); up to 1024 states the chunked
// strategy in chunks of 32 to 256 steps and of the whole chain (for log, where their products fit in saved), and the
// stepped strategy (beyond kMaxSequentialChainStates states the only one: no cluster is timed there) in its products
// and, where it computes the problem, its fused form; the chunked and
// the stepped strategies' products tune as the policy allows (the only chains whose products do). Each is checked
// against the CPU reference, and what choose_chain_clusters picks is stored as the decision every ChainPlan::get of
// the problem's bucket takes (runtime/tuner/chain_decisions.hpp).
#include <chrono>
#include <cstdio>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "cache/disk_cache.hpp"
#include "cli/args.hpp"
#include "cli/chain_args.hpp"
#include "cli/commands.hpp"
#include "cli/spec_args.hpp"
#include "runtime/chain_candidate.hpp"
#include "runtime/chain_chunked.hpp"
#include "runtime/chain_fused_steps.hpp"
#include "runtime/chain_plan.hpp"
#include "runtime/device.hpp"
#include "runtime/tuner/chain_decisions.hpp"
#include "runtime/tuner/chain_trials.hpp"

namespace jitbmm::cli {

namespace {

// The chunk lengths tune --chain times: 32 to 256 steps and one chunk of the whole chain, where their products fit
// in saved; none where the problem is not one the chunked strategy computes.
std::vector<int64_t> chunk_candidates(const ChainProblem& p) {
  std::vector<int64_t> chunks;
  int64_t whole = 2;
  while (whole < p.T - 1 && whole < kMaxChainChunk) whole *= 2;
  for (int64_t chunk = 32; chunk <= 256; chunk *= 2)
    if (chunk < whole && chunk_unfit(p, chunk).empty()) chunks.push_back(chunk);
  if (chunk_unfit(p, whole).empty()) chunks.push_back(whole);
  return chunks;
}

} // namespace

int run_chain_tune(const Args& args) {
  const ChainProblem p = sized_chain_problem_from(args);
  const int reps = reps_from(args);
  const auto device = current_device();
  if (cluster_sms(*device) == 0)
    throw std::runtime_error("tune --chain: its decisions are read from sm_90 on, where a chain's sequences "
                             "split over clusters of blocks (this device is " +
                             device->arch() + ")");
  ScopedContext scope(device->context);
  const auto start = std::chrono::steady_clock::now();
  ChainTrial trial(p);
  // A variant measured on a plan of its own; a chunked or stepped one's products tune on their first call, within the
  // warm-up, and store what they find for the plans that then take them. One that fails to build or run (a loop this
  // problem cannot take, a compile error) is no candidate: said, and the others are measured.
  auto measure = [&](const std::string& variant, const ChainSpec& spec, int64_t chunk, bool stepped = false,
                     StepKernel steps = StepKernel::rule) -> std::optional<ChainMeasure> {
    try {
      return trial.measure(chain_candidate(chain_plan_for(p, spec, chunk, true, stepped, steps)), reps);
    } catch (const std::exception& e) {
      std::printf("%8s  [skipped: %s]\n", variant.c_str(), e.what());
      std::fflush(stdout);
      return std::nullopt;
    }
  };
  // A row as soon as it is measured (each compiles a module): the strategy and its times; true where it checked.
  auto print_row = [](const std::string& variant, const ChainMeasure& row) {
    std::printf("%8s %10.4f %12.4f %10.4f %10.4f %s\n", variant.c_str(), row.forward_ms, row.saving_ms, row.backward_ms,
                row.saving_ms + row.backward_ms, row.checked ? "ok" : "WRONG (not a candidate)");
    std::fflush(stdout);
    return row.checked;
  };
  std::printf("device: %s; chain %s\n", device->name.c_str(), chain_bucket_text(p).c_str());
  // Each candidate as a plan would run it: with the saving forward's blocks an SM the rule gives this device.
  auto ruled = [&](const ChainSpec& s) { return with_rule_saving_blocks(s, p.B, cluster_sms(*device)); };
  std::printf("%8s %10s %12s %10s %10s %s\n", "variant", "fwd ms", "fwd+kept ms", "backward", "kept+bwd", "check");
  std::vector<ChainTiming> timed;
  std::vector<ChunkTiming> chunked;
  std::vector<LanesTiming> lanes_timed;
  if (p.C > kMaxSequentialChainStates) {
    std::printf("%8s  [skipped: the sequential kernels compute at most %lld states]\n", "clusters",
                (long long)kMaxSequentialChainStates);
  } else {
    for (int k = 1; k <= kMaxChainCluster; k *= 2) {
      const ChainSpec spec = ruled(clustered_chain_spec(p, k));
      if (!spec.clusters_fit()) {
        std::printf("%8d  [skipped: its registers do not fit]\n", k);
        continue;
      }
      const std::optional<ChainMeasure> row = measure(std::to_string(k), spec, 0);
      if (row && print_row(std::to_string(k), *row))
        timed.push_back({k, row->forward_ms, row->saving_ms, row->backward_ms});
    }
    if (timed.empty()) {
      std::fprintf(stderr, "jitbmm: tune --chain: no cluster size computed the reference's score; nothing stored\n");
      return 1;
    }
    // The chunked strategy, its chain of chunks in its own plan's variant, beside the clusters' best saving forward.
    const ChainDecision clusters = choose_chain_clusters(p, timed, 0);
    const ChainSpec best = ruled(clustered_chain_spec(p, clusters.forward_cluster, clusters.saving_cluster));
    for (const int64_t chunk : chunk_candidates(p)) {
      const std::string variant = "chunk " + std::to_string(chunk);
      const std::optional<ChainMeasure> row = measure(variant, best, chunk);
      if (row && print_row(variant, *row))
        chunked.push_back({chunk, row->forward_ms, row->saving_ms, row->backward_ms});
    }
    // The forward's other lanes in its cluster, each with the rule's threads for them (more terms a lane, fewer
    // shuffles of a reduction; fewer, more parallel terms): a group of lanes takes at most twice the states.
    for (int lanes = 1; lanes <= 32 && lanes <= 2 * p.C; lanes *= 2) {
      if (lanes == best.forward.lanes) continue;
      const ChainSpec spec =
          ruled(chain_spec_with_forward_lanes(p, clusters.forward_cluster, clusters.saving_cluster, lanes));
      if (!spec.registers_fit()) {
        std::printf("%8s  [skipped: its registers do not fit]\n", ("lanes " + std::to_string(lanes)).c_str());
        continue;
      }
      const std::string variant = "lanes " + std::to_string(lanes);
      const std::optional<ChainMeasure> row = measure(variant, spec, 0);
      if (row && print_row(variant, *row))
        lanes_timed.push_back({lanes, row->forward_ms, row->saving_ms, row->backward_ms});
    }
  }
  std::optional<SteppedTiming> stepped, fused;
  if (const auto row = measure("steps", ChainSpec{}, 0, true, StepKernel::products); row && print_row("steps", *row))
    stepped = SteppedTiming{row->forward_ms, row->saving_ms, row->backward_ms};
  const bool fused_tried = fused_steps_apply(p);
  if (fused_tried)
    if (const auto row = measure("fused", ChainSpec{}, 0, true, StepKernel::fused); row && print_row("fused", *row))
      fused = SteppedTiming{row->forward_ms, row->saving_ms, row->backward_ms};
  if (timed.empty() && !stepped && !fused) {
    std::fprintf(stderr, "jitbmm: tune --chain: the stepped strategy did not compute the reference's score; nothing "
                         "stored\n");
    return 1;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ChainDecision d = choose_chain_clusters(p, timed, seconds, chunked, stepped, lanes_timed, fused);
  // A fused form that computed a wrong score is no candidate, and the rule, which may take it, must not either: the
  // products are named.
  if (fused_tried && !fused && stepped) d.stepped_fused = false;
  const std::string strategy = *d.stepped ? std::string("the stepped strategy") +
                                                (d.stepped_fused.value_or(false) ? ", fused" : ", its products")
                               : *d.chunk ? "chunks of " + std::to_string(*d.chunk) + " steps"
                                          : "the sequential kernels";
  if (timed.empty())
    std::printf("best: %s (the only one beyond %lld states)\n", strategy.c_str(), (long long)kMaxSequentialChainStates);
  else
    std::printf("best: cluster %d for the forward%s, %d for the saving forward; %s\n", d.forward_cluster,
                d.forward_lanes ? (" in groups of " + std::to_string(*d.forward_lanes) + " lanes").c_str() : "",
                d.saving_cluster, strategy.c_str());
  DiskCache* disk = DiskCache::process_cache();
  if (!disk) {
    std::printf("no disk cache (JITBMM_CACHE=off or no usable directory): nothing stored\n");
    return 0;
  }
  if (!put_chain_decision(*disk, chain_tuning_key(p, tuning_device(*device)), d)) {
    std::fprintf(stderr, "jitbmm: the cache directory %s could not keep the decision: nothing stored\n",
                 disk->dir().c_str());
    return 1;
  }
  std::printf("decision stored in %s for its bucket (chain %s)\n", disk->dir().c_str(), chain_bucket_text(p).c_str());
  return 0;
}

} // namespace jitbmm::cli
