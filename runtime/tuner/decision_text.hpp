// The line-based text every stored decision is written in (tuning_db.hpp, chain_decisions.hpp): whole lines of
// `name value`, read in order by a strict reader, and durations written and read one way.
#pragma once

#include <cstddef>
#include <optional>
#include <sstream>
#include <string>

namespace jitbmm {

// The value of `line` when it reads `name value` (a non-empty value); nothing otherwise. What FieldReader::field reads,
// for the optional lines a decoder meets in its loop over the rest.
std::optional<std::string> field_value(const std::string& line, const char* name);

// Reads a decision's lines in order; every accessor consumes one line.
class FieldReader {
public:
  // Nothing to read unless `text` is whole lines (non-empty, ending in '\n') of at most `max_bytes`.
  FieldReader(const std::string& text, std::size_t max_bytes);
  bool usable() const { return usable_; }
  // The value of the next line when it reads `name value` (a non-empty value); nothing otherwise.
  std::optional<std::string> field(const char* name);
  // The next line, whatever it holds; false at the end.
  bool next(std::string& line);

private:
  std::istringstream in_;
  bool usable_;
};

// A duration as decisions write it: seconds with 3 decimals, milliseconds with 5 ("%.3f", "%.5f").
std::string format_duration(double value, int decimals);
// One so written: digits with at most one point, so no sign, exponent, blank, nan or inf; nothing otherwise.
std::optional<double> parse_duration(const std::string& text);

} // namespace jitbmm
