#include "cache/disk_cache.hpp"

#include "runtime/log.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "cache/sha256.hpp"

namespace jitbmm {

namespace fs = std::filesystem;

namespace {

constexpr char kMagic[8] = {'J', 'I', 'T', 'B', 'M', 'M', 'C', '\0'};
constexpr std::size_t kKeyChars = 64;
constexpr std::size_t kHeaderBytes = sizeof kMagic + 4 + 4 + kKeyChars + 8 + 64;

void put_u32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void put_u64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint64_t get_le(std::string_view bytes, std::size_t at, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= uint64_t(static_cast<unsigned char>(bytes[at + i])) << (8 * i);
  return v;
}

bool is_key(std::string_view s) {
  return s.size() == kKeyChars &&
         std::all_of(s.begin(), s.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

// Length-prefixed fields, so no two different part lists serialise alike.
void add_field(std::string& out, std::string_view field) {
  put_u64(out, field.size());
  out.append(field);
}

bool read_file(const std::string& path, std::string& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream ss;
  ss << in.rdbuf();
  out = ss.str();
  return true;
}

bool make_dirs(const std::string& dir) {
  std::error_code ec;
  fs::path path(dir);
  fs::path built;
  for (const auto& part : path) {
    built /= part;
    if (built.empty() || fs::is_directory(built, ec)) continue;
    if (::mkdir(built.c_str(), 0700) != 0 && errno != EEXIST) return false;
  }
  return fs::is_directory(path, ec);
}

} // namespace

std::string cubin_key(const CubinKeyParts& p) {
  std::string text = "jitbmm-cubin-key";
  put_u32(text, kCacheFormatVersion);
  add_field(text, p.source);
  put_u64(text, p.options.size());
  for (const auto& o : p.options) add_field(text, o);
  add_field(text, p.nvrtc_version);
  add_field(text, p.arch);
  add_field(text, std::to_string(p.driver_version));
  add_field(text, p.jitbmm_version);
  return sha256_hex(text);
}

std::string encode_cache_entry(const std::string& key, std::string_view payload) {
  std::string out(kMagic, sizeof kMagic);
  put_u32(out, kCacheFormatVersion);
  put_u32(out, static_cast<uint32_t>(key.size()));
  out.append(key);
  put_u64(out, payload.size());
  out.append(sha256_hex(payload));
  out.append(payload);
  return out;
}

std::optional<std::string> decode_cache_entry(std::string_view bytes, const std::string& key) {
  if (!is_key(key) || bytes.size() < kHeaderBytes) return std::nullopt;
  if (std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0) return std::nullopt;
  std::size_t at = sizeof kMagic;
  if (get_le(bytes, at, 4) != kCacheFormatVersion) return std::nullopt;
  at += 4;
  if (get_le(bytes, at, 4) != kKeyChars) return std::nullopt;
  at += 4;
  if (bytes.substr(at, kKeyChars) != key) return std::nullopt; // a foreign entry under this name
  at += kKeyChars;
  const uint64_t length = get_le(bytes, at, 8);
  at += 8;
  const std::string_view checksum = bytes.substr(at, 64);
  at += 64;
  if (length != bytes.size() - at) return std::nullopt; // truncated or padded
  const std::string_view payload = bytes.substr(at);
  if (sha256_hex(payload) != checksum) return std::nullopt;
  return std::string(payload);
}

std::string DiskCache::default_dir() {
  if (const char* d = std::getenv("JITBMM_CACHE_DIR"); d && *d) return d;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/jitbmm";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/jitbmm";
  return "";
}

DiskCache* DiskCache::process_cache() {
  static DiskCache* cache = []() -> DiskCache* {
    const char* mode = std::getenv("JITBMM_CACHE");
    if (mode && std::string(mode) == "off") return nullptr;
    const std::string dir = default_dir();
    if (dir.empty()) {
      log_message(LogLevel::warn, "no cache directory (set JITBMM_CACHE_DIR or HOME); kernels are kept in memory only");
      return nullptr;
    }
    uint64_t cap = kDefaultCacheCapBytes;
    if (const char* c = std::getenv("JITBMM_CACHE_MAX_BYTES"); c && *c) cap = std::strtoull(c, nullptr, 10);
    return new DiskCache(dir, cap); // lives for the process
  }();
  return cache && cache->usable() ? cache : nullptr;
}

DiskCache::DiskCache(std::string dir, uint64_t cap_bytes) : dir_(std::move(dir)), cap_(cap_bytes) {
  if (!make_dirs(dir_) || ::access(dir_.c_str(), R_OK | W_OK | X_OK) != 0) {
    usable_ = false;
    warn_once("dir", "cache directory " + dir_ + " is not usable (" + std::strerror(errno) +
                         "); kernels are kept in memory only");
  }
}

std::string DiskCache::path_of(const std::string& key, const std::string& kind) const {
  return dir_ + "/" + key + "." + kind;
}

void DiskCache::warn_once(const std::string& topic, const std::string& message) {
  if (warned_.insert(topic).second) log_message(LogLevel::warn, message);
}

void DiskCache::quarantine(const std::string& path, const std::string& why) {
  warn_once("damaged", "damaged cache entry " + path + " (" + why + ") moved aside; it will be rebuilt");
  if (std::rename(path.c_str(), (path + ".bad").c_str()) != 0) std::remove(path.c_str());
}

std::optional<std::string> DiskCache::get(const std::string& key, const std::string& kind) {
  if (!usable_ || !is_key(key)) return std::nullopt;
  const std::string path = path_of(key, kind);
  std::string bytes;
  if (!read_file(path, bytes)) return std::nullopt;
  std::optional<std::string> payload = decode_cache_entry(bytes, key);
  std::lock_guard<std::mutex> lock(mutex_);
  if (!payload) {
    quarantine(path, bytes.size() < kHeaderBytes ? "truncated" : "header, key or checksum mismatch");
    return std::nullopt;
  }
  ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0); // last use, for eviction
  return payload;
}

bool DiskCache::atomic_write(const std::string& path, std::string_view bytes, const std::string& tag) {
  std::string temp = dir_ + "/.tmp-" + tag + "-XXXXXX";
  const int fd = ::mkstemp(temp.data());
  bool ok = fd >= 0;
  for (std::size_t done = 0; ok && done < bytes.size();) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    ok = n > 0;
    if (ok) done += static_cast<std::size_t>(n);
  }
  ok = ok && ::fsync(fd) == 0;
  if (fd >= 0) ok = ::close(fd) == 0 && ok;
  ok = ok && std::rename(temp.c_str(), path.c_str()) == 0;
  std::lock_guard<std::mutex> lock(mutex_);
  if (!ok) {
    if (fd >= 0) std::remove(temp.c_str());
    warn_once("write", "cannot write to cache directory " + dir_ + " (" + std::strerror(errno) +
                           "); kernels are kept in memory only");
  }
  return ok;
}

bool DiskCache::put(const std::string& key, const std::string& kind, std::string_view payload) {
  if (!usable_ || !is_key(key)) return false;
  return atomic_write(path_of(key, kind), encode_cache_entry(key, payload), key + "." + kind);
}

bool DiskCache::put_source(const std::string& key, std::string_view source) {
  if (!usable_ || !is_key(key)) return false;
  return atomic_write(path_of(key, "cu"), source, key + ".cu");
}

std::vector<DiskCache::Entry> DiskCache::list() const {
  std::vector<Entry> out;
  std::error_code ec;
  for (const auto& item : fs::directory_iterator(dir_, ec)) {
    const std::string name = item.path().filename().string();
    const auto dot = name.find('.');
    const auto ends_with = [&](const std::string& tail) {
      return name.size() > tail.size() && name.compare(name.size() - tail.size(), tail.size(), tail) == 0;
    };
    if (dot != kKeyChars || !is_key(name.substr(0, dot)) || ends_with(".bad") || ends_with(".cu")) continue;
    struct stat st {};
    if (::stat(item.path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    out.push_back({item.path().string(), name.substr(0, dot), name.substr(dot + 1), static_cast<uint64_t>(st.st_size),
                   static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec});
  }
  return out;
}

int DiskCache::verify() {
  int damaged = 0;
  for (const Entry& e : list()) {
    std::string bytes;
    if (read_file(e.file, bytes) && decode_cache_entry(bytes, e.key)) continue;
    ++damaged;
    std::lock_guard<std::mutex> lock(mutex_);
    quarantine(e.file, "failed verification");
  }
  return damaged;
}

void DiskCache::clear() {
  std::error_code ec;
  for (const auto& item : fs::directory_iterator(dir_, ec)) {
    const std::string name = item.path().filename().string();
    const bool ours = (name.size() > kKeyChars && is_key(name.substr(0, kKeyChars)) && name[kKeyChars] == '.') ||
                      name.rfind(".tmp-", 0) == 0;
    if (ours) fs::remove(item.path(), ec);
  }
}

void DiskCache::evict(uint64_t cap_bytes) {
  std::vector<Entry> entries = list();
  uint64_t total = 0;
  for (const Entry& e : entries) total += e.bytes;
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.last_use < b.last_use; });
  for (const Entry& e : entries) {
    if (total <= cap_bytes) break;
    if (std::remove(e.file.c_str()) == 0) total -= e.bytes;
    std::remove(path_of(e.key, "cu").c_str()); // its readable source, if any
  }
}

} // namespace jitbmm
