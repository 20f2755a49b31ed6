#include "support/env_switch.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace jitbmm {

bool env_switch(const char* name, bool default_value) {
  const char* v = std::getenv(name);
  if (!v || !*v) return default_value;
  std::string word = v;
  std::transform(word.begin(), word.end(), word.begin(), [](unsigned char c) { return std::tolower(c); });
  for (const char* off : {"off", "0", "false", "no"})
    if (word == off) return false;
  for (const char* on : {"on", "1", "true", "yes"})
    if (word == on) return true;
  throw std::invalid_argument(std::string(name) + ": expected on or off (or 1/0, true/false, yes/no), got '" + v + "'");
}

} // namespace jitbmm
