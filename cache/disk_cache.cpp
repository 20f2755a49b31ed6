#include "cache/disk_cache.hpp"

#include "support/log.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <stdexcept>

#include "support/env_words.hpp"
#include "support/parse_number.hpp"

namespace jitbmm {

namespace {

// A kind is a plain word ("cubin", "tune"), so key + "." + kind always names a file in the cache directory.
bool is_kind(std::string_view s) {
  return !s.empty() && s.size() <= 16 && s != "bad" &&
         std::all_of(s.begin(), s.end(), [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); });
}

bool ends_with(const std::string& s, std::string_view tail) {
  return s.size() > tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// A temp file as write_file_atomically names it (temp_file_name): ".tmp-<key>.<kind>-<writer>-<16 hex digits>", so
// that a directory shared with other programs keeps their ".tmp-" files.
bool is_temp(const std::string& name) {
  constexpr std::size_t kPrefix = 5, kRandom = 16;
  if (name.rfind(".tmp-", 0) != 0 || name.size() < kPrefix + kCacheKeyChars + 2 + kRandom + 2) return false;
  if (!is_cache_key(std::string_view(name).substr(kPrefix, kCacheKeyChars)) || name[kPrefix + kCacheKeyChars] != '.')
    return false;
  const std::string_view random = std::string_view(name).substr(name.size() - kRandom);
  const auto hex = [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); };
  return name[name.size() - kRandom - 1] == '-' && std::all_of(random.begin(), random.end(), hex);
}

// What follows "<key>." in a name the cache writes (its kind, "cu" or "<kind>.bad"), or nothing for another name.
std::optional<std::string_view> after_key(const std::string& name) {
  if (name.size() <= kCacheKeyChars + 1 || name[kCacheKeyChars] != '.' ||
      !is_cache_key(std::string_view(name).substr(0, kCacheKeyChars)))
    return std::nullopt;
  return std::string_view(name).substr(kCacheKeyChars + 1);
}

// A name the cache writes besides its temp files: <key>.<kind> (an entry, or <key>.cu, a kernel's source) or
// <key>.<kind>.bad (a quarantined entry). Another program's file in a shared directory ("<key>.tar.gz", say) is none.
bool is_cache_file_name(const std::string& name) {
  auto rest = after_key(name);
  if (!rest) return false;
  if (rest->size() > 4 && rest->substr(rest->size() - 4) == ".bad") rest = rest->substr(0, rest->size() - 4);
  return is_kind(*rest);
}

// <key>.<kind>: an entry, not a source (.cu), a quarantined file (.bad) or a temp file.
bool is_entry_name(const std::string& name) {
  const auto rest = after_key(name);
  return rest && is_kind(*rest) && *rest != "cu";
}

uint64_t max_entry_bytes(const std::string& kind) {
  return kind == "cubin" ? kMaxCubinEntryBytes + kCacheEntryHeaderBytes : kMaxSmallEntryBytes;
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

} // namespace

std::string DiskCache::default_dir() {
  if (const char* d = std::getenv("JITBMM_CACHE_DIR"); d && *d) return d;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/jitbmm";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/jitbmm";
  return "";
}

uint64_t DiskCache::cap_from_env() {
  const char* c = std::getenv("JITBMM_CACHE_MAX_BYTES");
  if (!c || !*c) return kDefaultCacheCapBytes;
  const uint64_t cap = parse_unsigned(c, "JITBMM_CACHE_MAX_BYTES");
  if (cap < kMinCacheCapBytes)
    throw std::invalid_argument("JITBMM_CACHE_MAX_BYTES: " + std::string(c) + " bytes is below the minimum, " +
                                std::to_string(kMinCacheCapBytes) +
                                " (16 MiB, room for a few kernels); JITBMM_CACHE=off turns the disk cache off");
  return cap;
}

bool DiskCache::enabled_from_env() {
  const char* v = std::getenv("JITBMM_CACHE");
  return !v || !*v || parse_env_switch(v, "JITBMM_CACHE");
}

DiskCache* DiskCache::process_cache() {
  // A throw leaves the static uninitialised, so every call reports a malformed variable, not only the first.
  static DiskCache* cache = []() -> DiskCache* {
    if (!enabled_from_env()) return nullptr;
    auto* c = new DiskCache(default_dir(), cap_from_env()); // lives for the process
    if (const char* t = std::getenv("JITBMM_CACHE_TRUSTED_DIR"); t && *t)
      c->set_fallback(std::make_unique<DiskCache>(t, 0, CacheAccess::trusted_read_only));
    return c;
  }();
  return cache && (cache->usable() || cache->fallback_) ? cache : nullptr;
}

DiskCache::DiskCache(std::string dir, uint64_t cap_bytes, CacheAccess access)
    : dir_(std::move(dir)), cap_(cap_bytes), access_(access) {
  if (access_ == CacheAccess::trusted_read_only) {
    CheckedDir checked = open_checked_dir(dir_, OwnerTrust::owner_or_root);
    dir_fd_ = std::move(checked.fd);
    if (!usable()) {
      refused_ = "not trusted (" + checked.refused + ")";
      warn_once("dir",
                "shared cache directory " + dir_ + " (JITBMM_CACHE_TRUSTED_DIR) is " + refused_ + "; it is not used");
    }
    return;
  }
  const std::string memory_only = "; kernels are kept in memory only";
  if (dir_.empty()) {
    refused_ = "not named (set JITBMM_CACHE_DIR or HOME)";
    warn_once("dir", "no cache directory (set JITBMM_CACHE_DIR or HOME)" + memory_only);
    return;
  }
  if (std::string error = make_private_dirs(dir_); !error.empty()) {
    refused_ = "not usable (" + error + ")";
    warn_once("dir", "cache directory " + dir_ + " is " + refused_ + memory_only);
    return;
  }
  CheckedDir checked = open_checked_dir(dir_, OwnerTrust::owner_only);
  if (!checked.fd.valid()) {
    refused_ = "not trusted (" + checked.refused + ")";
    warn_once("dir", "cache directory " + dir_ + " is " + refused_ + ": nothing is loaded from it or written to it" +
                         memory_only);
    return;
  }
  if (::faccessat(checked.fd.get(), ".", R_OK | X_OK, AT_EACCESS) != 0) {
    refused_ = "not usable (" + std::string(std::strerror(errno)) + ")";
    warn_once("dir", "cache directory " + dir_ + " is " + refused_ + memory_only);
    return;
  }
  dir_fd_ = std::move(checked.fd);
  // Decided as every write would find it: a mode the user cannot write (root can) or a read-only mount.
  if (::faccessat(dir_fd_.get(), ".", W_OK, AT_EACCESS) != 0) {
    warn_once("dir", "cache directory " + dir_ + " is read-only (" + std::strerror(errno) +
                         "): kernels and decisions stored there are used, but nothing new is stored");
    return;
  }
  writable_ = true;
  remove_dead_temps();
}

void DiskCache::set_fallback(std::unique_ptr<DiskCache> read_only) {
  fallback_ = read_only && read_only->usable() ? std::move(read_only) : nullptr;
}

void DiskCache::warn_once(const std::string& topic, const std::string& message) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (warned_.insert(topic).second) log_message(LogLevel::warn, message);
}

void DiskCache::quarantine(const std::string& name, const std::string& why, const ReadResult& judged) {
  const std::string path = dir_ + "/" + name;
  // Another process may have renamed a sound entry over the damaged one since it was read: that one stays.
  struct stat now {};
  if (::fstatat(dir_fd_.get(), name.c_str(), &now, AT_SYMLINK_NOFOLLOW) != 0 || now.st_dev != judged.device ||
      now.st_ino != judged.inode)
    return;
  if (read_only()) { // never changed: the user only reads it
    warn_once("damaged", "entry " + path + (access_ == CacheAccess::private_read_write ? " of the read-only cache (" : " of the trusted cache (") +
                             why + ") is ignored");
    return;
  }
  warn_once("damaged", "damaged cache entry " + path + " (" + why + ") moved aside; it will be rebuilt");
  // Renames the name itself (a symbolic link is moved, not followed); removes it when that fails.
  if (::renameat(dir_fd_.get(), name.c_str(), dir_fd_.get(), (name + ".bad").c_str()) != 0)
    ::unlinkat(dir_fd_.get(), name.c_str(), 0);
}

std::optional<std::string> DiskCache::read_entry(const std::string& key, const std::string& kind) {
  const std::string name = key + "." + kind;
  ReadResult r = read_regular_file(dir_fd_.get(), name, max_entry_bytes(kind), trust());
  if (r.status == ReadResult::absent) return std::nullopt;
  if (r.status == ReadResult::unreadable) { // the file may be sound: a miss, and the entry stays
    warn_once("unreadable", "cache entry " + dir_ + "/" + name + " could not be read (" + r.why + "); it is built again");
    return std::nullopt;
  }
  if (r.status == ReadResult::refused) {
    quarantine(name, r.why, r);
    return std::nullopt;
  }
  std::optional<std::string> payload = decode_cache_entry(r.bytes, key);
  if (!payload) {
    quarantine(name, r.bytes.size() < kCacheEntryHeaderBytes ? "truncated" : "header, key or checksum mismatch", r);
    return std::nullopt;
  }
  if (!read_only()) ::utimensat(dir_fd_.get(), name.c_str(), nullptr, AT_SYMLINK_NOFOLLOW); // last use, for eviction
  return payload;
}

std::optional<std::string> DiskCache::get(const std::string& key, const std::string& kind, std::string* from) {
  if (from) from->clear();
  if (!is_cache_key(key) || !is_kind(kind)) return std::nullopt;
  if (usable())
    if (std::optional<std::string> payload = read_entry(key, kind)) return payload;
  if (!fallback_) return std::nullopt;
  std::optional<std::string> payload = fallback_->get(key, kind);
  if (payload && from) *from = fallback_->dir();
  return payload;
}

std::optional<std::string> DiskCache::peek(const std::string& key, const std::string& kind) const {
  if (!usable() || !is_cache_key(key) || !is_kind(kind)) return std::nullopt;
  const ReadResult r = read_regular_file(dir_fd_.get(), key + "." + kind, max_entry_bytes(kind), trust());
  if (r.status != ReadResult::ok) return std::nullopt;
  return decode_cache_entry(r.bytes, key);
}

std::optional<std::string> DiskCache::get_source(const std::string& key) const {
  if (!usable() || !is_cache_key(key)) return std::nullopt;
  ReadResult r = read_regular_file(dir_fd_.get(), key + ".cu", kMaxSourceBytes, trust());
  if (r.status != ReadResult::ok) return std::nullopt;
  return std::move(r.bytes);
}

KeyLock DiskCache::keyed_lock(const std::string& prefix, const std::string& key, std::chrono::milliseconds timeout,
                              const std::function<void(const std::string&)>& on_wait) {
  if (!usable()) return KeyLock::unavailable("the cache directory is " + refused_);
  if (read_only()) return KeyLock::unavailable("the cache directory is read-only");
  if (!is_cache_key(key)) return KeyLock::unavailable("not a cache key");
  return KeyLock::acquire(dir_fd_.get(), prefix + key, timeout, on_wait);
}

KeyLock DiskCache::lock(const std::string& key, std::chrono::milliseconds timeout,
                        const std::function<void(const std::string&)>& on_wait) {
  return keyed_lock("lock-", key, timeout, on_wait);
}

KeyLock DiskCache::compile_lock(const std::string& key, std::chrono::milliseconds timeout,
                                const std::function<void(const std::string&)>& on_wait) {
  return keyed_lock("lock-compile-", key, timeout, on_wait);
}

void DiskCache::end_compile(KeyLock& lock, const std::string& key) {
  if (usable() && is_cache_key(key)) lock.release_and_remove(dir_fd_.get(), "lock-compile-" + key);
  lock.release();
}

KeyLock DiskCache::try_cpu_token(unsigned index) {
  if (!usable()) return KeyLock::unavailable("the cache directory is " + refused_);
  if (read_only()) return KeyLock::unavailable("the cache directory is read-only");
  return KeyLock::acquire(dir_fd_.get(), "lock-cpu-" + std::to_string(index), std::chrono::milliseconds(0));
}

bool DiskCache::put(const std::string& key, const std::string& kind, std::string_view payload) {
  if (!is_cache_key(key) || !is_kind(kind) || !usable() || read_only()) return false; // read-only: said when opened
  const std::string error = write_file_atomically(dir_fd_.get(), key + "." + kind, encode_cache_entry(key, payload));
  if (!error.empty())
    warn_once("write", "cannot write to cache directory " + dir_ + " (" + error +
                           "); kernels and decisions not stored there are kept in memory only");
  return error.empty();
}

bool DiskCache::put_source(const std::string& key, std::string_view source) {
  if (!is_cache_key(key) || !usable() || read_only()) return false;
  const std::string error = write_file_atomically(dir_fd_.get(), key + ".cu", source);
  if (!error.empty())
    warn_once("write-source",
              "cannot write the source " + dir_ + "/" + key + ".cu (" + error +
                  "): the kernel's cubin is stored; only its source, kept beside it for reading, is not");
  return error.empty();
}

void DiskCache::discard(const std::string& key, const std::string& kind, std::string_view payload,
                        const std::string& why) {
  if (!is_cache_key(key) || !is_kind(kind)) return;
  if (usable()) {
    const std::string name = key + "." + kind;
    const ReadResult r = read_regular_file(dir_fd_.get(), name, max_entry_bytes(kind), trust());
    if (r.status == ReadResult::ok) { // this directory answered get(): the fallback was not asked
      if (decode_cache_entry(r.bytes, key) == payload) quarantine(name, why, r); // else rewritten meanwhile: kept
      return;
    }
  }
  if (fallback_) fallback_->discard(key, kind, payload, why);
}

std::vector<DiskCache::File> DiskCache::files(bool temps_only) const {
  std::vector<File> out;
  if (!usable()) return out;
  // A descriptor of its own for the listing: readdir moves the position of the one it reads.
  const int fd = ::openat(dir_fd_.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR* dir = fd >= 0 ? ::fdopendir(fd) : nullptr;
  if (!dir) {
    if (fd >= 0) ::close(fd);
    return out;
  }
  while (const dirent* item = ::readdir(dir)) {
    const std::string name = item->d_name;
    const bool ours = is_temp(name) || (!temps_only && is_cache_file_name(name));
    struct stat st {};
    if (!ours || ::fstatat(::dirfd(dir), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    out.push_back({name, static_cast<uint64_t>(st.st_size),
                   static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec, S_ISREG(st.st_mode)});
  }
  ::closedir(dir);
  return out;
}

uint64_t DiskCache::stored_bytes() const {
  uint64_t total = 0;
  for (const File& f : files()) total += f.bytes;
  return total;
}

std::vector<DiskCache::Entry> DiskCache::list() const {
  std::vector<Entry> out;
  for (const File& f : files())
    if (f.regular && is_entry_name(f.name))
      out.push_back({dir_ + "/" + f.name, f.name.substr(0, kCacheKeyChars), f.name.substr(kCacheKeyChars + 1), f.bytes,
                     f.mtime_ns});
  return out;
}

int DiskCache::verify() {
  if (!usable()) return 0;
  int damaged = 0;
  for (const File& f : files()) {
    if (!is_entry_name(f.name)) continue;
    const std::string key = f.name.substr(0, kCacheKeyChars), kind = f.name.substr(kCacheKeyChars + 1);
    const ReadResult r = read_regular_file(dir_fd_.get(), f.name, max_entry_bytes(kind), trust());
    if (r.status == ReadResult::absent) continue; // removed meanwhile
    if (r.status == ReadResult::unreadable) { // not checked, so not counted as damaged
      warn_once("unreadable", "cache entry " + dir_ + "/" + f.name + " could not be read (" + r.why + "); not checked");
      continue;
    }
    if (r.status == ReadResult::ok && decode_cache_entry(r.bytes, key)) continue;
    ++damaged;
    quarantine(f.name, r.status == ReadResult::refused ? r.why : "failed verification", r);
  }
  return damaged;
}

void DiskCache::clear() {
  if (!usable() || read_only()) return;
  // A temp file a live writer is still writing stays: its rename would fail, and its process warn that the cache
  // cannot be written.
  const int64_t stale_before = now_ns() - kStaleTempSeconds * 1000000000;
  for (const File& f : files())
    if (!is_temp(f.name) || dead_temp(f, stale_before)) ::unlinkat(dir_fd_.get(), f.name.c_str(), 0);
}

void DiskCache::evict(uint64_t cap_bytes) {
  if (!usable() || read_only()) return;
  // What may go, in order: .bad files first (oldest first), then each key's files together (entry and source),
  // least recently used first. Fresh temp files are counted but left to their writers.
  struct Victim {
    int rank = 1;
    int64_t last_use = 0;
    std::vector<std::pair<std::string, uint64_t>> files; // name, bytes
  };
  const int64_t stale_before = now_ns() - kStaleTempSeconds * 1000000000;
  std::vector<Victim> victims;
  std::map<std::string, Victim> by_key;
  uint64_t total = 0;
  for (const File& f : files()) {
    if (is_temp(f.name)) {
      if (dead_temp(f, stale_before) && ::unlinkat(dir_fd_.get(), f.name.c_str(), 0) == 0) continue;
      total += f.bytes;
      continue;
    }
    total += f.bytes;
    if (ends_with(f.name, ".bad")) {
      victims.push_back({0, f.mtime_ns, {{f.name, f.bytes}}});
      continue;
    }
    Victim& v = by_key[f.name.substr(0, kCacheKeyChars)];
    v.last_use = std::max(v.last_use, f.mtime_ns);
    v.files.emplace_back(f.name, f.bytes);
  }
  for (auto& [key, v] : by_key) victims.push_back(std::move(v));
  std::sort(victims.begin(), victims.end(), [](const Victim& a, const Victim& b) {
    return a.rank != b.rank ? a.rank < b.rank : a.last_use < b.last_use;
  });
  for (const Victim& v : victims) {
    if (total <= cap_bytes) break;
    for (const auto& [name, bytes] : v.files) // gone already: another process evicted it since the listing
      if (::unlinkat(dir_fd_.get(), name.c_str(), 0) == 0 || errno == ENOENT) total -= bytes;
  }
}

bool DiskCache::dead_temp(const File& file, int64_t stale_before_ns) {
  return file.mtime_ns < stale_before_ns || temp_writer_gone(file.name);
}

// Killed writers leave their temp files; removed when the cache is opened, not only when it next writes a cubin.
void DiskCache::remove_dead_temps() {
  const int64_t stale_before = now_ns() - kStaleTempSeconds * 1000000000;
  for (const File& f : files(true))
    if (dead_temp(f, stale_before)) ::unlinkat(dir_fd_.get(), f.name.c_str(), 0);
}

} // namespace jitbmm
