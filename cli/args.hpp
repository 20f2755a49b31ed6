// A small --key value parser for the jitbmm CLI: unknown flags are errors, never ignored.
#pragma once

#include <map>
#include <set>
#include <stdexcept>
#include <string>

namespace jitbmm::cli {

class Args {
public:
  // `flags` take a value; `switches` do not.
  Args(int argc, char** argv, int first, const std::set<std::string>& flags, const std::set<std::string>& switches) {
    for (int i = first; i < argc; ++i) {
      const std::string key = argv[i];
      if (switches.count(key)) {
        values_[key] = "1";
      } else if (flags.count(key)) {
        if (i + 1 >= argc) throw std::invalid_argument(key + ": needs a value");
        values_[key] = argv[++i];
      } else {
        throw std::invalid_argument("unknown argument '" + key + "'");
      }
    }
  }
  bool has(const std::string& key) const { return values_.count(key) != 0; }
  std::string get(const std::string& key, const std::string& fallback) const {
    auto it = values_.find(key);
    return it == values_.end() ? fallback : it->second;
  }

private:
  std::map<std::string, std::string> values_;
};

} // namespace jitbmm::cli
