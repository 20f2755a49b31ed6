// jitbmm cache path|list|verify|clear: look after the disk cache (docs/caching-and-tuning.md).
#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <stdexcept>
#include <string>

#include "cache/disk_cache.hpp"
#include "cli/commands.hpp"
#include "runtime/autotune.hpp"
#include "runtime/tuner/chain_decisions.hpp"

namespace jitbmm::cli {

namespace {

// What an entry holds, from its own content: a cubin's kernel name (from the source kept beside it), a tuning
// decision's problem, scope and winner, a chain decision's bucket and clusters. Never trusted beyond display:
// damaged entries just say so (verify moves them aside), and nothing is changed.
std::string describe_entry(const DiskCache& cache, const DiskCache::Entry& e) {
  if (e.kind == "cubin") {
    const std::optional<std::string> source = cache.get_source(e.key);
    const std::string first = source ? source->substr(0, source->find('\n')) : "";
    const auto at = first.find("Kernel ");
    return at == std::string::npos ? "(kernel: source not kept)" : "kernel " + first.substr(at + 7);
  }
  if (e.kind == kDecisionKind) {
    const auto text = cache.peek(e.key, kDecisionKind);
    const auto d = text ? decode_decision(*text) : std::nullopt;
    if (!d) return "(unreadable decision)";
    std::string spec = to_string(d->spec);
    spec = spec.substr(spec.find("strategy="));
    return "tuned " + d->problem.substr(0, d->problem.find(" a(")) + (d->bucket ? " bucket " : " exact ") +
           to_string(d->shape) + ": " + spec;
  }
  if (e.kind == kChainDecisionKind) {
    const auto text = cache.peek(e.key, kChainDecisionKind);
    const auto d = text ? decode_chain_decision(*text) : std::nullopt;
    if (!d) return "(unreadable chain decision)";
    const std::string strategy = !d->chunk    ? ""
                                 : *d->chunk ? ", chunks of " + std::to_string(*d->chunk)
                                             : ", sequential";
    const std::string lanes =
        d->forward_lanes ? " in groups of " + std::to_string(*d->forward_lanes) + " lanes" : std::string();
    return "tuned chain " + d->problem + ": clusters " + std::to_string(d->forward_cluster) + " (forward" + lanes +
           "), " + std::to_string(d->saving_cluster) + " (saving)" + strategy;
  }
  return "";
}

// Whether `dir` exists, as anything: the cache commands open no directory they would have to create.
bool exists(const std::string& dir) {
  struct stat st {};
  return ::lstat(dir.c_str(), &st) == 0;
}

} // namespace

std::string cache_dir_line() {
  const std::string dir = DiskCache::default_dir();
  if (!DiskCache::enabled_from_env()) // the directory alone would read as one in use
    return (dir.empty() ? "no directory" : dir) + " (not used: JITBMM_CACHE=" + std::getenv("JITBMM_CACHE") +
           " turns the disk cache off)";
  if (dir.empty()) throw std::runtime_error("no cache directory: set JITBMM_CACHE_DIR or HOME");
  const uint64_t cap = DiskCache::cap_from_env(); // a malformed cap fails every plan: not a cache in use
  if (exists(dir)) {
    const DiskCache cache(dir, cap);
    if (!cache.usable()) return dir + " (not used: it is " + cache.refused() + ")";
  }
  return dir;
}

int run_cache(int argc, char** argv) {
  if (argc != 3) throw std::invalid_argument("cache: expected one of path, list, verify, clear");
  const std::string what = argv[2];
  // The cache's variables are read by every subcommand, so that a bad value is an error whichever is asked for.
  DiskCache::enabled_from_env();
  const uint64_t cap = DiskCache::cap_from_env();
  if (what == "path") {
    std::printf("%s\n", cache_dir_line().c_str());
    return 0;
  }
  const std::string dir = DiskCache::default_dir();
  if (dir.empty()) throw std::runtime_error("no cache directory: set JITBMM_CACHE_DIR or HOME");
  if (!DiskCache::enabled_from_env())
    std::printf("note: JITBMM_CACHE=%s: jitbmm uses no disk cache; %s is the directory it would use\n",
                std::getenv("JITBMM_CACHE"), dir.c_str());
  if (!exists(dir)) { // nothing stored yet, and nothing to make
    if (what == "list")
      std::printf("%-16s %-9s %10s  %-19s  %s\n0 bytes in %s (no cache there yet)\n", "key", "kind", "bytes",
                  "last use", "what", dir.c_str());
    else if (what == "verify")
      std::printf("0 entries valid, 0 damaged (no cache at %s yet)\n", dir.c_str());
    else if (what == "clear")
      std::printf("nothing to clear: no cache at %s\n", dir.c_str());
    else
      throw std::invalid_argument("cache: unknown action '" + what + "' (expected path, list, verify or clear)");
    return 0;
  }
  DiskCache cache(dir, cap);
  // An untrusted directory is never listed, verified or cleared: its entries mean nothing to jitbmm.
  if (!cache.usable())
    throw std::runtime_error("cache directory " + dir + " is " + cache.refused() +
                             (cache.refused().rfind("not trusted", 0) == 0
                                  ? ": jitbmm never loads its entries or writes to it (make it yours, without group or "
                                    "other write permission, or choose another JITBMM_CACHE_DIR)"
                                  : ""));
  if (what == "list") {
    uint64_t total = 0;
    std::printf("%-16s %-9s %10s  %-19s  %s\n", "key", "kind", "bytes", "last use", "what");
    for (const auto& e : cache.list()) {
      const std::time_t t = static_cast<std::time_t>(e.last_use / 1000000000);
      char when[32];
      std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", std::localtime(&t));
      std::printf("%-16s %-9s %10llu  %-19s  %s\n", e.key.substr(0, 16).c_str(), e.kind.c_str(),
                  static_cast<unsigned long long>(e.bytes), when, describe_entry(cache, e).c_str());
      total += e.bytes;
    }
    std::printf("%llu bytes in %s (cap %llu)\n", static_cast<unsigned long long>(total), dir.c_str(),
                static_cast<unsigned long long>(cache.cap_bytes()));
    return 0;
  }
  if (what == "verify") {
    const int damaged = cache.verify();
    if (cache.read_only()) // damaged entries stay where they are, among the listed ones
      std::printf("%d damaged (left in place: the directory is read-only)\n", damaged);
    else
      std::printf("%zu entries valid, %d damaged (moved aside as .bad)\n", cache.list().size(), damaged);
    return damaged == 0 ? 0 : 1;
  }
  if (what == "clear") {
    if (cache.read_only()) throw std::runtime_error("cache directory " + dir + " is read-only: nothing was cleared");
    cache.clear();
    std::printf("cleared %s\n", dir.c_str());
    return 0;
  }
  throw std::invalid_argument("cache: unknown action '" + what + "' (expected path, list, verify or clear)");
}

} // namespace jitbmm::cli
