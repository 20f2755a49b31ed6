// SHA-256 through OpenSSL's libcrypto: the one hash for kernel names and cache keys (never std::hash).
#pragma once

#include <string>
#include <string_view>

namespace jitbmm {

std::string sha256_hex(std::string_view data); // 64 lowercase hex digits

} // namespace jitbmm
