// Chain decisions: their keys, their line-based text and their place in the disk cache.
#include "runtime/tuner/chain_decisions.hpp"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "cache/disk_cache.hpp"
#include "generator/chain_source.hpp"
#include "support/checked_size.hpp"
#include "support/sha256.hpp"

namespace jitbmm {

namespace {

constexpr const char* kKind = "chaintune"; // the disk cache's kind for chain decisions

bool all_zero(const int64_t* values, int n) {
  return std::all_of(values, values + n, [](int64_t v) { return v == 0; });
}

// A cluster size a decision may name, or nothing.
std::optional<int> parse_cluster(const std::string& text) {
  for (int k = 1; k <= kMaxChainCluster; k *= 2)
    if (text == std::to_string(k)) return k;
  return std::nullopt;
}

std::string duration(double ms) {
  char text[32];
  std::snprintf(text, sizeof text, "%.5f", ms);
  return text;
}

} // namespace

std::string chain_bucket_text(const ChainProblem& p) {
  const bool contiguous = all_zero(p.strides, 4) && all_zero(p.emission_strides, 3) &&
                          all_zero(p.transition_strides, 3) && all_zero(p.initial_strides, 2);
  std::ostringstream os;
  os << semiring_info(p.semiring).name << ' ' << dtype_info(p.dtype).name << ' '
     << (p.form == ChainForm::hmm ? "hmm" : "crf") << " C=" << p.C << " B<=" << checked_round_up_pow2(p.B, "chain.B")
     << " T<=" << checked_round_up_pow2(p.T, "chain.T") << (p.with_lengths ? " lengths" : "")
     << (p.batched_transitions ? " batched_transitions" : "") << (p.batched_initial ? " batched_initial" : "")
     << (contiguous ? " contiguous" : " strided");
  return os.str();
}

std::string chain_tuning_key(const ChainProblem& problem, const TuningDevice& device) {
  return sha256_hex(tuning_device_text(device) + "chain " + chain_bucket_text(problem) + '\n');
}

ChainDecision choose_chain_clusters(const ChainProblem& problem, std::vector<ChainTiming> timed, double seconds) {
  if (timed.empty()) throw std::invalid_argument("choose_chain_clusters: no cluster size was timed");
  std::sort(timed.begin(), timed.end(),
            [](const ChainTiming& a, const ChainTiming& b) { return a.cluster < b.cluster; });
  ChainDecision d;
  d.problem = chain_bucket_text(problem);
  d.seconds = seconds;
  const ChainTiming* fastest = &timed.front();
  const ChainTiming* fastest_saving = &timed.front();
  for (const ChainTiming& t : timed) {
    if (t.forward_ms < fastest->forward_ms) fastest = &t;
    if (t.saving_ms + t.backward_ms < fastest_saving->saving_ms + fastest_saving->backward_ms) fastest_saving = &t;
  }
  d.forward_cluster = fastest->cluster;
  // max_plus has no saving forward: its path comes from the forward's own launch, so one size serves both.
  d.saving_cluster = problem.semiring == Semiring::log ? fastest_saving->cluster : fastest->cluster;
  d.timed = std::move(timed);
  return d;
}

std::string encode_chain_decision(const ChainDecision& d) {
  std::ostringstream os;
  os << "chain " << d.problem << '\n'
     << "forward_cluster " << d.forward_cluster << '\n'
     << "saving_cluster " << d.saving_cluster << '\n';
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%.3f", d.seconds);
  os << "seconds " << seconds << '\n';
  for (const ChainTiming& t : d.timed)
    os << "timed " << t.cluster << ' ' << duration(t.forward_ms) << ' ' << duration(t.saving_ms) << ' '
       << duration(t.backward_ms) << '\n';
  return os.str();
}

std::optional<ChainDecision> decode_chain_decision(const std::string& text) {
  if (text.size() > 16 * 1024 || text.empty() || text.back() != '\n') return std::nullopt; // whole lines only
  std::istringstream in(text);
  std::string line;
  auto field = [&](const char* name) -> std::optional<std::string> {
    const std::string prefix = std::string(name) + ' ';
    if (!std::getline(in, line) || line.rfind(prefix, 0) != 0 || line.size() == prefix.size()) return std::nullopt;
    return line.substr(prefix.size());
  };
  ChainDecision d;
  const auto problem = field("chain"), forward = field("forward_cluster"), saving = field("saving_cluster"),
             seconds = field("seconds");
  if (!problem || !forward || !saving || !seconds) return std::nullopt;
  const auto forward_cluster = parse_cluster(*forward), saving_cluster = parse_cluster(*saving);
  const auto tuned_for = parse_duration(*seconds);
  if (!forward_cluster || !saving_cluster || !tuned_for) return std::nullopt;
  d.problem = *problem;
  d.forward_cluster = *forward_cluster;
  d.saving_cluster = *saving_cluster;
  d.seconds = *tuned_for;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string kind, cluster, forward_ms, saving_ms, backward_ms, extra;
    if (!(words >> kind >> cluster >> forward_ms >> saving_ms >> backward_ms) || words >> extra || kind != "timed" ||
        line != "timed " + cluster + ' ' + forward_ms + ' ' + saving_ms + ' ' + backward_ms)
      return std::nullopt;
    const auto k = parse_cluster(cluster);
    const auto f = parse_duration(forward_ms), s = parse_duration(saving_ms), b = parse_duration(backward_ms);
    if (!k || !f || !s || !b ||
        std::any_of(d.timed.begin(), d.timed.end(), [&](const ChainTiming& t) { return t.cluster == *k; }))
      return std::nullopt;
    d.timed.push_back({*k, *f, *s, *b});
  }
  return d;
}

std::optional<ChainDecision> load_chain_decision(DiskCache* disk, const std::string& key) {
  if (!disk) return std::nullopt;
  const std::optional<std::string> text = disk->get(key, kKind);
  if (!text) return std::nullopt;
  auto d = decode_chain_decision(*text);
  if (!d) disk->discard(key, kKind, *text, "does not parse as a chain decision");
  return d;
}

void put_chain_decision(DiskCache& disk, const std::string& key, const ChainDecision& decision) {
  disk.put(key, kKind, encode_chain_decision(decision));
}

} // namespace jitbmm
