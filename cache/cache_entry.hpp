// One disk cache entry's name and bytes (cache/disk_cache.hpp keeps the entries): its key, the SHA-256 of everything
// that changes what it holds, and its file's bytes, a self-describing header and the payload.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace jitbmm {

// Everything that changes a compiled binary. The key is the SHA-256 of all of it.
struct CubinKeyParts {
  std::string source;
  std::vector<std::string> options;
  std::string nvrtc_version; // the build: nvrtc_build()
  std::string arch;       // "sm_90"
  int driver_version = 0; // CUDA driver version (e.g. 13000)
  std::string jitbmm_version;
};
std::string cubin_key(const CubinKeyParts& parts); // 64 hex digits

constexpr uint32_t kCacheFormatVersion = 1;
// A key's characters, and an entry's header before its payload: magic (8 bytes), format version and key length (4
// each), the key, the payload's length (8) and its SHA-256 (64 hexadecimal digits).
constexpr std::size_t kCacheKeyChars = 64;
constexpr std::size_t kCacheEntryHeaderBytes = 8 + 4 + 4 + kCacheKeyChars + 8 + 64;

// A cache key: 64 lower-case hexadecimal digits (a SHA-256), as every entry's file name starts.
bool is_cache_key(std::string_view s);

// Parses an entry's bytes; returns the payload when the header, key, length and checksum all hold.
std::optional<std::string> decode_cache_entry(std::string_view bytes, const std::string& key);
std::string encode_cache_entry(const std::string& key, std::string_view payload);

} // namespace jitbmm
