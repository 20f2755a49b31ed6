// A chain kernel's variant (ChainSpec, generator/chain_source.hpp): what each loop's threads hold, whether its
// registers and shared memory fit, the defaults a problem gets and the checks of a chosen one. Their rendering as
// CUDA source is generator/chain_source.cpp's.
#include "generator/chain_source.hpp"

#include <algorithm>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <utility>

#include "templates/chain/chunk_params.cuh"
#include "templates/chain/edge_params.cuh"
#include "templates/chain/params.cuh"

namespace jitbmm {

namespace {

int floor_pow2(int x) {
  int p = 1;
  while (p * 2 <= x) p *= 2;
  return p;
}
int ceil_pow2(int x) { return floor_pow2(x) == x ? x : 2 * floor_pow2(x); }
bool pow2(int x) { return x > 0 && (x & (x - 1)) == 0; }

// The target states each block of a loop's cluster reduces.
int block_states(int C, const ChainLoop& l) { return (C + l.cluster - 1) / l.cluster; }

// A loop's registers per thread, roughly: the step's shifted messages (N per lane) and the terms it holds (held
// words, in the accumulator type), plus the loop's own (addresses, counters, the reduction's temporaries; max_plus's
// winning states; a cluster's rank, bounds and remote addresses: found by compiling every state count the tests use).
int held_registers(const ChainSpec& s, const ChainLoop& l, int held) {
  const int n = (s.C + l.lanes - 1) / l.lanes, words = dtype_info(s.dtype).acc_bytes / 4;
  return words * (n + held) + n + (words == 2 ? 68 : 40) + (s.semiring == Semiring::max_plus ? 12 : 0) +
         (l.cluster > 1 ? 12 : 0);
}
// The terms held: one round's, or with `prefetch` every round's twice (this step's and the next's; three times where
// jb::chain_loads_deep; the HMM form's transitions once, and a step's emissions); without prefetch also the ring's
// cursors.
int loop_registers(const ChainSpec& s, const ChainLoop& l, bool prefetch) {
  const int groups = l.threads / l.lanes, rounds = (block_states(s.C, l) + groups - 1) / groups,
            n = (s.C + l.lanes - 1) / l.lanes;
  // The HMM form's transitions stay the same along the chain: one buffer of them, and a step's emissions.
  const bool hmm = s.form == ChainForm::hmm;
  const int steps = hmm ? 1 : jb::chain_loads_deep(s.semiring == Semiring::log, hmm, s.C, l.cluster) ? 3 : 2;
  const int ring = prefetch ? 0 : hmm ? 40 : 24;
  return held_registers(s, l, prefetch ? steps * rounds * n + (hmm ? rounds : 0) : n) + ring;
}
// What __launch_bounds__(threads, 1) leaves each thread of the register file (64 Ki registers, at most 255 each).
int register_budget(int threads) { return std::min(255, 65536 / threads); }
bool fits(const ChainSpec& s, const ChainLoop& l, bool prefetch) {
  return loop_registers(s, l, prefetch) <= register_budget(l.threads);
}

// A ring slot: one round's terms of every thread of the block, in the accumulator type.
unsigned slot_bytes(const ChainSpec& s, const ChainLoop& l) {
  return unsigned(l.threads) * unsigned((s.C + l.lanes - 1) / l.lanes) * unsigned(dtype_info(s.dtype).acc_bytes);
}
// What the ring may take: enough rounds in flight to cover the latency of memory at the rate one SM reads it,
// within the shared memory a block may have (ChainSpec::shared_limit; kDefaultSharedLimit, sm_90's, where unset).
constexpr unsigned kRingBytes = 160 * 1024;
constexpr int kMaxStages = 8;
constexpr unsigned kDefaultSharedLimit = 227 * 1024;

// A bound of the static shared memory of a loop's kernel (templates/chain/sequential.cuh: a step's messages and every
// warp's maxima, [2][C] and [2][cluster · warps]; twice in the saving forward, whose blocks of both kinds are one
// kernel; max_plus's staged back-pointers), with room for what the compiler adds.
unsigned static_shared_bound(const ChainSpec& s, const ChainLoop& l) {
  const unsigned acc = unsigned(dtype_info(s.dtype).acc_bytes);
  const unsigned path = s.semiring == Semiring::max_plus ? jb::chain_path_bytes(s.C) : 0;
  return 2 * (2 * unsigned(s.C) * acc + 2 * unsigned(l.cluster) * unsigned(l.threads / 32) * acc) + path + 1024;
}

// A staged loop's two slabs (jb::chain_slab_bytes), and whether its registers fit: its share of a step's slab held
// from its loads to its stores (a round's terms come from the slab as they are reduced).
unsigned staged_bytes(const ChainSpec& s, const ChainLoop& l) {
  return jb::chain_slab_bytes(s.C, block_states(s.C, l), l.lanes, dtype_info(s.dtype).acc_bytes);
}
bool staged_fits(const ChainSpec& s, const ChainLoop& l) {
  const int share = (s.C * block_states(s.C, l) + l.threads - 1) / l.threads;
  return held_registers(s, l, share) <= register_budget(l.threads);
}

// The HMM form's two steps' emissions in dynamic shared memory, where the loop does not keep its terms in registers.
unsigned emission_bytes(const ChainSpec& s, const ChainLoop& l) {
  return s.form == ChainForm::hmm && !s.prefetch(l) ? 2u * unsigned(s.C) * unsigned(dtype_info(s.dtype).acc_bytes) : 0;
}

// About eight source states per lane (fewer makes the shuffles dominate, more the serial part of a step), and no
// fewer lanes than leave every group of lanes of a block of `threads` one of its `targets` states.
int default_lanes(int C, int targets, int threads, int per_lane) {
  return std::clamp(std::max(floor_pow2(std::max(1, C / per_lane)), ceil_pow2(std::max(1, threads / targets))), 1, 32);
}

} // namespace

bool ChainSpec::operator==(const ChainSpec& o) const {
  return semiring == o.semiring && dtype == o.dtype && form == o.form && C == o.C && forward == o.forward &&
         saving == o.saving && beta_lanes == o.beta_lanes && backward_threads == o.backward_threads;
}

// An "_edges" block holds about 2048 elements of the table, eight a thread, their sums and transitions in registers
// (templates/chain/hmm_edges.cuh): enough of a step's terms to amortise staging its messages. The wide block holds
// about 16384, 32 a thread, so that a step's factors are formed once for four times the sums (a step's X factors once
// per block: the whole table up to 128 states), where there are steps enough to fill the GPU with such blocks. From
// 64 states (below, a wide block is one or two warps, and an SM holds too few of them) to 256, in multiples of 32.
// The mma block holds 32 a thread too, as tensor-core fragments of warps of 32 rows × 32 sources, about 8192 a block
// (at most 8 warps: two blocks an SM, of 128 registers a thread), half the wide block's rows, so that an SM holds
// two blocks' staging and factors at once where the wide block's one waits on its own.
int ChainSpec::edge_rows(int kind) const {
  if (kind == jb::kEdgeMma) return std::clamp(8192 / std::max(C, 1) / 32 * 32, 32, std::max(C, 32));
  // Wide: as many rows as leave each of 16 warps' lanes 32 entries, a warp's lanes along the sources.
  return kind == jb::kEdgeWide ? std::clamp(16 * (32 / ((C + 31) / 32)), 1, C) : std::clamp(2048 / C, 1, C);
}
int ChainSpec::edge_threads(int kind) const {
  if (kind == jb::kEdgeMma) return edge_rows(kind) * C / 32;
  return kind == jb::kEdgeWide ? std::clamp(ceil_pow2((edge_rows(kind) * C + 31) / 32), 32, 512)
                               : std::clamp(ceil_pow2((edge_rows() * C + 7) / 8), 32, 256);
}
bool ChainSpec::wide_edges() const {
  // Whole warps of sources: at other C ptxas spilled a few words in the 128 registers (127, 161, 255 states).
  return form == ChainForm::hmm && semiring == Semiring::log && dtype_info(dtype).acc_bytes == 4 && C >= 64 &&
         C <= 256 && C % 32 == 0;
}
bool ChainSpec::mma_edges() const {
  // From 128 states alone: below, the other blocks were measured faster (runtime/hmm_sums.cpp), and an entry no plan
  // takes would only lengthen the unit's compile.
  return form == ChainForm::hmm && semiring == Semiring::log && dtype_info(dtype).acc_bytes == 4 && C >= 128 &&
         C <= 256 && C % 32 == 0;
}
const char* ChainSpec::edge_entry(int kind) {
  return kind == jb::kEdgeMma ? "_edges_mma" : kind == jb::kEdgeWide ? "_edges_wide" : "_edges";
}

bool ChainSpec::prefetch(const ChainLoop& loop) const { return fits(*this, loop, true); }

bool ChainSpec::registers_fit() const {
  // A loop runs with its step in registers where that fits (prefetch), else through the ring.
  auto runs = [&](const ChainLoop& l) { return fits(*this, l, true) || fits(*this, l, false); };
  return runs(forward) && (semiring != Semiring::log || (runs(saving) && runs(beta())));
}

int default_beta_lanes(const ChainSpec& spec) {
  ChainSpec s = spec;
  s.beta_lanes = std::clamp(ceil_pow2(std::max(1, s.saving.threads / block_states(s.C, s.saving))), 4, 32);
  while (s.beta_lanes < 32 && !fits(s, s.beta(), false)) s.beta_lanes *= 2;
  return s.beta_lanes;
}

int ChainSpec::stages(const ChainLoop& loop) const {
  // cp.async copies 4, 8 or 16 bytes: half types' terms are loaded where they are reduced instead.
  if (prefetch(loop) || dtype_info(dtype).half) return 0;
  const unsigned limit = shared_limit > 0 ? unsigned(shared_limit) : kDefaultSharedLimit,
                 fixed = static_shared_bound(*this, loop) + emission_bytes(*this, loop);
  const unsigned ring = limit > fixed ? std::min(kRingBytes, limit - fixed) : 0;
  const int n = int(std::min<unsigned>(kMaxStages, ring / slot_bytes(*this, loop)));
  return n >= 2 ? n : 0;
}

unsigned ChainSpec::dynamic_bytes(const ChainLoop& loop) const {
  return unsigned(stages(loop)) * slot_bytes(*this, loop) + emission_bytes(*this, loop);
}

bool ChainSpec::beta_staged() const {
  // The CRF form's backward messages read each step's rows along their targets, a line of memory a lane
  // (templates/chain/step_terms.cuh): where a block's few targets leave sixteen lanes or more a group (clusters, wide
  // rows) the saving forward took several times the forward, at eight about a tenth more (bench/RESULTS.md). There
  // the block stages each step instead, where its two slabs fit the block's shared memory. The HMM form's transitions
  // are the same every step.
  constexpr int kStagedLanes = 16;
  if (semiring != Semiring::log || form != ChainForm::crf || beta_lanes < kStagedLanes) return false;
  const ChainLoop l = beta();
  const unsigned limit = shared_limit > 0 ? unsigned(shared_limit) : kDefaultSharedLimit;
  return staged_bytes(*this, l) + static_shared_bound(*this, l) <= limit && staged_fits(*this, l);
}

unsigned ChainSpec::saving_dynamic_bytes() const {
  return std::max(dynamic_bytes(saving), beta_staged() ? staged_bytes(*this, beta()) : dynamic_bytes(beta()));
}

namespace {

// A loop of groups of `lanes` lanes over a cluster of `cluster` blocks: as many threads as a block's share of the
// step has groups for (whole_loop), fewer where their registers would spill (loop_with_lanes).
ChainLoop whole_loop(const ChainSpec& s, int lanes, int cluster) {
  ChainLoop l{0, lanes, cluster};
  l.threads = std::min(1024, ceil_pow2(std::max(32, l.lanes * block_states(s.C, l))));
  return l;
}
ChainLoop loop_with_lanes(const ChainSpec& s, int lanes, int cluster) {
  ChainLoop l = whole_loop(s, lanes, cluster);
  while (l.threads > 32 && !fits(s, l, false)) l.threads /= 2;
  return l;
}

// As loop_with_lanes, for a loop that keeps a step's terms in registers (prefetch): its block whole, or none (0
// threads) where that would not fit.
ChainLoop held_loop(const ChainSpec& s, int lanes, int cluster) {
  ChainLoop l = whole_loop(s, lanes, cluster);
  if (!fits(s, l, true)) l.threads = 0;
  return l;
}

// The rule's spec with the forward's loop over a cluster of `forward_cluster` blocks and the saving forward's over
// `saving_cluster`.
ChainSpec spec_with(const ChainProblem& problem, int forward_cluster, int saving_cluster) {
  check_chain_problem(problem);
  ChainSpec s;
  s.semiring = problem.semiring;
  s.dtype = problem.dtype;
  s.form = problem.form;
  s.C = static_cast<int>(problem.C);
  // The forward: about eight terms per lane (sixteen beyond 128 states, where a group's shuffles cost more than a
  // longer serial part: measured at 256), as many threads as a block's share of the step has groups of lanes for,
  // fewer where their registers would spill.
  auto block_for = [&](int per_lane, int cluster) {
    return loop_with_lanes(s, default_lanes(s.C, s.C, 1, per_lane), cluster);
  };
  const int per_lane = s.C > 128 ? 16 : 8;
  const ChainLoop base = block_for(per_lane, forward_cluster);
  // The HMM form's transitions stay in registers for the whole chain, which in f32 (and in f16 and bf16, computed
  // in f32) leaves a lane room for sixteen terms from 64 states on (the log forward measured at 64 and 128; its
  // saving forward keeps the rule below). Viterbi gains more: each halving of the lanes saves a shuffle of a score
  // and its state. Measured on an H200 (jitbmm bench --chain C --hmm --semiring max_plus --sweep, f32, the forward
  // with its path), sixteen terms a lane instead of eight took 0.88 ms against 0.99 at B, T, C = 16, 1024, 64, 0.073
  // against 0.101 at 512, 32, 64, 1.15 against 1.41 at 128, 512, 128, 0.86 against 1.01 at 64, 512, 128 (clusters of
  // 2) and 2.48 against 2.79 at 4, 2048, 128 (clusters of 8); at 32 states two lanes lost to the rule's four.
  const bool hmm_f32 = s.form == ChainForm::hmm && !dtype_info(s.dtype).wide_acc();
  s.forward = hmm_f32 && s.C >= 64 ? block_for(16, forward_cluster) : base;
  // The HMM form's log forward from 128 states: sixty-four terms a lane where that loop still keeps its step in
  // registers. A step's terms are then summed mostly in each lane's own registers, with fewer shuffles between lanes
  // and fewer threads a block, so more of the batch's blocks share an SM (bench/RESULTS.md, the sequential kernels'
  // loops: at 128 and 256 states it was the fastest forward swept at every batch measured).
  const bool hmm_log = hmm_f32 && s.semiring == Semiring::log;
  if (hmm_log && s.C >= 128)
    if (const ChainLoop wide = held_loop(s, default_lanes(s.C, s.C, 1, 64), forward_cluster); wide.threads > 0)
      s.forward = wide;
  s.saving = s.forward;
  s.beta_lanes = s.forward.lanes;
  if (s.semiring == Semiring::log) {
    // The HMM form's saving forward (f32): the forward's own lanes over the saving forward's clusters, the backward
    // messages with their own lanes (default_beta_lanes), where both keep a step in registers. Its 2B blocks then
    // run each recursion as the forward runs its one (a launch of many sequences takes about twice the forward's
    // time, one of few about the forward's), where the block of the rule below spends a step's terms on more lanes.
    bool chosen = false;
    if (hmm_log && s.C >= 64) {
      s.saving = saving_cluster == s.forward.cluster ? s.forward : held_loop(s, s.forward.lanes, saving_cluster);
      if (s.saving.threads > 0 && s.prefetch(s.saving)) {
        s.beta_lanes = default_beta_lanes(s);
        chosen = s.prefetch(s.beta());
      }
    }
    // Otherwise both recursions in one block size, the backward messages with their own lanes: the largest block,
    // starting from the base rule's forward block, in which both loops keep a step in registers; failing that, that
    // block.
    if (!chosen) {
      const ChainLoop start = block_for(per_lane, saving_cluster);
      auto at = [&](int threads) {
        s.saving = {threads, default_lanes(s.C, block_states(s.C, start), threads, 16), start.cluster};
        s.beta_lanes = default_beta_lanes(s);
      };
      int threads = start.threads;
      for (at(threads); threads > 32 && !(s.prefetch(s.saving) && s.prefetch(s.beta()));) at(threads /= 2);
      if (!(s.prefetch(s.saving) && s.prefetch(s.beta()))) at(start.threads);
    }
  }
  // The backward's block writes one step's C² gradients: a step's worth of threads, up to 256.
  s.backward_threads = std::clamp(ceil_pow2(s.C * s.C), 32, 256);
  return s;
}

} // namespace

ChainSpec default_chain_spec(const ChainProblem& problem, int cluster_sms) {
  // One block per sequence reads a step's potentials (the CRF form's C², the HMM form's transitions where they do
  // not stay in registers) through one SM, so a batch of few sequences leaves the GPU idle and each step waits for
  // memory; a cluster of blocks per sequence splits the step's target states and its reads. Measured on an H200
  // (jitbmm bench --chain C --cluster K): from 128 states on it pays (at B, T, C = 8, 1024, 128 the CRF forward
  // took 1.70 ms with 8 blocks instead of 3.48; at 4, 256, 512 2.24 instead of 12.2), at 32 and 64 states the
  // cluster's barrier costs more than it saves. The cluster doubles, up to kMaxChainCluster blocks, while every
  // cluster of the launch (two per sequence in the saving forward) still fits at once: SMs are grouped, and a
  // cluster takes SMs of one group, so 128 blocks of 512 threads in clusters of 4 ran in two waves on 132 SMs where
  // in clusters of 2 they did not. The room counted is the blocks the SMs hold for clusters of 2 and half of them
  // for larger ones, by threads alone (one block of 512 threads or more per SM, two of fewer; what the registers
  // allow is known only once compiled, so the rule misses launches that would have fit: measured, Viterbi at B, T,
  // C = 16, 256, 256 ran 1.21 ms with 4 blocks against 1.51 with the 8 the rule takes). Only where the registers
  // still fit (a cluster's take a few more).
  // The HMM form's transitions held in registers: a cluster splits the table and its terms, not reads, and paid for
  // Viterbi only while each block had an SM to itself (HMM, f32, 128 states, T = 512 to 1024: 1.0 ms with the path
  // in clusters of 2 against 1.3 at B = 64, 1.6 in clusters of 4 against 2.6 at B = 16, and 0.97 in clusters of 2
  // against 0.64 at B = 128); log's forward that saves its messages was slower in clusters at each of those.
  const ChainSpec single = spec_with(problem, 1, 1);
  const bool streams = problem.form == ChainForm::crf || !single.prefetch(single.forward);
  const bool held = !streams && problem.semiring == Semiring::max_plus;
  auto cluster_for = [&](int64_t sequences, bool saving) {
    int k = 1;
    if (!(streams || held) || problem.C < 128 || cluster_sms <= 0 || sequences == 0) return k; // B = 0: no launch
    while (2 * k <= kMaxChainCluster) {
      const ChainSpec s = spec_with(problem, 2 * k, 2 * k);
      const int threads = (saving ? s.saving : s.forward).threads;
      const int per_sm = held || threads >= 512 ? 1 : 2;
      const int64_t room = int64_t(cluster_sms) * per_sm / (k == 1 ? 1 : 2);
      if (sequences * 2 * k > room || !s.registers_fit()) break;
      k *= 2;
    }
    return k;
  };
  return with_rule_saving_blocks(spec_with(problem, cluster_for(problem.B, false), cluster_for(2 * problem.B, true)),
                                 problem.B, cluster_sms);
}

ChainSpec with_rule_saving_blocks(ChainSpec s, int64_t B, int cluster_sms) {
  // The HMM form's log saving forward in the forward's loop of 64 terms a lane (128 states, f32) takes 180-200
  // registers a thread: one block an SM, so where the launch's 2B blocks outnumber the SMs the sequences' forward and
  // backward messages run in turns, about twice the forward's time. Compiled for two blocks an SM, ptxas holds the
  // same loop in 128 registers, spilling a few (164 bytes), and both run at once, which measured faster at 80 to 256
  // sequences (bench/RESULTS.md, the HMM form's loops); where the batch leaves SMs idle the spills only cost, so the
  // rule takes it only where the blocks outnumber the SMs. From 129 states the loop has eight lanes a state, and two
  // blocks an SM spilled 624 to 976 bytes (sm_90) where 128 states spilled 164: one block there. Blocks of more than
  // 256 threads would be left under 128 registers a thread.
  const ChainLoop& l = s.saving;
  const bool wide = s.form == ChainForm::hmm && s.semiring == Semiring::log && s.dtype == DType::f32 && s.C == 128 &&
                    l.cluster == 1 && l.threads <= 256 && s.prefetch(l) &&
                    2 * loop_registers(s, l, true) * l.threads > 65536;
  s.saving.blocks = wide && cluster_sms > 0 && 2 * B > cluster_sms ? 2 : 1;
  return s;
}

ChainSpec clustered_chain_spec(const ChainProblem& problem, int cluster) {
  return clustered_chain_spec(problem, cluster, cluster);
}

ChainSpec clustered_chain_spec(const ChainProblem& problem, int forward_cluster, int saving_cluster) {
  for (const auto& [cluster, field] :
       {std::pair{forward_cluster, "cluster"}, std::pair{saving_cluster, "saving_cluster"}})
    if (!pow2(cluster) || cluster > kMaxChainCluster)
      throw std::invalid_argument("chain spec." + std::string(field) + ": must be a power of two at most " +
                                  std::to_string(kMaxChainCluster) + " (got " + std::to_string(cluster) + ")");
  return spec_with(problem, forward_cluster, saving_cluster);
}

ChainSpec chain_spec_with_forward_lanes(const ChainProblem& problem, int forward_cluster, int saving_cluster,
                                        int lanes) {
  if (!pow2(lanes) || lanes > 32)
    throw std::invalid_argument("chain spec.lanes: must be a power of two at most 32 (got " + std::to_string(lanes) +
                                ")");
  ChainSpec s = clustered_chain_spec(problem, forward_cluster, saving_cluster);
  s.forward = loop_with_lanes(s, lanes, forward_cluster);
  if (s.semiring != Semiring::log) { // one loop: the forward with its path is the forward's
    s.saving = s.forward;
    s.beta_lanes = s.forward.lanes;
  }
  return s;
}

void check_chain_spec(const ChainSpec& s, const ChainProblem& problem) {
  check_chain_problem(problem);
  auto fail = [](const std::string& what) { throw std::invalid_argument("chain spec." + what); };
  if (s.semiring != problem.semiring) fail("semiring: differs from the problem's");
  if (s.dtype != problem.dtype) fail("dtype: differs from the problem's");
  if (s.form != problem.form) fail("form: differs from the problem's");
  if (s.C != problem.C) fail("C: differs from the problem's (" + std::to_string(problem.C) + ")");
  if (s.C > kMaxSequentialChainStates)
    fail("C: the sequential kernels take at most " + std::to_string(kMaxSequentialChainStates) + " states (got " +
         std::to_string(s.C) + "; the stepped strategy takes more)");
  auto check_lanes = [&](int lanes, const char* field) {
    if (!pow2(lanes) || lanes > 32)
      fail(std::string(field) + ": must be a power of two at most 32 (got " + std::to_string(lanes) + ")");
  };
  auto check_threads = [&](int threads, const char* field) {
    if (threads < 32 || threads > 1024 || threads % 32)
      fail(std::string(field) + ": must be a multiple of 32 in [32, 1024] (got " + std::to_string(threads) + ")");
  };
  check_threads(s.forward.threads, "threads");
  check_lanes(s.forward.lanes, "lanes");
  check_threads(s.saving.threads, "saving_threads");
  check_lanes(s.saving.lanes, "saving_lanes");
  check_lanes(s.beta_lanes, "beta_lanes");
  for (const auto& [loop, field] : {std::pair{s.forward, "cluster"}, std::pair{s.saving, "saving_cluster"}})
    if (!pow2(loop.cluster) || loop.cluster > kMaxChainCluster)
      fail(std::string(field) + ": must be a power of two at most " + std::to_string(kMaxChainCluster) + " (got " +
           std::to_string(loop.cluster) + ")");
  // An SM holds at most 2048 threads: a loop compiled for more blocks than that would leave none a register.
  for (const auto& [loop, field] : {std::pair{s.forward, "blocks"}, std::pair{s.saving, "saving_blocks"}})
    if (loop.blocks < 1 || loop.blocks * loop.threads > 2048)
      fail(std::string(field) + ": must be at least 1, and at most 2048 threads an SM in all (got " +
           std::to_string(loop.blocks) + " of " + std::to_string(loop.threads) + " threads)");
  if (s.backward_threads < 32 || s.backward_threads > 1024 || s.backward_threads % 32)
    fail("backward_threads: must be a multiple of 32 in [32, 1024] (got " + std::to_string(s.backward_threads) + ")");
}

} // namespace jitbmm
