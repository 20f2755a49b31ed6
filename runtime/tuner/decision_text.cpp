#include "runtime/tuner/decision_text.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace jitbmm {

FieldReader::FieldReader(const std::string& text, std::size_t max_bytes)
    : in_(text), usable_(!text.empty() && text.size() <= max_bytes && text.back() == '\n') {}

std::optional<std::string> field_value(const std::string& line, const char* name) {
  const std::string prefix = std::string(name) + ' ';
  if (line.rfind(prefix, 0) != 0 || line.size() == prefix.size()) return std::nullopt;
  return line.substr(prefix.size());
}

std::optional<std::string> FieldReader::field(const char* name) {
  std::string line;
  if (!next(line)) return std::nullopt;
  return field_value(line, name);
}

bool FieldReader::next(std::string& line) { return usable_ && bool(std::getline(in_, line)); }

std::string format_duration(double value, int decimals) {
  char text[48];
  std::snprintf(text, sizeof text, "%.*f", decimals, value);
  return text;
}

std::optional<double> parse_duration(const std::string& text) {
  const std::size_t point = text.find('.');
  if (text.empty() || text.find_first_not_of("0123456789.") != std::string::npos || text.front() == '.' ||
      text.back() == '.' || (point != std::string::npos && text.find('.', point + 1) != std::string::npos))
    return std::nullopt;
  const double v = std::strtod(text.c_str(), nullptr);
  if (!std::isfinite(v)) return std::nullopt; // more digits than a double holds
  return v;
}

} // namespace jitbmm
