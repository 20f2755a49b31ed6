// Which variant ChainPlan::get takes: a stored decision of `jitbmm tune --chain` for the problem's bucket where it
// fits (its clusters, the forward's lanes where it names them, its strategy and the stepped strategy's form), else
// the rules (default_chain_spec for the clusters and lanes, default_chain_chunk and default_chain_stepped for the
// strategy, default_fused_steps for the form).
#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>

#include "cache/disk_cache.hpp"
#include "runtime/chain_chunked.hpp"
#include "runtime/chain_fused_steps.hpp"
#include "runtime/chain_plan.hpp"
#include "runtime/device.hpp"
#include "support/log.hpp"

namespace jitbmm {

int64_t default_chain_chunk(const ChainProblem& p) {
  // The chunked strategy does C times the sequential kernels' work, in T / L dependent steps instead of T − 1: it
  // pays where a few sequences of a long chain leave the GPU idle and a product of C³ terms is still cheap. f64, whose
  // products have no tensor-core form, was not measured: it stays sequential. A tuned decision (jitbmm tune --chain)
  // replaces this rule for its bucket.
  const bool f32_tree = chain_output_dtype(p) == DType::f32;
  if (!f32_tree || p.C < 32 || p.B < 1) return 0;
  if (p.semiring == Semiring::max_plus) {
    // The best path: the chain of chunks (T / L steps), then every chunk's L steps again at once, so chunks of about
    // √T steps. Measured on an H200 (jitbmm bench --chain C --semiring max_plus --chunk 64,128,256, both forms), its
    // forward with the path took 1.8 ms against 16 at one sequence of 16384 positions and 64 states (128-step chunks;
    // 64 and 256 within 15%), 0.8 against 11 at 32 states, 7.3 against 41 at 128, 5.4 against 16 at four sequences of
    // 64 states, 0.65 against 4.0 at one of 4096 positions (64-step chunks), and lost at 16 sequences of 1024
    // positions (1.5 against 1.0).
    if (p.C > 128 || p.B * p.C > 256 || p.T < 4096) return 0;
    int64_t chunk = 64;
    while (chunk < 256 && chunk * chunk * 2 < p.T) chunk *= 2;
    return chunk;
  }
  if (p.C > 64 || p.C * p.B > 128) return 0;
  // Log, measured on an H200 (bench/RESULTS.md, "Few sequences of long chains"): its forward + backward won at one
  // to four sequences of 32 states and one or two of 64, lost from four sequences of 64 on and at 128 states (where
  // the tree's backward alone takes about as long as the whole sequential pair); chunks of 32 to 128 steps were the
  // fastest, one chunk of the whole chain (the log-depth scan) slower. The HMM form, whose sequential kernels keep
  // their table in registers and are faster, won by less (forward + backward 2.6 ms against 3.6 at one sequence of
  // 4096 positions and 64 states, 10.2 against 13.8 at 16384, 2.3 against 2.6 at four of 4096 and 32 states; the
  // forward alone about 3.6 times faster) and lost at 128 states: from 4096 positions, where it was measured.
  if (p.T < (p.form == ChainForm::hmm ? 4096 : 1024)) return 0;
  for (int64_t chunk = 64; chunk <= kMaxChainChunk; chunk *= 2)
    if (chunk_unfit(p, chunk).empty()) return chunk;
  return 0;
}

bool default_chain_stepped(const ChainProblem& p, int sm_count) {
  if (p.C > kMaxSequentialChainStates) return true;
  // Many sequences sharing a table: each step one product [B × C] · [C × C] wide enough to fill the GPU, against one
  // block (or cluster) per sequence reading the table through one SM. Measured on an H200 (jitbmm bench --chain C
  // --hmm --stepped, T = 32): log took 1.44 ms against 6.14 at B = 512, C = 512 (forward + backward 4.4 against
  // 42), 0.91 against 0.81 at B = C = 256 (but 2.2 against 4.0 with the backward), and lost at B = 64, C = 256 (0.87
  // against 0.15) and at B = 512, C = 128 (0.75 against 0.20); at C = 1024 it won from B = 16 (T = 256: 10.0 against
  // 22.5, with the backward 15.0 against 84); Viterbi took 1.13 ms against 8.5 at B = 512, C = 512
  // and 21 against 93 at B = 16, C = 1024, and lost at B = 64, C = 128. Per-sequence tables (the CRF form, batched
  // transitions) make each step B products of one row, which read every table as the sequential kernels do: those
  // stay sequential up to their limit.
  if (p.form != ChainForm::hmm || p.batched_transitions || p.T > kMaxSteppedChainLength) return false;
  if (p.semiring == Semiring::max_plus) return p.C >= 512 && p.B * p.C >= 16384;
  // Log, where the rule takes the fused form: from 2^23 terms a step its forward is at least as fast as the
  // sequential kernels', which form each term's exponential on CUDA cores, and its backward several times faster
  // (the sequential kernels sum the transitions' gradient over B · (T − 1) steps on CUDA cores too). At 2^22 terms a
  // step the sequential forward is the faster and forward + backward even. Fitted on jitbmm bench --chain C --hmm
  // --stepped on an H200, T = 32, from 64 to 4096 sequences and 64 to 512 states (bench/RESULTS.md, "Where the rule
  // takes the fused form").
  constexpr int64_t kFusedStepTerms = int64_t(1) << 23;
  if (default_fused_steps(p, sm_count) && p.B * p.C * p.C >= kFusedStepTerms) return true;
  return (p.C >= 256 && p.B * p.C >= 65536) || (p.C >= 1024 && p.B >= 16);
}

namespace {

// The decision stored for the problem's bucket on this device, where its text names that bucket (an entry written by
// hand may name another); none without clusters (sm_90 on: tune --chain stores none below) or sequences.
std::optional<ChainDecision> stored_decision(const ChainProblem& problem, const DeviceInfo& device) {
  if (cluster_sms(device) == 0 || problem.B == 0) return std::nullopt;
  std::optional<ChainDecision> d =
      remembered_chain_decision(DiskCache::process_cache(), chain_tuning_key(problem, tuning_device(device)));
  if (d && d->problem != chain_bucket_text(problem)) return std::nullopt;
  return d;
}

// The stepped strategy's form a decision names, where the problem takes it (the fused form computes an HMM of one
// shared table, which the bucket's text does not say); else the rule's.
StepKernel decided_form(const ChainProblem& problem, const ChainDecision& d) {
  if (!d.stepped_fused) return StepKernel::rule;
  if (!*d.stepped_fused) return StepKernel::products;
  return fused_steps_apply(problem) ? StepKernel::fused : StepKernel::rule;
}

} // namespace

ChainChoice choose_chain_spec(const ChainProblem& problem, const DeviceInfo& device) {
  if (problem.C > kMaxSequentialChainStates) { // only the stepped strategy computes it; a decision says what it timed
    ChainChoice c;
    c.stepped = true;
    c.decision = stored_decision(problem, device);
    if (c.decision) c.steps = decided_form(problem, *c.decision);
    return c;
  }
  ChainChoice c;
  c.spec = default_chain_spec(problem, cluster_sms(device));
  c.chunk = default_chain_chunk(problem);
  // The sequential variant stays chosen beside the stepped strategy, for what compares them (jitbmm bench --chain).
  c.stepped = default_chain_stepped(problem, device.sm_count);
  if (c.stepped) c.chunk = 0;
  c.decision = stored_decision(problem, device);
  if (!c.decision) return c;
  // A decision is taken where the plan can launch its clusters and compute its chunks (another problem of the
  // bucket may be too short for them). One stored before the stepped strategy was tuned names no stepped line: its
  // chunks (measured faster than the sequential kernels) still replace the rule's stepped strategy.
  const ChainDecision& d = *c.decision;
  if (const std::optional<int64_t> chunk = d.chunk; chunk && (*chunk == 0 || chunk_unfit(problem, *chunk).empty())) {
    c.chunk = *chunk;
    c.chunk_from_decision = true;
    if (*chunk > 0) c.stepped = false;
  }
  if (d.stepped) {
    c.stepped = *d.stepped;
    c.stepped_from_decision = true;
    if (c.stepped) c.chunk = 0, c.steps = decided_form(problem, d);
    if (c.stepped && log_enabled(LogLevel::debug))
      log_message(LogLevel::debug, "chain " + chain_bucket_text(problem) +
                                       ": the stepped strategy, from the stored "
                                       "decision");
  }
  const int cluster = std::max(d.forward_cluster, d.saving_cluster);
  if (problem.B > kMaxChainSequences / cluster) return c;
  const ChainSpec tuned =
      d.forward_lanes ? chain_spec_with_forward_lanes(problem, d.forward_cluster, d.saving_cluster, *d.forward_lanes)
                      : clustered_chain_spec(problem, d.forward_cluster, d.saving_cluster);
  if (!tuned.clusters_fit() || (d.forward_lanes && !tuned.registers_fit())) return c;
  if (log_enabled(LogLevel::debug))
    log_message(LogLevel::debug,
                "chain " + chain_bucket_text(problem) + ": clusters " + std::to_string(d.forward_cluster) + " and " +
                    std::to_string(d.saving_cluster) + " (saving)" +
                    (d.forward_lanes ? ", the forward in groups of " + std::to_string(*d.forward_lanes) + " lanes"
                                     : std::string()) +
                    ", from the stored decision");
  c.spec = with_rule_saving_blocks(tuned, problem.B, cluster_sms(device));
  c.from_decision = true;
  return c;
}

int cluster_sms(const DeviceInfo& device) { return device.features.has(kClusters) ? device.sm_count : 0; }

} // namespace jitbmm
