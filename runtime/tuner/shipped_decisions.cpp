#include "runtime/tuner/shipped_decisions.hpp"

#include <stdexcept>

#include <cstdlib>

#include "support/env_words.hpp"

namespace jitbmm {

bool shipped_decisions_enabled() {
  const char* v = std::getenv("JITBMM_SHIPPED_DECISIONS");
  return !v || !*v || parse_env_switch(v, "JITBMM_SHIPPED_DECISIONS");
}

const DecisionSet& shipped_decisions() {
  // never destroyed: a background build may still use it as the process exits
  static const DecisionSet& none = *new DecisionSet();
  if (!shipped_decisions_enabled()) return none;
  static const DecisionSet& all = *new DecisionSet([] {
    std::vector<DecisionEntry> entries;
    for (const ShippedFile& f : shipped_files()) {
      try {
        for (DecisionEntry& e : decode_decisions_file(f.text, std::string("tuning/shipped/") + f.name))
          entries.push_back(std::move(e));
      } catch (const std::invalid_argument& e) {
        throw std::logic_error(std::string("jitbmm was built with a damaged shipped decisions file: ") + e.what());
      }
    }
    return decision_set(entries);
  }());
  return all;
}

} // namespace jitbmm
