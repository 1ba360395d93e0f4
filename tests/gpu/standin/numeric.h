// Element conversions of the stand-in's kernels and NCCL reductions: IEEE half, bfloat16 and
// the two fp8 formats through float (round to nearest even), written out here so the stand-in
// depends on nothing of the project it tests.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace standin {

inline float bitsToFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint32_t floatToBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

inline float bf16ToFloat(uint16_t b) { return bitsToFloat(uint32_t{b} << 16); }
inline uint16_t floatToBf16(float f) {
  uint32_t u = floatToBits(f);
  if (std::isnan(f)) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7FFF + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}

// A small float format: `expBits` exponent bits with bias 2^(expBits-1)-1, `manBits` mantissa
// bits. `ieee`: the all-ones exponent encodes inf/NaN (half, e5m2); otherwise (e4m3fn) only
// all-ones exponent and mantissa is NaN and there is no infinity (overflow saturates to NaN as
// the OCP spec's non-saturating conversion does).
struct MiniFormat {
  int expBits;
  int manBits;
  bool ieee;
};
constexpr MiniFormat kHalf{5, 10, true};
constexpr MiniFormat kE5M2{5, 2, true};
constexpr MiniFormat kE4M3{4, 3, false};

inline float miniToFloat(uint32_t bits, MiniFormat f) {
  const int bias = (1 << (f.expBits - 1)) - 1;
  const uint32_t sign = (bits >> (f.expBits + f.manBits)) & 1;
  const uint32_t exp = (bits >> f.manBits) & ((1u << f.expBits) - 1);
  const uint32_t man = bits & ((1u << f.manBits) - 1);
  const uint32_t expMax = (1u << f.expBits) - 1;
  float value;
  if (f.ieee && exp == expMax) value = man ? NAN : INFINITY;
  else if (!f.ieee && exp == expMax && man == (1u << f.manBits) - 1) value = NAN;
  else if (exp == 0) value = std::ldexp(static_cast<float>(man), 1 - bias - f.manBits);
  else value = std::ldexp(static_cast<float>(man | (1u << f.manBits)), static_cast<int>(exp) - bias - f.manBits);
  return sign ? -value : value;
}

inline uint32_t floatToMini(float x, MiniFormat f) {
  const int bias = (1 << (f.expBits - 1)) - 1;
  const uint32_t signBit = 1u << (f.expBits + f.manBits);
  const uint32_t expMax = (1u << f.expBits) - 1;
  const uint32_t nan =
      f.ieee ? (expMax << f.manBits) | (1u << (f.manBits - 1)) : (expMax << f.manBits) | ((1u << f.manBits) - 1);
  const uint32_t sign = std::signbit(x) ? signBit : 0;
  if (std::isnan(x)) return nan;
  double a = std::fabs(static_cast<double>(x));
  // The largest finite value and what overflows: inf (IEEE formats) or NaN (e4m3fn).
  const uint32_t maxExp = f.ieee ? expMax - 1 : expMax;
  const uint32_t maxMan = f.ieee ? (1u << f.manBits) - 1 : (1u << f.manBits) - 2;
  const uint32_t overflow = f.ieee ? (expMax << f.manBits) : nan;
  if (std::isinf(a)) return sign | overflow;
  // Quantum at the value's binade (subnormals share the smallest normal binade's quantum).
  int e = a > 0 ? std::ilogb(a) : 1 - bias;
  if (e < 1 - bias) e = 1 - bias;
  double quantum = std::ldexp(1.0, e - f.manBits);
  double q = std::nearbyint(a / quantum);  // ties to even in the default rounding mode
  double rounded = q * quantum;
  if (rounded == 0) return sign;
  int re = std::ilogb(rounded);
  if (re < 1 - bias) return sign | static_cast<uint32_t>(std::lround(rounded / std::ldexp(1.0, 1 - bias - f.manBits)));
  if (re - (1 - bias) + 1 > static_cast<int>(maxExp)) return sign | overflow;
  uint32_t exp = static_cast<uint32_t>(re + bias);
  uint32_t man = static_cast<uint32_t>(std::lround(rounded / std::ldexp(1.0, re - f.manBits))) - (1u << f.manBits);
  if (exp == maxExp && man > maxMan) return sign | overflow;
  return sign | (exp << f.manBits) | man;
}

inline float halfToFloat(uint16_t h) { return miniToFloat(h, kHalf); }
inline uint16_t floatToHalf(float x) { return static_cast<uint16_t>(floatToMini(x, kHalf)); }

}  // namespace standin
