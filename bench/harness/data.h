// Element types and exact test patterns for the benchmark harness.
//
// Every pattern value is a small non-negative integer (< 256), so sums over up to 8 ranks are
// exact in every type, half precision included, and a check can demand equality.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

namespace hvd::bench {

enum class ElemType { kUInt8, kInt32, kInt64, kFloat16, kBFloat16, kFloat32, kFloat64 };

size_t elemSize(ElemType type);
std::string_view elemName(ElemType type);
std::optional<ElemType> parseElemType(std::string_view name);

uint16_t floatToHalf(float value);  // exact for the small integers used here
float halfToFloat(uint16_t bits);
inline uint16_t floatToBFloat16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  return static_cast<uint16_t>(bits >> 16);  // truncation is exact for small integers
}
inline float bfloat16ToFloat(uint16_t bits) {
  uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &wide, 4);
  return value;
}

// Writes pattern(i) to element i of `data` for i in [0, count).
template <typename Pattern>
void fillElements(void* data, ElemType type, size_t count, Pattern pattern) {
  auto loop = [&](auto* p, auto convert) {
    for (size_t i = 0; i < count; ++i) p[i] = convert(pattern(i));
  };
  switch (type) {
    case ElemType::kUInt8: loop(static_cast<uint8_t*>(data), [](int v) { return uint8_t(v); }); break;
    case ElemType::kInt32: loop(static_cast<int32_t*>(data), [](int v) { return int32_t(v); }); break;
    case ElemType::kInt64: loop(static_cast<int64_t*>(data), [](int v) { return int64_t(v); }); break;
    case ElemType::kFloat16: loop(static_cast<uint16_t*>(data), [](int v) { return floatToHalf(float(v)); }); break;
    case ElemType::kBFloat16:
      loop(static_cast<uint16_t*>(data), [](int v) { return floatToBFloat16(float(v)); });
      break;
    case ElemType::kFloat32: loop(static_cast<float*>(data), [](int v) { return float(v); }); break;
    case ElemType::kFloat64: loop(static_cast<double*>(data), [](int v) { return double(v); }); break;
  }
}

// Returns the number of elements i in [0, count) whose value differs from expected(i).
template <typename Pattern>
size_t countMismatches(const void* data, ElemType type, size_t count, Pattern expected) {
  size_t bad = 0;
  auto loop = [&](const auto* p, auto toInt) {
    for (size_t i = 0; i < count; ++i) bad += toInt(p[i]) != expected(i);
  };
  auto exactInt = [](auto v) -> int64_t {
    double d = static_cast<double>(v);
    return d == static_cast<double>(static_cast<int64_t>(d)) ? static_cast<int64_t>(d) : -1;
  };
  switch (type) {
    case ElemType::kUInt8: loop(static_cast<const uint8_t*>(data), exactInt); break;
    case ElemType::kInt32: loop(static_cast<const int32_t*>(data), exactInt); break;
    case ElemType::kInt64: loop(static_cast<const int64_t*>(data), exactInt); break;
    case ElemType::kFloat16:
      loop(static_cast<const uint16_t*>(data), [&](uint16_t b) { return exactInt(halfToFloat(b)); });
      break;
    case ElemType::kBFloat16:
      loop(static_cast<const uint16_t*>(data), [&](uint16_t b) { return exactInt(bfloat16ToFloat(b)); });
      break;
    case ElemType::kFloat32: loop(static_cast<const float*>(data), exactInt); break;
    case ElemType::kFloat64: loop(static_cast<const double*>(data), exactInt); break;
  }
  return bad;
}

}  // namespace hvd::bench
