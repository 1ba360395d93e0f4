// Branch-free float16 / bfloat16 <-> float32 conversions (round to nearest even, NaN kept quiet,
// Inf and subnormals exact). Inline and select-only so that loops over them vectorise; the
// out-of-line versions in reduce.h call these.
#pragma once

#include <bit>
#include <cstdint>

namespace hvd::detail {

// All-ones when cond holds, else zero: selects written as masks so that loops stay branch-free.
inline uint32_t maskIf(bool cond) { return 0u - static_cast<uint32_t>(cond); }

inline float halfBitsToFloat(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t em = h & 0x7fffu;  // exponent and mantissa
  uint32_t shifted = em << 13;
  // Normal numbers: rebias the exponent from 15 to 127.
  uint32_t normal = shifted + 0x38000000u;
  // Inf/NaN: all-ones exponent, mantissa kept; NaNs made quiet.
  uint32_t special = shifted | 0x7f800000u | (maskIf(em > 0x7c00u) & 0x00400000u);
  // Subnormals (and zero): value = m * 2^-24. Put m under an exponent of 2^-14 and subtract
  // 2^-14; the float subtraction is exact.
  float sub = std::bit_cast<float>(shifted + 0x38800000u) - std::bit_cast<float>(0x38800000u);
  uint32_t subnormal = std::bit_cast<uint32_t>(sub);
  uint32_t isSub = maskIf(em < 0x0400u), isSpecial = maskIf(em >= 0x7c00u);
  uint32_t bits = (subnormal & isSub) | (special & isSpecial) | (normal & ~(isSub | isSpecial));
  return std::bit_cast<float>(bits | sign);
}

inline uint16_t floatToHalfBits(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t ax = x & 0x7fffffffu;
  // Normal range: drop 13 mantissa bits with round-to-nearest-even, rebias 127 -> 15.
  uint32_t normal = (ax - 0x38000000u + 0xfffu + ((ax >> 13) & 1u)) >> 13;
  // Below 2^-14: adding 0.5 aligns the float so its last mantissa bit is 2^-24 (the half
  // subnormal step); the FPU's own rounding is then round-to-nearest-even, and the mantissa bits
  // are the half encoding (0x400 = smallest normal when it rounds up).
  float aligned = std::bit_cast<float>(ax) + 0.5f;
  uint32_t subnormal = std::bit_cast<uint32_t>(aligned) - 0x3f000000u;
  uint32_t nan = 0x7e00u | ((ax >> 13) & 0x3ffu);
  uint32_t isSub = maskIf(ax < 0x38800000u);
  uint32_t isNan = maskIf(ax > 0x7f800000u);
  uint32_t isInf = maskIf(ax >= 0x477ff000u) & ~isNan;  // rounds to >= 65520 (or is Inf)
  uint32_t isNormal = ~(isSub | isNan | isInf);
  uint32_t bits = (subnormal & isSub) | (normal & isNormal) | (0x7c00u & isInf) | (nan & isNan);
  return static_cast<uint16_t>(bits | sign);
}

inline float bfloat16BitsToFloat(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

inline uint16_t floatToBfloat16Bits(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  uint32_t nan = (x >> 16) | 0x0040u;
  uint32_t isNan = maskIf((x & 0x7fffffffu) > 0x7f800000u);
  return static_cast<uint16_t>((nan & isNan) | (rounded & ~isNan));
}

}  // namespace hvd::detail
