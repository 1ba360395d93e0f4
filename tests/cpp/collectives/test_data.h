// Typed test data for collective tests: deterministic random inputs per (dtype, op, rank) and an
// independent scalar reference (computed in double or wrapped 64-bit integers, not with the
// library's kernels).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "collectives/reduce.h"
#include "horovod/types.h"

namespace hvd::test {

inline const std::vector<DataType>& allDataTypes() {
  static const std::vector<DataType> types = {DataType::kUInt8,   DataType::kInt8,     DataType::kUInt16,
                                              DataType::kInt16,   DataType::kInt32,    DataType::kInt64,
                                              DataType::kFloat16, DataType::kBFloat16, DataType::kFloat32,
                                              DataType::kFloat64, DataType::kBool};
  return types;
}
inline const std::vector<ReduceOp>& allReduceOps() {
  static const std::vector<ReduceOp> ops = {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct};
  return ops;
}
inline std::string opName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kMin: return "min";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kProduct: return "product";
    default: return "op" + std::to_string(static_cast<int>(op));
  }
}

// Element i of a buffer as double (floating types) -- exact for every storage type.
inline double loadFloat(DataType t, const void* buf, size_t i) {
  switch (t) {
    case DataType::kFloat16: return halfToFloat(static_cast<const uint16_t*>(buf)[i]);
    case DataType::kBFloat16: return bfloat16ToFloat(static_cast<const uint16_t*>(buf)[i]);
    case DataType::kFloat32: return static_cast<const float*>(buf)[i];
    case DataType::kFloat64: return static_cast<const double*>(buf)[i];
    default: return 0;
  }
}
inline void storeFloat(DataType t, void* buf, size_t i, double v) {
  switch (t) {
    case DataType::kFloat16: static_cast<uint16_t*>(buf)[i] = floatToHalf(static_cast<float>(v)); break;
    case DataType::kBFloat16: static_cast<uint16_t*>(buf)[i] = floatToBfloat16(static_cast<float>(v)); break;
    case DataType::kFloat32: static_cast<float*>(buf)[i] = static_cast<float>(v); break;
    case DataType::kFloat64: static_cast<double*>(buf)[i] = v; break;
    default: break;
  }
}
// Element i of an integer/bool buffer as uint64 (sign-extended for signed types).
inline uint64_t loadInt(DataType t, const void* buf, size_t i) {
  switch (t) {
    case DataType::kUInt8:
    case DataType::kBool: return static_cast<const uint8_t*>(buf)[i];
    case DataType::kInt8: return static_cast<uint64_t>(static_cast<int64_t>(static_cast<const int8_t*>(buf)[i]));
    case DataType::kUInt16: return static_cast<const uint16_t*>(buf)[i];
    case DataType::kInt16: return static_cast<uint64_t>(static_cast<int64_t>(static_cast<const int16_t*>(buf)[i]));
    case DataType::kInt32: return static_cast<uint64_t>(static_cast<int64_t>(static_cast<const int32_t*>(buf)[i]));
    case DataType::kInt64: return static_cast<uint64_t>(static_cast<const int64_t*>(buf)[i]);
    default: return 0;
  }
}
inline void storeInt(DataType t, void* buf, size_t i, uint64_t v) {
  switch (t) {
    case DataType::kUInt8:
    case DataType::kInt8:
    case DataType::kBool: static_cast<uint8_t*>(buf)[i] = static_cast<uint8_t>(v); break;
    case DataType::kUInt16:
    case DataType::kInt16: static_cast<uint16_t*>(buf)[i] = static_cast<uint16_t>(v); break;
    case DataType::kInt32: static_cast<uint32_t*>(buf)[i] = static_cast<uint32_t>(v); break;
    case DataType::kInt64: static_cast<uint64_t*>(buf)[i] = v; break;
    default: break;
  }
}
inline bool isSigned(DataType t) {
  return t == DataType::kInt8 || t == DataType::kInt16 || t == DataType::kInt32 || t == DataType::kInt64;
}
// Sign- or zero-extends the low bits of v as type t (wraps to the type's width).
inline int64_t asTyped(DataType t, uint64_t v) {
  uint8_t tmp[8];
  storeInt(t, tmp, 0, v);
  return static_cast<int64_t>(loadInt(t, tmp, 0));
}

// Random input for rank `rank`: floats in a range suited to `op` (products stay finite), full
// range integers, 0/1 bools.
inline std::vector<uint8_t> makeInput(DataType t, ReduceOp op, int rank, size_t count, uint64_t seed = 1) {
  std::vector<uint8_t> buf(count * dataTypeSize(t) + 1);
  std::mt19937_64 rng(seed * 1000003 + static_cast<uint64_t>(rank) * 7919 + static_cast<uint64_t>(t) * 31 +
                      static_cast<uint64_t>(op));
  for (size_t i = 0; i < count; ++i) {
    if (isFloatingPoint(t)) {
      double u = std::uniform_real_distribution<double>(0, 1)(rng);
      double v = op == ReduceOp::kProduct ? 0.6 + u * 0.9 : (u * 2 - 1) * 100;
      storeFloat(t, buf.data(), i, v);
    } else if (t == DataType::kBool) {
      storeInt(t, buf.data(), i, rng() & 1);
    } else {
      storeInt(t, buf.data(), i, rng());
    }
  }
  return buf;
}

// Largest relative error one rounding of type t makes.
inline double unitRoundoff(DataType t) {
  switch (t) {
    case DataType::kFloat16: return std::ldexp(1.0, -11);
    case DataType::kBFloat16: return std::ldexp(1.0, -8);
    case DataType::kFloat32: return std::ldexp(1.0, -24);
    default: return std::ldexp(1.0, -53);
  }
}

// Checks result element i against the inputs; returns "" or a description of the mismatch.
inline std::string checkReduced(DataType t, ReduceOp op, const std::vector<std::vector<uint8_t>>& inputs,
                                const void* result, size_t i) {
  const int n = static_cast<int>(inputs.size());
  if (isFloatingPoint(t)) {
    double got = loadFloat(t, result, i);
    double acc = loadFloat(t, inputs[0].data(), i), mag = std::fabs(acc);
    for (int j = 1; j < n; ++j) {
      double x = loadFloat(t, inputs[j].data(), i);
      mag += std::fabs(x);
      if (op == ReduceOp::kSum) acc += x;
      if (op == ReduceOp::kProduct) acc *= x;
      if (op == ReduceOp::kMin) acc = std::min(acc, x);
      if (op == ReduceOp::kMax) acc = std::max(acc, x);
    }
    double tol = 0;
    if (op == ReduceOp::kSum) tol = 2.0 * n * unitRoundoff(t) * mag;
    if (op == ReduceOp::kProduct) tol = 2.0 * n * unitRoundoff(t) * std::fabs(acc);
    if (std::fabs(got - acc) <= tol) return "";
    return "element " + std::to_string(i) + ": got " + std::to_string(got) + ", expected " + std::to_string(acc);
  }
  uint64_t acc = loadInt(t, inputs[0].data(), i);
  for (int j = 1; j < n; ++j) {
    uint64_t x = loadInt(t, inputs[j].data(), i);
    if (t == DataType::kBool) {
      bool orOp = op == ReduceOp::kSum || op == ReduceOp::kMax;
      acc = orOp ? (acc | x) != 0 : (acc != 0 && x != 0);
    } else if (op == ReduceOp::kSum) {
      acc += x;
    } else if (op == ReduceOp::kProduct) {
      acc *= x;
    } else {
      int64_t a = isSigned(t) ? static_cast<int64_t>(acc) : 0, b = isSigned(t) ? static_cast<int64_t>(x) : 0;
      bool xLess = isSigned(t) ? b < a : x < acc;
      if ((op == ReduceOp::kMin) == xLess) acc = x;
    }
    acc = static_cast<uint64_t>(asTyped(t, acc));
  }
  uint64_t got = loadInt(t, result, i);
  if (got == acc) return "";
  return "element " + std::to_string(i) + ": got " + std::to_string(static_cast<int64_t>(got)) + ", expected " +
         std::to_string(static_cast<int64_t>(acc));
}

}  // namespace hvd::test
