#include "harness/data.h"

#include <cmath>

namespace hvd::bench {

namespace {
struct TypeInfo {
  ElemType type;
  size_t size;
  std::string_view name;
};
constexpr TypeInfo kTypes[] = {
    {ElemType::kUInt8, 1, "uint8"},     {ElemType::kInt32, 4, "int32"},       {ElemType::kInt64, 8, "int64"},
    {ElemType::kFloat16, 2, "float16"}, {ElemType::kBFloat16, 2, "bfloat16"}, {ElemType::kFloat32, 4, "float32"},
    {ElemType::kFloat64, 8, "float64"},
};
}  // namespace

size_t elemSize(ElemType type) {
  for (const auto& t : kTypes)
    if (t.type == type) return t.size;
  return 0;
}

std::string_view elemName(ElemType type) {
  for (const auto& t : kTypes)
    if (t.type == type) return t.name;
  return "?";
}

std::optional<ElemType> parseElemType(std::string_view name) {
  for (const auto& t : kTypes)
    if (t.name == name) return t.type;
  if (name == "float" || name == "fp32") return ElemType::kFloat32;
  if (name == "double" || name == "fp64") return ElemType::kFloat64;
  if (name == "half" || name == "fp16") return ElemType::kFloat16;
  if (name == "bf16") return ElemType::kBFloat16;
  return std::nullopt;
}

// IEEE binary16 conversion, adequate for the finite values the patterns produce (no rounding
// subtleties: the inputs are small integers, exactly representable).
uint16_t floatToHalf(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  uint32_t sign = (bits >> 16) & 0x8000u;
  int exponent = static_cast<int>((bits >> 23) & 0xffu) - 127 + 15;
  uint32_t mantissa = bits & 0x7fffffu;
  if (value == 0.0f) return static_cast<uint16_t>(sign);
  if (exponent >= 31) return static_cast<uint16_t>(sign | 0x7c00u);
  if (exponent <= 0) return static_cast<uint16_t>(sign);  // not produced by the patterns
  return static_cast<uint16_t>(sign | (static_cast<uint32_t>(exponent) << 10) | (mantissa >> 13));
}

float halfToFloat(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  float magnitude;
  if (exponent == 0) {
    magnitude = std::ldexp(static_cast<float>(mantissa), -24);
  } else if (exponent == 31) {
    magnitude = mantissa ? NAN : INFINITY;
  } else {
    magnitude = std::ldexp(static_cast<float>(mantissa | 0x400u), static_cast<int>(exponent) - 25);
  }
  return sign ? -magnitude : magnitude;
}

}  // namespace hvd::bench
