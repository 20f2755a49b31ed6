// Size arithmetic that cannot overflow: products and sums of dimensions, strides and byte counts are formed here,
// and a result that does not fit in int64 is std::invalid_argument naming what was being sized. Every count that
// decides an allocation, a loop bound or a grid goes through these before it is used.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <stdexcept>
#include <string>

namespace jitbmm {

inline int64_t checked_mul(int64_t a, int64_t b, const char* what) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) throw std::invalid_argument(std::string(what) + ": size overflows 64 bits");
  return r;
}

inline int64_t checked_add(int64_t a, int64_t b, const char* what) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) throw std::invalid_argument(std::string(what) + ": size overflows 64 bits");
  return r;
}

// The product of non-negative factors without overflow, or nothing when it does not fit in int64. A zero factor
// makes it 0 whatever the others are (an empty operand with huge other sizes holds nothing).
inline std::optional<int64_t> try_product(std::initializer_list<int64_t> factors) {
  for (int64_t f : factors)
    if (f == 0) return 0;
  int64_t r = 1;
  for (int64_t f : factors)
    if (__builtin_mul_overflow(r, f, &r)) return std::nullopt;
  return r;
}

inline int64_t checked_product(std::initializer_list<int64_t> factors, const char* what) {
  if (const auto r = try_product(factors)) return *r;
  throw std::invalid_argument(std::string(what) + ": size overflows 64 bits");
}

// The smallest power of two >= v (0 for 0); std::invalid_argument when it exceeds 2^62.
inline int64_t checked_round_up_pow2(int64_t v, const char* what) {
  if (v <= 0) return 0;
  if (v > (int64_t(1) << 62))
    throw std::invalid_argument(std::string(what) + ": " + std::to_string(v) + " is too large");
  int64_t p = 1;
  while (p < v) p <<= 1;
  return p;
}

} // namespace jitbmm
