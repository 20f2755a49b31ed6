// jitbmm cache path|list|verify|clear: look after the disk cache ($JITBMM_CACHE_DIR, see README).
#include <cstdio>
#include <ctime>
#include <stdexcept>
#include <string>

#include "cache/disk_cache.hpp"
#include "cli/commands.hpp"

namespace jitbmm::cli {

int run_cache(int argc, char** argv) {
  if (argc != 3) throw std::invalid_argument("cache: expected one of path, list, verify, clear");
  const std::string what = argv[2];
  const std::string dir = DiskCache::default_dir();
  if (dir.empty()) throw std::runtime_error("no cache directory: set JITBMM_CACHE_DIR or HOME");
  if (what == "path") {
    std::printf("%s\n", dir.c_str());
    return 0;
  }
  DiskCache cache(dir);
  if (!cache.usable()) throw std::runtime_error("cache directory " + dir + " is not usable");
  if (what == "list") {
    uint64_t total = 0;
    std::printf("%-64s %-6s %10s  %s\n", "key", "kind", "bytes", "last use");
    for (const auto& e : cache.list()) {
      const std::time_t t = static_cast<std::time_t>(e.last_use / 1000000000);
      char when[32];
      std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", std::localtime(&t));
      std::printf("%-64s %-6s %10llu  %s\n", e.key.c_str(), e.kind.c_str(), static_cast<unsigned long long>(e.bytes),
                  when);
      total += e.bytes;
    }
    std::printf("%llu bytes in %s (cap %llu)\n", static_cast<unsigned long long>(total), dir.c_str(),
                static_cast<unsigned long long>(cache.cap_bytes()));
    return 0;
  }
  if (what == "verify") {
    const int damaged = cache.verify();
    std::printf("%zu entries valid, %d damaged (moved aside as .bad)\n", cache.list().size(), damaged);
    return damaged == 0 ? 0 : 1;
  }
  if (what == "clear") {
    cache.clear();
    std::printf("cleared %s\n", dir.c_str());
    return 0;
  }
  throw std::invalid_argument("cache: unknown action '" + what + "' (expected path, list, verify or clear)");
}

} // namespace jitbmm::cli
