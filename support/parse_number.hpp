// The one way text becomes a number in jitbmm (environment variables, CLI flags, spec text): the whole string must
// be a decimal integer within [lo, hi], else std::invalid_argument naming where the text came from
// ("JITBMM_DEVICE: expected an integer in [0, 2147483647], got '4294967296'").
#pragma once

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>

namespace jitbmm {

inline int64_t parse_integer(const std::string& text, const std::string& what,
                             int64_t lo = std::numeric_limits<int64_t>::min(),
                             int64_t hi = std::numeric_limits<int64_t>::max()) {
  const auto fail = [&]() -> int64_t {
    throw std::invalid_argument(what + ": expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                                "], got '" + text + "'");
  };
  // strtoll alone accepts leading blanks and a '+'; neither is a number here.
  if (text.empty() || !(text[0] == '-' || (text[0] >= '0' && text[0] <= '9'))) return fail();
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (errno == ERANGE || end != text.c_str() + text.size() || v < lo || v > hi) return fail();
  return v;
}

inline uint64_t parse_unsigned(const std::string& text, const std::string& what,
                               uint64_t hi = std::numeric_limits<uint64_t>::max()) {
  const auto fail = [&]() -> uint64_t {
    throw std::invalid_argument(what + ": expected an integer in [0, " + std::to_string(hi) + "], got '" + text + "'");
  };
  if (text.empty() || !(text[0] >= '0' && text[0] <= '9')) return fail(); // strtoull would negate "-1"
  errno = 0;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (errno == ERANGE || end != text.c_str() + text.size() || v > hi) return fail();
  return v;
}

inline int parse_int(const std::string& text, const std::string& what, int lo = std::numeric_limits<int>::min(),
                     int hi = std::numeric_limits<int>::max()) {
  return static_cast<int>(parse_integer(text, what, lo, hi));
}

// An environment variable: nothing when unset or empty, else parsed as above (the error names the variable).
inline std::optional<int64_t> env_integer(const char* name, int64_t lo, int64_t hi) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  return parse_integer(v, name, lo, hi);
}

} // namespace jitbmm
