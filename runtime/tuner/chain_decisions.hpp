// Chain decisions: the cluster sizes, the forward's lanes and the strategy (sequential, chunked or stepped) `jitbmm
// tune --chain` measured fastest for a chain problem's bucket on one device, stored in the disk cache (kind
// "chaintune") and read by every ChainPlan::get of that bucket.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "jitbmm/chain_problem.hpp"
#include "runtime/tuner/tuning_db.hpp"

namespace jitbmm {

class DiskCache;

constexpr const char* kChainDecisionKind = "chaintune"; // the disk cache's kind for a chain's decision

// One cluster size as timed: the forward alone, the forward that keeps what the backward reads (log: saved;
// max_plus: the best path), and that backward, in ms.
struct ChainTiming {
  int cluster = 1;
  double forward_ms = 0, saving_ms = 0, backward_ms = 0;
};

// The chunked strategy as timed in chunks of `chunk` steps (the same three launches: the forward alone, the forward
// that keeps what the backward reads, and that backward).
struct ChunkTiming {
  int64_t chunk = 0;
  double forward_ms = 0, saving_ms = 0, backward_ms = 0;
};

// The forward in groups of `lanes` lanes (chain_spec_with_forward_lanes) in the forward's cluster, as timed (the same
// three launches).
struct LanesTiming {
  int lanes = 0;
  double forward_ms = 0, saving_ms = 0, backward_ms = 0;
};

// One form of the stepped strategy as timed (the same three launches; its products tuned as they were timed): its
// products, or its fused form.
struct SteppedTiming {
  double forward_ms = 0, saving_ms = 0, backward_ms = 0;
};

// The clusters of the fastest forward and of the fastest saving forward + backward, the strategy of the fastest
// saving forward + backward, what they were tuned for, and every variant timed.
struct ChainDecision {
  int forward_cluster = 1, saving_cluster = 1; // both 1 where no cluster was timed (beyond the sequential kernels)
  // The steps per chunk of the chunked strategy, 0 for the sequential kernels (and for the stepped strategy); none in
  // a decision stored before strategies were tuned (the plan then takes the rule's).
  std::optional<int64_t> chunk;
  // Whether the stepped strategy won; none in a decision stored before it was tuned (the plan then takes the rule's).
  std::optional<bool> stepped;
  // The stepped strategy's form that won, fused (true) or its products: where the fused form was tried (none: the
  // rule's form). A fused form that computed a wrong score leaves its products named, with no fused timing.
  std::optional<bool> stepped_fused;
  // The forward's lanes where other lanes than the rule's were timed faster in its cluster; none: the rule's.
  std::optional<int> forward_lanes;
  std::string problem; // chain_bucket_text() of the problem tuned
  double seconds = 0;  // how long tuning took
  std::vector<ChainTiming> timed;
  std::vector<ChunkTiming> chunked;
  std::vector<LanesTiming> lanes;
  std::optional<SteppedTiming> stepped_timing; // its products; none where not a candidate (a wrong score)
  std::optional<SteppedTiming> fused_timing;   // its fused form; none where not timed or not a candidate
};

// A problem's bucket: B and T each rounded up to a power of two; the semiring, dtype, form, C, lengths, the tables'
// batching and whether the inputs are contiguous as they are. One line.
std::string chain_bucket_text(const ChainProblem& problem);
// The key: the device and versions (tuning_device_text) and the bucket.
std::string chain_tuning_key(const ChainProblem& problem, const TuningDevice& device);
// The decision from the timings: each cluster the fastest of its part (ties: the smaller cluster), and the strategy
// whose saving forward + backward is the fastest: the sequential kernels' in the saving cluster, the chunked
// strategy's in each of `chunked`, the stepped strategy's in the faster of its forms, `stepped` (its products) and
// `fused` (ties: sequential, then the shorter chunk, then stepped; its products, then fused). Where `timed` is empty
// (a problem beyond kMaxSequentialChainStates, which only the stepped strategy computes), the stepped strategy in
// clusters of 1; std::invalid_argument where neither `timed` nor a form of the stepped strategy holds anything. The
// forward's lanes: those of `lanes` (timed in the chosen forward cluster) faster than the rule's there, by the
// forward's cost the cluster was chosen by (ties: the rule's, then fewer lanes); max_plus's sequential strategy is
// then rated with them.
ChainDecision choose_chain_clusters(const ChainProblem& problem, std::vector<ChainTiming> timed, double seconds,
                                    std::vector<ChunkTiming> chunked = {},
                                    std::optional<SteppedTiming> stepped = std::nullopt,
                                    std::vector<LanesTiming> lanes = {},
                                    std::optional<SteppedTiming> fused = std::nullopt);

// A line-based text; decode is strict (every line, clusters powers of two at most kMaxChainCluster and each timed
// once, chunks powers of two in [2, kMaxChainChunk] and each timed once, the chunk chosen 0 or one timed, lanes
// powers of two at most 32 each timed once after the clusters, the lanes chosen among them, the stepped
// strategy chosen only where a form of it was timed and then with chunk 0, its form named wherever the fused form
// was timed and the form named timed, nothing timed but the stepped strategy only where it was chosen in clusters
// of 1, durations as tuning_db writes them) and returns nothing on any defect.
std::string encode_chain_decision(const ChainDecision& d);
std::optional<ChainDecision> decode_chain_decision(const std::string& text);

// The decision stored under `key`, if any (none without a disk cache). One that does not decode is moved aside
// (DiskCache::discard), so no later process reads it, and is nothing.
std::optional<ChainDecision> load_chain_decision(DiskCache* disk, const std::string& key);
// The same, read once per process, directory and key (a plan made every step reads no file); put_chain_decision
// updates what is remembered (and says whether the disk kept it), forget_chain_decisions forgets it all.
std::optional<ChainDecision> remembered_chain_decision(DiskCache* disk, const std::string& key);
bool put_chain_decision(DiskCache& disk, const std::string& key, const ChainDecision& decision);
void forget_chain_decisions();

} // namespace jitbmm
