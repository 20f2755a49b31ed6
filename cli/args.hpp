// A small parser for the jitbmm CLI's flags, `--key value` or `--key=value`: unknown flags are errors, never ignored;
// so are a flag given twice, a flag whose value is missing (nothing follows, another --flag does, or nothing follows
// the '='), a switch given a value, and a flag the chosen mode does not read.
#pragma once

#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace jitbmm::cli {

class Args {
public:
  // `flags` take a value; `switches` do not.
  Args(int argc, char** argv, int first, const std::set<std::string>& flags, const std::set<std::string>& switches) {
    for (int i = first; i < argc; ++i) {
      const std::string arg = argv[i];
      const std::size_t eq = arg.rfind("--", 0) == 0 ? arg.find('=') : std::string::npos;
      const std::string key = arg.substr(0, eq);
      if (!switches.count(key) && !flags.count(key)) throw std::invalid_argument("unknown argument '" + key + "'");
      if (values_.count(key)) throw std::invalid_argument(key + ": given twice");
      if (switches.count(key)) {
        if (eq != std::string::npos) throw std::invalid_argument(key + ": takes no value, got '" + arg + "'");
        values_[key] = "1";
      } else if (eq != std::string::npos) {
        if (eq + 1 == arg.size()) throw std::invalid_argument(key + ": missing value");
        values_[key] = arg.substr(eq + 1);
      } else {
        // A value never starts with "--" (negative numbers have one dash), so "--shape --emit cuda" is a missing
        // value, not a shape called "--emit".
        if (i + 1 >= argc || std::string(argv[i + 1]).rfind("--", 0) == 0)
          throw std::invalid_argument(key + ": missing value");
        values_[key] = argv[++i];
      }
      order_.push_back(key);
    }
  }
  bool has(const std::string& key) const { return values_.count(key) != 0; }
  std::string get(const std::string& key, const std::string& fallback) const {
    auto it = values_.find(key);
    return it == values_.end() ? fallback : it->second;
  }
  // Flags and switches in the order given.
  const std::vector<std::string>& given() const { return order_; }

  // A flag given that `who` (a command or mode, e.g. "bench --backward") does not read is an error: a flag that
  // silently changes nothing reads as if it had worked.
  void require_only(const std::set<std::string>& used, const std::string& who) const {
    for (const std::string& key : order_)
      if (!used.count(key)) throw std::invalid_argument(key + ": not used by " + who);
  }

private:
  std::map<std::string, std::string> values_;
  std::vector<std::string> order_;
};

} // namespace jitbmm::cli
