// jitbmm tune --chain C: time a chain problem's cluster sizes on this GPU (the rule's blocks for one block per
// sequence and clusters of 2, 4 and 8 where their registers fit), each checked against the CPU reference, and store
// the sizes choose_chain_clusters picks as the decision every ChainPlan::get of the problem's bucket takes
// (runtime/tuner/chain_decisions.hpp).
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "cache/disk_cache.hpp"
#include "cli/args.hpp"
#include "cli/chain_args.hpp"
#include "cli/chain_trial.hpp"
#include "cli/commands.hpp"
#include "cli/spec_args.hpp"
#include "runtime/chain_plan.hpp"
#include "runtime/device.hpp"
#include "runtime/tuner/chain_decisions.hpp"

namespace jitbmm::cli {

int run_chain_tune(const Args& args) {
  const ChainProblem p = sized_chain_problem_from(args);
  const int reps = reps_from(args);
  const auto device = current_device();
  if (cluster_sms(*device) == 0)
    throw std::invalid_argument("tune --chain: a chain's only choice is its cluster size, and clusters of blocks "
                                "need sm_90 or later (this device is " +
                                device->arch() + ")");
  ScopedContext scope(device->context);
  const auto start = std::chrono::steady_clock::now();
  ChainTrial trial(p);
  std::printf("device: %s; chain %s\n", device->name.c_str(), chain_bucket_text(p).c_str());
  std::printf("%8s %10s %12s %10s %10s %s\n", "cluster", "fwd ms", "fwd+kept ms", "backward", "kept+bwd", "check");
  std::vector<ChainTiming> timed;
  for (int k = 1; k <= kMaxChainCluster; k *= 2) {
    const ChainSpec spec = clustered_chain_spec(p, k);
    if (!spec.clusters_fit()) {
      std::printf("%8d  [skipped: its registers do not fit]\n", k);
      continue;
    }
    const ChainRow row = trial.measure(spec, reps);
    std::printf("%8d %10.4f %12.4f %10.4f %10.4f %s\n", k, row.forward_ms, row.saving_ms, row.backward_ms,
                row.saving_ms + row.backward_ms, row.checked ? "ok" : "WRONG (not a candidate)");
    std::fflush(stdout);
    if (row.checked) timed.push_back({k, row.forward_ms, row.saving_ms, row.backward_ms});
  }
  if (timed.empty()) {
    std::fprintf(stderr, "jitbmm: tune --chain: no cluster size computed the reference's score; nothing stored\n");
    return 1;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const ChainDecision d = choose_chain_clusters(p, timed, seconds);
  std::printf("best: cluster %d for the forward, %d for the saving forward\n", d.forward_cluster, d.saving_cluster);
  DiskCache* disk = DiskCache::process_cache();
  if (!disk) {
    std::printf("no disk cache (JITBMM_CACHE=off or no usable directory): nothing stored\n");
    return 0;
  }
  put_chain_decision(*disk, chain_tuning_key(p, tuning_device(*device)), d);
  std::printf("decision stored in %s for its bucket (chain %s)\n", disk->dir().c_str(), chain_bucket_text(p).c_str());
  return 0;
}

} // namespace jitbmm::cli
