// The disk cache: compiled cubins and tuning decisions kept across processes.
//
// Location: $JITBMM_CACHE_DIR, else $XDG_CACHE_HOME/jitbmm, else ~/.cache/jitbmm (created 0700). Each entry is one
// self-describing file, <key>.<kind> (cache/cache_entry.hpp: its header and payload; <key>.cu beside a cubin is its
// plain source, for reading only). It is written to a unique temp file in
// the same directory, flushed, and renamed into place, so a reader sees a whole entry or none and concurrent writers
// are safe. A truncated, corrupted or foreign entry is a miss: it is moved aside (<file>.bad), with one warning. An
// unusable directory turns the cache off for the process, with one warning: results never depend on the cache. One
// the user may read but not write (0500, a read-only mount) is read only, with one warning. Size is capped (least
// recently used evicted); a temp file is removed once its writer has exited (its name says who wrote it).
//
// The checksum detects damage, not intent, so the directory itself must be one only its owner can feed: owned by the
// effective user and writable by no group or other (else it is refused, with one warning, and never read or
// written). So must every entry, checked on the descriptor it is read from: a regular file of the user's that no
// group or other may write, below a size bound (cache/safe_file); any other is moved aside, with one warning, and
// rebuilt. Tuning decisions are entries too ("tune"), so the same check covers them. $JITBMM_CACHE_TRUSTED_DIR
// names a second, read-only cache (a cluster's shared one) consulted after a miss: it and its entries owned by the
// user or root, and writable by no group or other either; an entry it refuses is ignored, never loaded.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "cache/cache_entry.hpp"
#include "cache/key_lock.hpp"
#include "cache/safe_file.hpp"

namespace jitbmm {

constexpr uint64_t kDefaultCacheCapBytes = uint64_t(1) << 30;
// The smallest cap $JITBMM_CACHE_MAX_BYTES may set: a cubin with its source takes up to about 1 MiB, and a cap that
// holds none would evict each entry as it is written, turning the cache off without a word.
constexpr uint64_t kMinCacheCapBytes = uint64_t(16) << 20;
// The largest file read back: a bigger one is refused (not a cubin jitbmm wrote), never allocated.
constexpr uint64_t kMaxCubinEntryBytes = uint64_t(256) << 20;
constexpr uint64_t kMaxSmallEntryBytes = uint64_t(1) << 20; // .tune and any other kind
constexpr int64_t kStaleTempSeconds = 3600; // a .tmp-* file older than this is a dead writer's, whoever wrote it

// Whether the cache reads and writes its directory (the user's own) or only reads it (a shared cache the user named).
enum class CacheAccess { private_read_write, trusted_read_only };

class DiskCache {
public:
  // $JITBMM_CACHE_DIR, $XDG_CACHE_HOME/jitbmm or ~/.cache/jitbmm; empty when none can be named (no HOME).
  static std::string default_dir();
  // $JITBMM_CACHE_MAX_BYTES, else kDefaultCacheCapBytes. A malformed value, or one below kMinCacheCapBytes, throws
  // std::invalid_argument naming the variable (no silent fallback: it reaches the user through SemiringBMM::get and
  // the C ABI).
  static uint64_t cap_from_env();
  // $JITBMM_CACHE: off, 0, false or no turn the disk cache off; on, 1, true, yes, empty or unset keep it (any case).
  // Anything else throws std::invalid_argument naming the variable and the value.
  static bool enabled_from_env();
  // The process's cache, or null when disabled ($JITBMM_CACHE) or unusable (neither the private directory nor
  // $JITBMM_CACHE_TRUSTED_DIR can be used). Throws as cap_from_env and enabled_from_env do, on every call, while a
  // variable is malformed.
  static DiskCache* process_cache();

  // Private: creates `dir` 0700 when absent, then refuses it unless it is the user's and private; one the user
  // cannot write is read only (one warning). Trusted read-only: the directory must exist, be owned by the user or
  // root and writable by no group or other; it is never written.
  explicit DiskCache(std::string dir, uint64_t cap_bytes = kDefaultCacheCapBytes,
                     CacheAccess access = CacheAccess::private_read_write);

  // The payload stored under key and kind ("cubin", "tune"), or nothing: from this directory, else from the
  // fallback, whose directory `from` (where given) then names ("" for this one's). A damaged or refused entry (not a
  // regular file of the user's, writable by others, too large) is moved aside.
  std::optional<std::string> get(const std::string& key, const std::string& kind, std::string* from = nullptr);
  // Stores atomically; returns false (after one warning) when the directory cannot be written or is read-only.
  bool put(const std::string& key, const std::string& kind, std::string_view payload);
  // Writes <key>.cu as plain text beside an entry, for people to read; never used to build anything. Failing warns
  // once, saying the entry itself is stored.
  bool put_source(const std::string& key, std::string_view source);
  // Moves the entry under key and kind aside (as a damaged one) if it still holds `payload`: its checksum held but
  // its reader could not use it (a decision that does not parse), so no later process reads it again. An entry of
  // the trusted cache, or of a read-only one, is left in place.
  void discard(const std::string& key, const std::string& kind, std::string_view payload, const std::string& why);
  // <key>.cu, for display, when it is a regular file of the user's.
  std::optional<std::string> get_source(const std::string& key) const;
  // The payload of this directory's entry, for display: as get() reads it, but never moved aside, nor its last use
  // refreshed (listing the cache changes nothing in it).
  std::optional<std::string> peek(const std::string& key, const std::string& kind) const;
  // The machine-wide lock on `key` (cache/key_lock.hpp), waiting up to `timeout`; failed (why() says why) when this
  // cache is read-only or unusable, or the key is malformed.
  KeyLock lock(const std::string& key, std::chrono::milliseconds timeout,
               const std::function<void(const std::string& holder)>& on_wait = {});
  // The machine-wide lock on compiling the cubin stored under `key` (lock-compile-<key>), as lock() takes one, so
  // that processes sharing this directory (a job's ranks, started together) compile a kernel once, the others reading
  // the cubin it stored; end_compile() lets it go and removes its file, which would otherwise stay behind, one a
  // kernel.
  KeyLock compile_lock(const std::string& key, std::chrono::milliseconds timeout,
                       const std::function<void(const std::string& holder)>& on_wait = {});
  void end_compile(KeyLock& lock, const std::string& key);
  // One of the machine's CPU tokens, lock-cpu-<index> (a KeyLock), taken now or not at all (then not held()). The
  // processes sharing this directory hold one per extra worker thread (runtime/tuner/cpu_pool.hpp).
  KeyLock try_cpu_token(unsigned index);
  // A read-only cache consulted when this one misses ($JITBMM_CACHE_TRUSTED_DIR).
  void set_fallback(std::unique_ptr<DiskCache> read_only);
  const DiskCache* fallback() const { return fallback_.get(); }

  struct Entry {
    std::string file, key, kind;
    uint64_t bytes = 0;
    int64_t last_use = 0; // ns since the epoch (file modification time, refreshed on every hit)
  };
  std::vector<Entry> list() const; // the entries (regular files) of this directory, not the fallback's
  // The bytes of every file this cache wrote in its directory (entries, sources, .bad and temp files): what evict
  // holds to the cap.
  uint64_t stored_bytes() const;
  // Checks every entry; damaged or refused ones are moved aside. Returns their number. One the system could not read
  // (open files, memory, I/O) is left as it is, with a warning, and not counted.
  int verify();
  void clear(); // removes every entry (and leftovers) of this cache; a temp file a live writer writes stays
  // Removes the .tmp-* files of exited writers (temp_writer_gone) and any older than kStaleTempSeconds, then, until
  // every file the cache wrote (entries, sources, .bad and temp files) totals at most cap_bytes: .bad files first,
  // then entries least recently used first.
  void evict(uint64_t cap_bytes);

  const std::string& dir() const { return dir_; }
  bool usable() const { return dir_fd_.valid(); }         // this directory is trusted and open
  const std::string& refused() const { return refused_; } // else why not
  uint64_t cap_bytes() const { return cap_; }
  bool read_only() const { return !writable_; } // a trusted cache, or a private one the user cannot write

private:
  // The lock on <prefix><key> (lock(), compile_lock()).
  KeyLock keyed_lock(const std::string& prefix, const std::string& key, std::chrono::milliseconds timeout,
                     const std::function<void(const std::string& holder)>& on_wait);
  struct File {
    std::string name;
    uint64_t bytes = 0;
    int64_t mtime_ns = 0;
    bool regular = false;
  };
  std::vector<File> files(bool temps_only = false) const;           // every file this cache may have written
  static bool dead_temp(const File& file, int64_t stale_before_ns); // its writer exited, or it is too old
  void remove_dead_temps();
  // Whose entries are read: the user's own, or in a trusted cache also root's; writable by no group or other.
  OwnerTrust trust() const {
    return access_ == CacheAccess::private_read_write ? OwnerTrust::owner_only : OwnerTrust::owner_or_root;
  }
  std::optional<std::string> read_entry(const std::string& key, const std::string& kind);
  void quarantine(const std::string& name, const std::string& why, const ReadResult& judged);
  void warn_once(const std::string& topic, const std::string& message);

  std::string dir_;
  uint64_t cap_;
  CacheAccess access_;
  bool writable_ = false;
  FileDescriptor dir_fd_; // the directory opened and checked; every file is reached through it
  std::string refused_;
  std::unique_ptr<DiskCache> fallback_;
  std::mutex mutex_;
  std::set<std::string> warned_;
};

} // namespace jitbmm
