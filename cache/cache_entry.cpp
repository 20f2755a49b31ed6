#include "cache/cache_entry.hpp"

#include <algorithm>
#include <cstring>

#include "support/sha256.hpp"

namespace jitbmm {

namespace {

constexpr char kMagic[8] = {'J', 'I', 'T', 'B', 'M', 'M', 'C', '\0'};
static_assert(sizeof kMagic + 4 + 4 + kCacheKeyChars + 8 + 64 == kCacheEntryHeaderBytes, "the header's fields");

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

// Length-prefixed fields, so no two different part lists serialise alike.
void add_field(std::string& out, std::string_view field) {
  put_u64(out, field.size());
  out.append(field);
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

bool is_cache_key(std::string_view s) {
  return s.size() == kCacheKeyChars &&
         std::all_of(s.begin(), s.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

std::optional<std::string> decode_cache_entry(std::string_view bytes, const std::string& key) {
  if (!is_cache_key(key) || bytes.size() < kCacheEntryHeaderBytes) return std::nullopt;
  if (std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0) return std::nullopt;
  std::size_t at = sizeof kMagic;
  if (get_le(bytes, at, 4) != kCacheFormatVersion) return std::nullopt;
  at += 4;
  if (get_le(bytes, at, 4) != kCacheKeyChars) return std::nullopt;
  at += 4;
  if (bytes.substr(at, kCacheKeyChars) != key) return std::nullopt; // a foreign entry under this name
  at += kCacheKeyChars;
  const uint64_t length = get_le(bytes, at, 8);
  at += 8;
  const std::string_view checksum = bytes.substr(at, 64);
  at += 64;
  if (length != bytes.size() - at) return std::nullopt; // truncated or padded
  const std::string_view payload = bytes.substr(at);
  if (sha256_hex(payload) != checksum) return std::nullopt;
  return std::string(payload);
}

} // namespace jitbmm
