// Element-wise reductions over NCCL data types for the stand-in's collectives. Every rank reduces
// the ranks' contributions in rank order with the same code, so all ranks get identical bits.
// Floating types narrower than float accumulate in float and round once at the end; integers
// wrap like the hardware's two's complement arithmetic; ncclAvg divides the sum by the rank count
// (integer division for integer types).
#pragma once

#include <nccl.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "numeric.h"

namespace standin {

inline size_t ncclTypeSize(ncclDataType_t type) {
  switch (type) {
    case ncclInt8:
    case ncclUint8:
    case ncclFloat8e4m3:
    case ncclFloat8e5m2: return 1;
    case ncclFloat16:
    case ncclBfloat16: return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32: return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64: return 8;
    default: return 0;
  }
}

inline const char* ncclTypeName(ncclDataType_t type) {
  switch (type) {
    case ncclInt8: return "int8";
    case ncclUint8: return "uint8";
    case ncclInt32: return "int32";
    case ncclUint32: return "uint32";
    case ncclInt64: return "int64";
    case ncclUint64: return "uint64";
    case ncclFloat16: return "float16";
    case ncclFloat32: return "float32";
    case ncclFloat64: return "float64";
    case ncclBfloat16: return "bfloat16";
    case ncclFloat8e4m3: return "float8e4m3";
    case ncclFloat8e5m2: return "float8e5m2";
    default: return "invalid";
  }
}

inline const char* ncclOpName(ncclRedOp_t op) {
  switch (op) {
    case ncclSum: return "sum";
    case ncclProd: return "prod";
    case ncclMax: return "max";
    case ncclMin: return "min";
    case ncclAvg: return "avg";
    default: return "invalid";
  }
}

namespace detail {

// Storage type S, arithmetic type A, conversions between them.
template <typename S, typename A, A (*Load)(S), S (*Store)(A)>
void reduce(void* out, const void* const* in, int inputs, size_t n, ncclRedOp_t op) {
  auto* o = static_cast<S*>(out);
  for (size_t i = 0; i < n; ++i) {
    S raw;
    std::memcpy(&raw, static_cast<const char*>(in[0]) + i * sizeof(S), sizeof(S));
    A acc = Load(raw);
    for (int r = 1; r < inputs; ++r) {
      std::memcpy(&raw, static_cast<const char*>(in[r]) + i * sizeof(S), sizeof(S));
      A v = Load(raw);
      switch (op) {
        case ncclSum:
        case ncclAvg:
          if constexpr (std::is_integral_v<A>)
            acc = static_cast<A>(static_cast<std::make_unsigned_t<A>>(acc) + static_cast<std::make_unsigned_t<A>>(v));
          else acc = acc + v;
          break;
        case ncclProd:
          if constexpr (std::is_integral_v<A>)
            acc = static_cast<A>(static_cast<std::make_unsigned_t<A>>(acc) * static_cast<std::make_unsigned_t<A>>(v));
          else acc = acc * v;
          break;
        case ncclMax: acc = v > acc ? v : acc; break;
        case ncclMin: acc = v < acc ? v : acc; break;
        default: break;
      }
    }
    if (op == ncclAvg) acc = static_cast<A>(acc / static_cast<A>(inputs));
    S stored = Store(acc);
    std::memcpy(reinterpret_cast<char*>(o) + i * sizeof(S), &stored, sizeof(S));
  }
}

template <typename T>
T identity(T v) {
  return v;
}
inline float halfLoad(uint16_t v) { return halfToFloat(v); }
inline uint16_t halfStore(float v) { return floatToHalf(v); }
inline float bf16Load(uint16_t v) { return bf16ToFloat(v); }
inline uint16_t bf16Store(float v) { return floatToBf16(v); }
inline float e4m3Load(uint8_t v) { return miniToFloat(v, kE4M3); }
inline uint8_t e4m3Store(float v) { return static_cast<uint8_t>(floatToMini(v, kE4M3)); }
inline float e5m2Load(uint8_t v) { return miniToFloat(v, kE5M2); }
inline uint8_t e5m2Store(float v) { return static_cast<uint8_t>(floatToMini(v, kE5M2)); }

}  // namespace detail

// out[i] = in[0][i] OP in[1][i] OP ... (out may alias no input).
inline void reduceInputs(void* out, const void* const* in, int inputs, size_t n, ncclDataType_t type, ncclRedOp_t op) {
  using namespace detail;
  switch (type) {
    case ncclInt8: return reduce<int8_t, int8_t, identity, identity>(out, in, inputs, n, op);
    case ncclUint8: return reduce<uint8_t, uint8_t, identity, identity>(out, in, inputs, n, op);
    case ncclInt32: return reduce<int32_t, int32_t, identity, identity>(out, in, inputs, n, op);
    case ncclUint32: return reduce<uint32_t, uint32_t, identity, identity>(out, in, inputs, n, op);
    case ncclInt64: return reduce<int64_t, int64_t, identity, identity>(out, in, inputs, n, op);
    case ncclUint64: return reduce<uint64_t, uint64_t, identity, identity>(out, in, inputs, n, op);
    case ncclFloat16: return reduce<uint16_t, float, halfLoad, halfStore>(out, in, inputs, n, op);
    case ncclBfloat16: return reduce<uint16_t, float, bf16Load, bf16Store>(out, in, inputs, n, op);
    case ncclFloat32: return reduce<float, float, identity, identity>(out, in, inputs, n, op);
    case ncclFloat64: return reduce<double, double, identity, identity>(out, in, inputs, n, op);
    case ncclFloat8e4m3: return reduce<uint8_t, float, e4m3Load, e4m3Store>(out, in, inputs, n, op);
    case ncclFloat8e5m2: return reduce<uint8_t, float, e5m2Load, e5m2Store>(out, in, inputs, n, op);
    default: return;
  }
}

}  // namespace standin
