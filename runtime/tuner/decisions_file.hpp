// A decisions file: stored decisions with their keys, as `jitbmm tune --export` writes them, `--import` reads them
// and jitbmm ships them (tuning/shipped/, embedded in the library: shipped_decisions.hpp). A site tunes once and
// shares the file; each decision's key still names the GPU, the driver's major version, NVRTC and jitbmm, so a
// decision reaches only the problems and machines it was tuned for.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "runtime/tuner/chain_decisions.hpp"
#include "runtime/tuner/tuning_db.hpp"

namespace jitbmm {

class DiskCache;

// One stored decision as the disk cache keeps it: its key, its kind ("tune" for a product's, "chaintune" for a
// chain's) and its text (encode_decision, encode_chain_decision).
struct DecisionEntry {
  std::string key, kind, text;
};

// The file: a first line "jitbmm-decisions 1", comment lines starting with '#', then per entry a line
// "entry KIND KEY LINES" followed by that many lines of the decision's text.
std::string encode_decisions_file(const std::vector<DecisionEntry>& entries, const std::string& comment);
// Strict: every line is accounted for, keys are 64 hex digits and appear once, each entry's text decodes as its kind
// (the kind's own decoder). Any defect throws std::invalid_argument naming `what` (the file) and the line.
std::vector<DecisionEntry> decode_decisions_file(const std::string& text, const std::string& what);

// Decisions read from a file, by key.
struct DecisionSet {
  std::map<std::string, Decision> products;
  std::map<std::string, ChainDecision> chains;
  bool empty() const { return products.empty() && chains.empty(); }
};
DecisionSet decision_set(const std::vector<DecisionEntry>& entries); // entries already checked by the decoder
// The bucket decisions of any of these families.
std::vector<Decision> set_buckets(const DecisionSet& set, const std::vector<std::string>& families);

// Every decision of the cache that decodes (one that does not is moved aside, as every reader does).
std::vector<DecisionEntry> cache_decisions(DiskCache& disk);
// What import_decisions did: entries stored, and entries left alone because the cache already holds a decision
// under their key (one tuned on this machine wins over one brought in).
struct ImportReport {
  int stored = 0, kept = 0;
};
// Stores `entries` in `disk`, each product decision marked "imported from <source>".
ImportReport import_decisions(DiskCache& disk, const std::vector<DecisionEntry>& entries, const std::string& source);

} // namespace jitbmm
