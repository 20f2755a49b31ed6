#include "support/process_share.hpp"

#include <sched.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>

#include "support/parse_number.hpp"

namespace jitbmm {

namespace {

std::optional<int> launcher_integer(const char* name, int lo) {
  const char* text = std::getenv(name);
  if (!text || !*text) return std::nullopt;
  try {
    return static_cast<int>(parse_integer(text, name, lo, std::numeric_limits<int>::max()));
  } catch (const std::invalid_argument& e) {
    static std::mutex mutex;
    // never destroyed: a background build may still use it as the process exits
    static std::set<std::string>& warned = *new std::set<std::string>();
    std::lock_guard<std::mutex> lock(mutex);
    if (warned.insert(name).second) std::fprintf(stderr, "jitbmm: warning: %s; ignoring it\n", e.what());
    return std::nullopt;
  }
}

} // namespace

std::optional<int> global_rank() { return launcher_integer("RANK", 0); }
std::optional<int> local_rank() { return launcher_integer("LOCAL_RANK", 0); }
int local_world_size() { return launcher_integer("LOCAL_WORLD_SIZE", 1).value_or(1); }

bool is_local_leader() { return local_rank().value_or(0) == 0; }

std::string rank_tag() {
  if (const auto rank = global_rank()) return "rank " + std::to_string(*rank);
  if (const auto rank = local_rank()) return "rank " + std::to_string(*rank);
  return "";
}

namespace {

int online_cpus() { return std::max(1, static_cast<int>(std::thread::hardware_concurrency())); }

// The CPUs of this process's affinity mask when it is narrower than the machine (a launcher that binds ranks to
// cores: already this process's share), else nothing.
std::optional<int> narrowed_mask() {
  cpu_set_t set;
  CPU_ZERO(&set);
  const int allowed = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
  if (allowed > 0 && allowed < online_cpus()) return allowed;
  return std::nullopt;
}

} // namespace

unsigned usable_cpus() { return static_cast<unsigned>(narrowed_mask().value_or(online_cpus())); }

unsigned compile_threads() {
  if (const auto mask = narrowed_mask()) return static_cast<unsigned>(*mask);
  return static_cast<unsigned>(std::max(1, online_cpus() / local_world_size()));
}

} // namespace jitbmm
