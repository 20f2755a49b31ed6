#include "support/host_memory.hpp"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>

namespace jitbmm {

namespace {

// A number of bytes in a cgroup v2 file ("max": no limit).
std::optional<std::size_t> cgroup_bytes(const char* path) {
  std::ifstream in(path);
  std::string text;
  if (!(in >> text) || text == "max") return std::nullopt;
  try {
    return static_cast<std::size_t>(std::stoull(text));
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

} // namespace

std::optional<std::size_t> host_available_bytes() {
  std::optional<std::size_t> available;
  std::ifstream meminfo("/proc/meminfo");
  for (std::string line; std::getline(meminfo, line);) {
    std::istringstream fields(line);
    std::string name;
    unsigned long long kib = 0;
    if (fields >> name >> kib && name == "MemAvailable:") {
      available = static_cast<std::size_t>(kib) * 1024;
      break;
    }
  }
  const auto limit = cgroup_bytes("/sys/fs/cgroup/memory.max"), used = cgroup_bytes("/sys/fs/cgroup/memory.current");
  if (limit && used) {
    const std::size_t room = *limit > *used ? *limit - *used : 0;
    available = available ? std::min(*available, room) : room;
  }
  return available;
}

} // namespace jitbmm
