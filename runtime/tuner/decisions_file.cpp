#include "runtime/tuner/decisions_file.hpp"

#include <algorithm>
#include <chrono>
#include <set>
#include <sstream>
#include <stdexcept>

#include "cache/disk_cache.hpp"

namespace jitbmm {

namespace {

constexpr const char* kHeader = "jitbmm-decisions 1";
constexpr std::size_t kMaxEntryLines = 4096;

// "" when `text` decodes as a decision of `kind` stored under `key`, else what is wrong. (A chain decision's key
// hashes its device, which its text does not name: only its text is checked.)
std::string defect(const std::string& kind, const std::string& key, const std::string& text) {
  if (kind == kChainDecisionKind) return decode_chain_decision(text) ? "" : "the entry does not decode as a chain decision";
  const auto d = decode_decision(text);
  if (!d) return "the entry does not decode as a product decision";
  return decision_key(*d) == key ? "" : "the entry's family, scope or shape is not what its key stands for";
}

std::size_t line_count(const std::string& text) {
  std::size_t n = 0;
  for (char c : text) n += c == '\n';
  return n;
}

} // namespace

std::string encode_decisions_file(const std::vector<DecisionEntry>& entries, const std::string& comment) {
  std::ostringstream os;
  os << kHeader << '\n';
  std::istringstream lines(comment);
  for (std::string line; std::getline(lines, line);) os << "# " << line << '\n';
  for (const DecisionEntry& e : entries)
    os << "entry " << e.kind << ' ' << e.key << ' ' << line_count(e.text) << '\n' << e.text;
  return os.str();
}

std::vector<DecisionEntry> decode_decisions_file(const std::string& text, const std::string& what) {
  std::istringstream in(text);
  std::string line;
  std::size_t number = 0;
  auto fail = [&](const std::string& why) {
    throw std::invalid_argument(what + ": line " + std::to_string(number) + ": " + why);
  };
  auto next = [&]() {
    if (!std::getline(in, line)) return false;
    if (!line.empty() && line.back() == '\r') line.pop_back(); // a file saved with Windows line ends
    ++number;
    return true;
  };
  if (!next() || line != kHeader) fail(std::string("expected '") + kHeader + "' (not a jitbmm decisions file)");
  if (!text.empty() && text.back() != '\n') fail("the file does not end with a newline (cut short?)");
  std::vector<DecisionEntry> entries;
  std::set<std::string> keys;
  while (next()) {
    if (line.rfind("#", 0) == 0 && entries.empty()) continue; // comments come first
    std::istringstream words(line);
    std::string word, kind, key, extra;
    std::size_t count = 0;
    if (!(words >> word >> kind >> key >> count) || word != "entry" || (words >> extra) ||
        line != "entry " + kind + ' ' + key + ' ' + std::to_string(count))
      fail("expected 'entry KIND KEY LINES', got '" + line.substr(0, 120) + "'");
    if (kind != kDecisionKind && kind != kChainDecisionKind) fail("unknown kind '" + kind + "' (expected tune or chaintune)");
    if (!is_cache_key(key)) fail("the key is not 64 hexadecimal digits");
    if (!keys.insert(key).second) fail("the key " + key.substr(0, 16) + " appears twice");
    if (count == 0 || count > kMaxEntryLines) fail("an entry of " + std::to_string(count) + " lines");
    const std::size_t first = number;
    std::string body;
    for (std::size_t i = 0; i < count; ++i) {
      if (!next()) fail("the entry of line " + std::to_string(first) + " is cut short");
      body += line + '\n';
    }
    if (const std::string why = defect(kind, key, body); !why.empty()) {
      number = first;
      fail(why);
    }
    entries.push_back({key, kind, body});
  }
  return entries;
}

DecisionSet decision_set(const std::vector<DecisionEntry>& entries) {
  DecisionSet set;
  for (const DecisionEntry& e : entries) {
    if (e.kind == kDecisionKind) {
      if (auto d = decode_decision(e.text)) set.products.emplace(e.key, std::move(*d));
    } else if (auto d = decode_chain_decision(e.text)) {
      set.chains.emplace(e.key, std::move(*d));
    }
  }
  return set;
}

std::vector<Decision> set_buckets(const DecisionSet& set, const std::vector<std::string>& families) {
  std::vector<Decision> out;
  for (const auto& [key, d] : set.products)
    if (d.bucket && std::find(families.begin(), families.end(), d.family) != families.end()) out.push_back(d);
  return out;
}

std::vector<DecisionEntry> cache_decisions(DiskCache& disk) {
  std::vector<DecisionEntry> out;
  for (const DiskCache::Entry& e : disk.list()) {
    if (e.kind == kDecisionKind) {
      if (load_decision(&disk, e.key))
        if (auto text = disk.get(e.key, e.kind)) out.push_back({e.key, e.kind, *text});
    } else if (e.kind == kChainDecisionKind) {
      if (load_chain_decision(&disk, e.key))
        if (auto text = disk.get(e.key, e.kind)) out.push_back({e.key, e.kind, *text});
    }
  }
  return out;
}

ImportReport import_decisions(DiskCache& disk, const std::vector<DecisionEntry>& entries, const std::string& source) {
  ImportReport report;
  for (const DecisionEntry& e : entries) {
    // Under the key's machine-wide lock, which a process tuning it holds until it has stored its decision: a decision
    // tuned here is kept, whenever its tuning ends. One still being tuned past the wait keeps its tuning's too.
    const KeyLock lock = disk.lock(e.key, std::chrono::seconds(60));
    if (lock.state() == KeyLock::State::timed_out || disk.get(e.key, e.kind)) {
      ++report.kept;
      continue;
    }
    std::string text = e.text;
    if (e.kind == kDecisionKind) {
      Decision d = *decode_decision(e.text); // decode_decisions_file checked it
      d.origin = "imported from " + source;
      text = encode_decision(d);
    }
    if (!disk.put(e.key, e.kind, text))
      throw std::runtime_error("importing decisions: could not write to the cache " + disk.dir());
    ++report.stored;
  }
  return report;
}

} // namespace jitbmm
