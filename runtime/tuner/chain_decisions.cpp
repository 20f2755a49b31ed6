// Chain decisions: their keys, their line-based text and their place in the disk cache.
#include "runtime/tuner/chain_decisions.hpp"

#include <algorithm>
#include <iterator>
#include <map>
#include <mutex>
#include <sstream>

#include "cache/disk_cache.hpp"
#include "generator/chain_source.hpp"
#include "support/checked_size.hpp"
#include "support/sha256.hpp"

namespace jitbmm {

namespace {

// Whether the inputs are laid out as the contiguous default, whether their strides are given or left 0.
bool contiguous(const ChainProblem& p) {
  ChainProblem plain = p;
  std::fill(std::begin(plain.strides), std::end(plain.strides), 0);
  std::fill(std::begin(plain.emission_strides), std::end(plain.emission_strides), 0);
  std::fill(std::begin(plain.transition_strides), std::end(plain.transition_strides), 0);
  std::fill(std::begin(plain.initial_strides), std::end(plain.initial_strides), 0);
  if (p.form == ChainForm::hmm) {
    const HmmStrides a = hmm_strides(p), b = hmm_strides(plain);
    return std::equal(std::begin(a.emissions), std::end(a.emissions), std::begin(b.emissions)) &&
           std::equal(std::begin(a.transitions), std::end(a.transitions), std::begin(b.transitions)) &&
           std::equal(std::begin(a.initial), std::end(a.initial), std::begin(b.initial));
  }
  int64_t a[4], b[4];
  chain_strides(p, a);
  chain_strides(plain, b);
  return std::equal(a, a + 4, b);
}

// A cluster size a decision may name, or nothing.
std::optional<int> parse_cluster(const std::string& text) {
  for (int k = 1; k <= kMaxChainCluster; k *= 2)
    if (text == std::to_string(k)) return k;
  return std::nullopt;
}

// A forward's lanes a decision may name (a power of two at most 32, as written), or nothing.
std::optional<int> parse_lanes(const std::string& text) {
  for (int g = 1; g <= 32; g *= 2)
    if (text == std::to_string(g)) return g;
  return std::nullopt;
}

// A chunk length a decision may name (a power of two in [2, kMaxChainChunk], as written), or nothing.
std::optional<int64_t> parse_chunk(const std::string& text) {
  for (int64_t l = 2; l <= kMaxChainChunk; l *= 2)
    if (text == std::to_string(l)) return l;
  return std::nullopt;
}

// One variant's line: `kind [size] forward saving backward` (the stepped strategy's has no size), the three in ms as
// every decision writes durations. The decoder reads it back word by word.
std::string timing_line(const std::string& variant, double forward_ms, double saving_ms, double backward_ms) {
  return variant + ' ' + format_duration(forward_ms, 5) + ' ' + format_duration(saving_ms, 5) + ' ' +
         format_duration(backward_ms, 5) + '\n';
}

constexpr const char* kSteppedTiming = "steps"; // the stepped strategy's products' timing line
constexpr const char* kFusedTiming = "fused";   // its fused form's

} // namespace

std::string chain_bucket_text(const ChainProblem& p) {
  std::ostringstream os;
  os << semiring_info(p.semiring).name << ' ' << dtype_info(p.dtype).name << ' '
     << (p.form == ChainForm::hmm ? "hmm" : "crf") << " C=" << p.C << " B<=" << checked_round_up_pow2(p.B, "chain.B")
     << " T<=" << checked_round_up_pow2(p.T, "chain.T") << (contiguous(p) ? " contiguous" : " strided");
  return os.str();
}

std::string chain_tuning_key(const ChainProblem& problem, const TuningDevice& device) {
  return sha256_hex(tuning_device_text(device) + "chain " + chain_bucket_text(problem) + '\n');
}

ChainDecision choose_chain_clusters(const ChainProblem& problem, std::vector<ChainTiming> timed, double seconds,
                                    std::vector<ChunkTiming> chunked, std::optional<SteppedTiming> stepped,
                                    std::vector<LanesTiming> lanes, std::optional<SteppedTiming> fused) {
  ChainDecision d;
  d.problem = chain_bucket_text(problem);
  d.seconds = seconds;
  d.stepped_timing = stepped;
  d.fused_timing = fused;
  // The stepped strategy's form: its products unless the fused form was faster.
  auto cost = [](const std::optional<SteppedTiming>& t) { return t->saving_ms + t->backward_ms; };
  if (fused) d.stepped_fused = !stepped || cost(fused) < cost(stepped);
  const std::optional<SteppedTiming> steps = d.stepped_fused.value_or(false) ? fused : stepped;
  if (timed.empty()) { // no sequential kernel computes the problem: the stepped strategy alone, chunks in those
    if (!steps)
      throw std::invalid_argument("choose_chain_clusters: neither a cluster size nor the stepped strategy "
                                  "was timed");
    if (!chunked.empty() || !lanes.empty())
      throw std::invalid_argument("choose_chain_clusters: chunks or lanes timed without the clusters they run in");
    d.chunk = 0;
    d.stepped = true;
    return d;
  }
  std::sort(timed.begin(), timed.end(),
            [](const ChainTiming& a, const ChainTiming& b) { return a.cluster < b.cluster; });
  // The backward's kernels do not split sequences over clusters, so its time does not decide. log's two forwards
  // are launches of their own, each its fastest size; max_plus's score and its path are one entry point, which
  // takes the size fastest at both.
  const bool log = problem.semiring == Semiring::log;
  auto forward_cost = [&](const ChainTiming& t) { return log ? t.forward_ms : t.forward_ms + t.saving_ms; };
  const ChainTiming* fastest = &timed.front();
  const ChainTiming* fastest_saving = &timed.front();
  for (const ChainTiming& t : timed) {
    if (forward_cost(t) < forward_cost(*fastest)) fastest = &t;
    if (t.saving_ms < fastest_saving->saving_ms) fastest_saving = &t;
  }
  d.forward_cluster = fastest->cluster;
  d.saving_cluster = log ? fastest_saving->cluster : fastest->cluster;
  // The strategy serves a training step: the forward that keeps what the backward reads, then that backward, in the
  // cluster that keeps it (max_plus's path is written by the forward's one entry point, in the forward's cluster).
  const ChainTiming& kept = log ? *fastest_saving : *fastest;
  double best = kept.saving_ms + kept.backward_ms;
  // The forward's lanes, timed in its cluster: the rule's unless others were faster by the cost that chose the cluster.
  std::sort(lanes.begin(), lanes.end(), [](const LanesTiming& a, const LanesTiming& b) { return a.lanes < b.lanes; });
  double forward_best = forward_cost(*fastest);
  for (const LanesTiming& t : lanes) {
    const double cost = log ? t.forward_ms : t.forward_ms + t.saving_ms;
    if (cost >= forward_best) continue;
    forward_best = cost;
    d.forward_lanes = t.lanes;
    if (!log) best = t.saving_ms + t.backward_ms; // max_plus's kept path is this loop's
  }
  std::sort(chunked.begin(), chunked.end(),
            [](const ChunkTiming& a, const ChunkTiming& b) { return a.chunk < b.chunk; });
  d.chunk = 0;
  for (const ChunkTiming& t : chunked)
    if (t.saving_ms + t.backward_ms < best) best = t.saving_ms + t.backward_ms, d.chunk = t.chunk;
  d.stepped = steps && cost(steps) < best;
  if (*d.stepped) d.chunk = 0;
  d.timed = std::move(timed);
  d.chunked = std::move(chunked);
  d.lanes = std::move(lanes);
  return d;
}

std::string encode_chain_decision(const ChainDecision& d) {
  std::ostringstream os;
  os << "chain " << d.problem << '\n'
     << "forward_cluster " << d.forward_cluster << '\n'
     << "saving_cluster " << d.saving_cluster << '\n';
  os << "seconds " << format_duration(d.seconds, 3) << '\n';
  if (d.chunk) os << "chunk " << *d.chunk << '\n';
  if (d.stepped) os << "stepped " << (*d.stepped ? "yes" : "no") << '\n';
  if (d.stepped_fused) os << "stepped_form " << (*d.stepped_fused ? "fused" : "products") << '\n';
  if (d.forward_lanes) os << "forward_lanes " << *d.forward_lanes << '\n';
  for (const ChainTiming& t : d.timed)
    os << timing_line("timed " + std::to_string(t.cluster), t.forward_ms, t.saving_ms, t.backward_ms);
  for (const ChunkTiming& t : d.chunked)
    os << timing_line("chunked " + std::to_string(t.chunk), t.forward_ms, t.saving_ms, t.backward_ms);
  for (const LanesTiming& t : d.lanes)
    os << timing_line("lanes " + std::to_string(t.lanes), t.forward_ms, t.saving_ms, t.backward_ms);
  if (const auto& t = d.stepped_timing) os << timing_line(kSteppedTiming, t->forward_ms, t->saving_ms, t->backward_ms);
  if (const auto& t = d.fused_timing) os << timing_line(kFusedTiming, t->forward_ms, t->saving_ms, t->backward_ms);
  return os.str();
}

std::optional<ChainDecision> decode_chain_decision(const std::string& text) {
  FieldReader in(text, 16 * 1024);
  std::string line;
  ChainDecision d;
  const auto problem = in.field("chain"), forward = in.field("forward_cluster"), saving = in.field("saving_cluster"),
             seconds = in.field("seconds");
  if (!problem || !forward || !saving || !seconds) return std::nullopt;
  const auto forward_cluster = parse_cluster(*forward), saving_cluster = parse_cluster(*saving);
  const auto tuned_for = parse_duration(*seconds);
  if (!forward_cluster || !saving_cluster || !tuned_for) return std::nullopt;
  d.problem = *problem;
  d.forward_cluster = *forward_cluster;
  d.saving_cluster = *saving_cluster;
  d.seconds = *tuned_for;
  // Then the strategy chosen: the chunk, whether stepped and its form (each absent from decisions stored before that
  // was tuned), the forward's lanes (where not the rule's), the clusters' timings, the chunks', the lanes' and the
  // stepped strategy's forms', in that order.
  while (in.next(line)) {
    const bool timings_begun =
        !d.timed.empty() || !d.chunked.empty() || !d.lanes.empty() || d.stepped_timing || d.fused_timing;
    // Where each may still come: not after itself, a later optional line or a timing.
    const bool lanes_may = !timings_begun && !d.forward_lanes;
    const bool form_may = lanes_may && !d.stepped_fused;
    const bool stepped_may = form_may && !d.stepped;
    const bool chunk_may = stepped_may && !d.chunk;
    if (const auto value = field_value(line, "forward_lanes"); value && lanes_may) {
      const auto lanes = parse_lanes(*value);
      if (!lanes) return std::nullopt;
      d.forward_lanes = *lanes;
      continue;
    }
    if (const auto value = field_value(line, "chunk"); value && chunk_may) {
      const auto chunk = *value == "0" ? std::optional<int64_t>(0) : parse_chunk(*value);
      if (!chunk) return std::nullopt;
      d.chunk = *chunk;
      continue;
    }
    if (const auto value = field_value(line, "stepped"); value && stepped_may) {
      if (*value != "yes" && *value != "no") return std::nullopt;
      d.stepped = *value == "yes";
      continue;
    }
    if (const auto value = field_value(line, "stepped_form"); value && form_may) {
      if (*value != "fused" && *value != "products") return std::nullopt;
      d.stepped_fused = *value == "fused";
      continue;
    }
    if (d.fused_timing) return std::nullopt; // nothing after the fused form's timing
    std::istringstream words(line);
    std::string kind, size, forward_ms, saving_ms, backward_ms, extra;
    if (!(words >> kind)) return std::nullopt;
    const bool stepped_kind = kind == kSteppedTiming || kind == kFusedTiming; // the stepped forms name no size
    if (d.stepped_timing && !stepped_kind) return std::nullopt;             // only the fused form's after the products'
    if ((!stepped_kind && !(words >> size)) ||
        !(words >> forward_ms >> saving_ms >> backward_ms) || words >> extra ||
        line != kind + (size.empty() ? "" : ' ' + size) + ' ' + forward_ms + ' ' + saving_ms + ' ' + backward_ms)
      return std::nullopt;
    const auto f = parse_duration(forward_ms), s = parse_duration(saving_ms), b = parse_duration(backward_ms);
    if (!f || !s || !b) return std::nullopt;
    if (kind == "timed" && d.chunked.empty() && d.lanes.empty()) {
      const auto k = parse_cluster(size);
      if (!k || std::any_of(d.timed.begin(), d.timed.end(), [&](const ChainTiming& t) { return t.cluster == *k; }))
        return std::nullopt;
      d.timed.push_back({*k, *f, *s, *b});
    } else if (kind == "chunked" && d.lanes.empty()) {
      const auto l = parse_chunk(size);
      if (!l || std::any_of(d.chunked.begin(), d.chunked.end(), [&](const ChunkTiming& t) { return t.chunk == *l; }))
        return std::nullopt;
      d.chunked.push_back({*l, *f, *s, *b});
    } else if (kind == "lanes" && !d.timed.empty()) {
      const auto g = parse_lanes(size);
      if (!g || std::any_of(d.lanes.begin(), d.lanes.end(), [&](const LanesTiming& t) { return t.lanes == *g; }))
        return std::nullopt;
      d.lanes.push_back({*g, *f, *s, *b});
    } else if (kind == kSteppedTiming && !d.stepped_timing) {
      d.stepped_timing = SteppedTiming{*f, *s, *b};
    } else if (kind == kFusedTiming) {
      d.fused_timing = SteppedTiming{*f, *s, *b};
    } else {
      return std::nullopt;
    }
  }
  // The clusters and the chunk chosen are among those timed; the stepped strategy is chosen only where it was timed,
  // by a decision that names the chunk (0); nothing but the stepped strategy was timed only where it was chosen (in
  // clusters of 1: no sequential kernel computes the problem).
  auto timed = [&](int k) {
    return std::any_of(d.timed.begin(), d.timed.end(), [&](const ChainTiming& t) { return t.cluster == k; });
  };
  const bool stepped = d.stepped.value_or(false);
  if (d.timed.empty()) {
    if (!stepped || d.forward_cluster != 1 || d.saving_cluster != 1 || !d.chunked.empty()) return std::nullopt;
  } else if (!timed(d.forward_cluster) || !timed(d.saving_cluster)) {
    return std::nullopt;
  }
  if (d.chunk && *d.chunk != 0 &&
      std::none_of(d.chunked.begin(), d.chunked.end(), [&](const ChunkTiming& t) { return t.chunk == *d.chunk; }))
    return std::nullopt;
  if (d.stepped && !d.chunk) return std::nullopt;
  const bool steps_timed = d.stepped_timing || d.fused_timing;
  if (stepped && (*d.chunk != 0 || !steps_timed)) return std::nullopt;
  if (steps_timed && !d.stepped) return std::nullopt;
  // A form is named wherever the fused form was timed (and where it was tried but computed a wrong score), and the
  // form named was timed.
  if (d.fused_timing && !d.stepped_fused) return std::nullopt;
  if (d.stepped_fused && (*d.stepped_fused ? !d.fused_timing : !d.stepped_timing)) return std::nullopt;
  if (d.forward_lanes &&
      std::none_of(d.lanes.begin(), d.lanes.end(), [&](const LanesTiming& t) { return t.lanes == *d.forward_lanes; }))
    return std::nullopt;
  // Lanes were timed only beside the strategies: a decision naming them names its chunk and whether stepped.
  if ((d.forward_lanes || !d.lanes.empty()) && (!d.chunk || !d.stepped)) return std::nullopt;
  return d;
}

std::optional<ChainDecision> load_chain_decision(DiskCache* disk, const std::string& key) {
  if (!disk) return std::nullopt;
  const std::optional<std::string> text = disk->get(key, kChainDecisionKind);
  if (!text) return std::nullopt;
  auto d = decode_chain_decision(*text);
  if (!d) disk->discard(key, kChainDecisionKind, *text, "does not parse as a chain decision");
  return d;
}

namespace {

std::mutex g_remembered_mutex;
std::map<std::string, std::optional<ChainDecision>> g_remembered; // by directory and key

} // namespace

std::optional<ChainDecision> remembered_chain_decision(DiskCache* disk, const std::string& key) {
  if (!disk) return std::nullopt;
  const std::string id = disk->dir() + '\n' + key;
  {
    std::lock_guard<std::mutex> lock(g_remembered_mutex);
    if (auto it = g_remembered.find(id); it != g_remembered.end()) return it->second;
  }
  std::optional<ChainDecision> d = load_chain_decision(disk, key);
  std::lock_guard<std::mutex> lock(g_remembered_mutex);
  return g_remembered.emplace(id, std::move(d)).first->second;
}

bool put_chain_decision(DiskCache& disk, const std::string& key, const ChainDecision& decision) {
  const bool kept = disk.put(key, kChainDecisionKind, encode_chain_decision(decision));
  std::lock_guard<std::mutex> lock(g_remembered_mutex);
  g_remembered[disk.dir() + '\n' + key] = decision;
  return kept;
}

void forget_chain_decisions() {
  std::lock_guard<std::mutex> lock(g_remembered_mutex);
  g_remembered.clear();
}

} // namespace jitbmm
