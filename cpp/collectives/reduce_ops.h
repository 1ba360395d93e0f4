// Reduce operators and 16-bit float converters shared by the kernel files (internal to
// collectives/). apply(a, b): a is the left (lower-rank) operand.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "collectives/half.h"
#include "collectives/reduce_kernels.h"

namespace hvd::detail {

// Integers wrap (computed unsigned, at least 32 bits wide, so no signed overflow or promotion to
// int). Floating Min/Max propagate NaN. apply(a, b): a is the left (lower-rank) operand.

template <typename T>
using Wide = std::conditional_t<(sizeof(T) < 4), uint32_t, std::make_unsigned_t<T>>;

struct SumOp {
  template <typename T>
  static T apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      return static_cast<T>(static_cast<Wide<T>>(a) + static_cast<Wide<T>>(b));
    } else {
      return a + b;
    }
  }
};
struct ProductOp {
  template <typename T>
  static T apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      return static_cast<T>(static_cast<Wide<T>>(a) * static_cast<Wide<T>>(b));
    } else {
      return a * b;
    }
  }
};
struct MinOp {
  template <typename T>
  static T apply(T a, T b) {
    T r = b < a ? b : a;
    if constexpr (std::is_floating_point_v<T>) r = b != b ? b : r;
    return r;
  }
};
struct MaxOp {
  template <typename T>
  static T apply(T a, T b) {
    T r = b > a ? b : a;
    if constexpr (std::is_floating_point_v<T>) r = b != b ? b : r;
    return r;
  }
};
// bool is stored as one byte; results are normalised to 0/1.
struct OrOp {
  static uint8_t apply(uint8_t a, uint8_t b) { return static_cast<uint8_t>((a | b) != 0); }
};
struct AndOp {
  static uint8_t apply(uint8_t a, uint8_t b) { return static_cast<uint8_t>((a != 0) & (b != 0)); }
};

struct HalfCvt {
  static float toFloat(uint16_t v) { return detail::halfBitsToFloat(v); }
  static uint16_t fromFloat(float v) { return detail::floatToHalfBits(v); }
};
struct Bf16Cvt {
  static float toFloat(uint16_t v) { return detail::bfloat16BitsToFloat(v); }
  static uint16_t fromFloat(float v) { return detail::floatToBfloat16Bits(v); }
};

// Elements converted to float32 per block (on the stack).
constexpr size_t kHalfBlock = 256;

// float16/bfloat16 kernels for CPUs with AVX2 and F16C (see reduce_avx2.cc): conversions in
// registers, bitwise the same results as the portable kernels (NaN payloads aside).
bool cpuHasAvx2F16c();
ReduceKernel avx2HalfKernel(DataType dtype, int opIndex);  // float16 or bfloat16; 0 Sum, 1 Min, 2 Max, 3 Product
void avx2ScaleHalf(DataType dtype, uint16_t* buf, size_t n, float factor);

}  // namespace hvd::detail
