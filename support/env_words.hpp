// How a jitbmm environment variable that names one of a few words is read: in any case (JITBMM_TUNE=Bucket,
// JITBMM_CACHE=OFF, JITBMM_LOG=Debug), so that no variable is stricter than another. A spec's fields (strategy,
// dtype, ...) are a codec, not an environment, and keep their one spelling.
#pragma once

#include <algorithm>
#include <cctype>
#include <cstddef>
#include <stdexcept>
#include <string>

#include "support/enum_names.hpp"

namespace jitbmm {

// `text` as a table's names spell it (they are lower case).
inline std::string env_word(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::tolower(c); });
  return text;
}

// The row of `rows` named `text` in any case, or nullptr.
template <class Rows> auto find_env_word(const Rows& rows, const std::string& text) {
  return find_named(rows, env_word(text));
}

// The value `text` names in any case; else std::invalid_argument naming `variable` and the words it takes.
template <class E, std::size_t N>
E parse_env_enum(const EnumName<E> (&table)[N], const std::string& text, const char* variable) {
  if (const auto* row = find_env_word(table, text)) return row->value;
  throw_unsupported(variable, text, table);
}

// A switch: off, 0, false or no; on, 1, true or yes (any case). Anything else throws std::invalid_argument naming
// `variable` and `text`.
inline bool parse_env_switch(const std::string& text, const char* variable) {
  static constexpr EnumName<bool> kSwitchWords[] = {{false, "off"}, {false, "0"},   {false, "false"}, {false, "no"},
                                                    {true, "on"},   {true, "1"},    {true, "true"},   {true, "yes"}};
  if (const auto* row = find_env_word(kSwitchWords, text)) return row->value;
  throw std::invalid_argument(std::string(variable) + ": expected on or off (or 1/0, true/false, yes/no), got '" +
                              text + "'");
}

} // namespace jitbmm
