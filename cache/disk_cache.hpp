// The disk cache: compiled cubins (and, later, tuning decisions) kept across processes.
//
// Location: $JITBMM_CACHE_DIR, else $XDG_CACHE_HOME/jitbmm, else ~/.cache/jitbmm (created 0700). Each entry is one
// self-describing file, <key>.<kind>: magic, format version, the key, payload length, SHA-256 of the payload, then
// the payload (<key>.cu beside a cubin is its plain source, for reading only). It is written to a unique temp file in
// the same directory, flushed, and renamed into place, so a reader sees a whole entry or none and concurrent writers
// are safe. A truncated, corrupted or foreign entry is a miss: it is moved aside (<file>.bad), with one warning. An
// unusable directory turns the cache off for the process, with one warning: results never depend on the cache. Size is
// capped (least recently used evicted).
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace jitbmm {

// Everything that changes a compiled binary. The key is the SHA-256 of all of it.
struct CubinKeyParts {
  std::string source;
  std::vector<std::string> options;
  std::string nvrtc_version;
  std::string arch;       // "sm_90"
  int driver_version = 0; // CUDA driver version (e.g. 13000)
  std::string jitbmm_version;
};
std::string cubin_key(const CubinKeyParts& parts); // 64 hex digits

constexpr uint32_t kCacheFormatVersion = 1;
constexpr uint64_t kDefaultCacheCapBytes = uint64_t(1) << 30;

class DiskCache {
public:
  // $JITBMM_CACHE_DIR, $XDG_CACHE_HOME/jitbmm or ~/.cache/jitbmm; empty when none can be named (no HOME).
  static std::string default_dir();
  // The process's cache, or null when disabled ($JITBMM_CACHE=off) or unusable. Cap: $JITBMM_CACHE_MAX_BYTES.
  static DiskCache* process_cache();

  explicit DiskCache(std::string dir, uint64_t cap_bytes = kDefaultCacheCapBytes);

  // The payload stored under key and kind ("cubin", "cu"), or nothing. A damaged entry is moved aside.
  std::optional<std::string> get(const std::string& key, const std::string& kind);
  // Stores atomically; returns false (after one warning) when the directory cannot be written.
  bool put(const std::string& key, const std::string& kind, std::string_view payload);
  // Writes <key>.cu as plain text beside an entry, for people to read; never read back.
  bool put_source(const std::string& key, std::string_view source);

  struct Entry {
    std::string file, key, kind;
    uint64_t bytes = 0;
    int64_t last_use = 0; // ns since the epoch (file modification time, refreshed on every hit)
  };
  std::vector<Entry> list() const;
  // Checks every entry; damaged ones are moved aside. Returns the number of damaged entries.
  int verify();
  void clear();                   // removes every entry (and leftovers) of this cache
  void evict(uint64_t cap_bytes); // least recently used first, until the total is at most cap_bytes

  const std::string& dir() const { return dir_; }
  bool usable() const { return usable_; }
  uint64_t cap_bytes() const { return cap_; }

private:
  std::string path_of(const std::string& key, const std::string& kind) const;
  void quarantine(const std::string& path, const std::string& why);
  bool atomic_write(const std::string& path, std::string_view bytes, const std::string& tag);
  void warn_once(const std::string& topic, const std::string& message);

  std::string dir_;
  uint64_t cap_;
  bool usable_ = true;
  std::mutex mutex_;
  std::set<std::string> warned_;
};

// Parses an entry's bytes; returns the payload when the header, key, length and checksum all hold.
std::optional<std::string> decode_cache_entry(std::string_view bytes, const std::string& key);
std::string encode_cache_entry(const std::string& key, std::string_view payload);

} // namespace jitbmm
