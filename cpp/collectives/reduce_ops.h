// Reduce operators and 16-bit float converters shared by the kernel files (internal to
// collectives/). apply(a, b): a is the left (lower-rank) operand.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "collectives/half.h"
#include "collectives/reduce.h"
#include "collectives/reduce_kernels.h"
#include "collectives/stream_copy.h"

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

// ReduceKernel::toAndCopy for any kernel: `To` into a block on the stack, scaled there, then
// copied to both destinations. Blocks are read whole before either destination is written, so
// dst and copy may alias a or b exactly.
template <DataType D, size_t Elem, void (*To)(void*, const void*, const void*, size_t)>
void blockToAndCopy(void* dst, void* copy, const void* a, const void* b, size_t count, double factor, bool stream) {
  constexpr size_t kBlockBytes = 2048;
  constexpr size_t perBlock = kBlockBytes / Elem;
  alignas(64) uint8_t block[kBlockBytes];
  auto* d = static_cast<uint8_t*>(dst);
  auto* c = static_cast<uint8_t*>(copy);
  const auto* pa = static_cast<const uint8_t*>(a);
  const auto* pb = static_cast<const uint8_t*>(b);
  for (size_t base = 0; base < count; base += perBlock) {
    const size_t m = std::min(perBlock, count - base), at = base * Elem;
    To(block, pa + at, pb + at, m);
    scaleBuffer(block, m, D, factor);
    std::memcpy(d + at, block, m * Elem);
    collectives::streamOrCopy(c + at, block, m * Elem, stream);
  }
}

// float16/bfloat16 kernels for CPUs with AVX2 and F16C (see reduce_avx2.cc): conversions in
// registers, bitwise the same results as the portable kernels (NaN payloads aside).
bool cpuHasAvx2F16c();
ReduceKernel avx2HalfKernel(DataType dtype, int opIndex);  // float16 or bfloat16; 0 Sum, 1 Min, 2 Max, 3 Product
void avx2ScaleHalf(DataType dtype, uint16_t* buf, size_t n, float factor);
// float32 toAndCopy computed in AVX registers and stored from there to both destinations.
using ToAndCopyFn = void (*)(void*, void*, const void*, const void*, size_t, double, bool);
ToAndCopyFn avx2Float32ToAndCopy(int opIndex);

}  // namespace hvd::detail
