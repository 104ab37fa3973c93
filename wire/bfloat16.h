// bfloat16 (the top 16 bits of a float32: 8 exponent bits, 7 mantissa bits), the PS's
// optional wire format for parameters (ps.wire_bfloat16): half the bytes of float32,
// relative rounding error at most 2^-8.
#pragma once

#include <cstdint>
#include <cstring>

namespace stampede::wire {

// Round to nearest, ties to even; NaN stays NaN, infinities stay infinite.
inline uint16_t ToBfloat16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu) != 0) {
    return uint16_t((bits >> 16) | 0x0040u);  // quiet NaN
  }
  const uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return uint16_t((bits + rounding) >> 16);
}

inline float FromBfloat16(uint16_t h) {
  const uint32_t bits = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

}  // namespace stampede::wire
