// Dtype-generic buffers for engine tests: values are written and read as doubles.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "collectives/reduce.h"
#include "horovod/horovod.h"

namespace hvd::test {

class Buffer {
 public:
  Buffer(DataType dtype, std::vector<int64_t> shape) : dtype_(dtype), shape_(std::move(shape)) {
    int64_t n = 1;
    for (auto d : shape_) n *= d;
    count_ = static_cast<size_t>(n);
    bytes_.assign(count_ * dataTypeSize(dtype) + 1, 0);
  }
  Buffer(DataType dtype, int64_t count) : Buffer(dtype, std::vector<int64_t>{count}) {}

  size_t count() const { return count_; }
  TensorView view() {
    TensorView v;
    v.data = bytes_.data();
    v.dtype = dtype_;
    v.shape = shape_;
    return v;
  }
  void set(size_t i, double value) { store(bytes_.data(), dtype_, i, value); }
  double get(size_t i) const { return load(bytes_.data(), dtype_, i); }

  static void store(void* base, DataType dtype, size_t i, double v) {
    auto* p = static_cast<uint8_t*>(base);
    switch (dtype) {
      case DataType::kUInt8: p[i] = static_cast<uint8_t>(v); break;
      case DataType::kInt8: reinterpret_cast<int8_t*>(p)[i] = static_cast<int8_t>(v); break;
      case DataType::kUInt16: reinterpret_cast<uint16_t*>(p)[i] = static_cast<uint16_t>(v); break;
      case DataType::kInt16: reinterpret_cast<int16_t*>(p)[i] = static_cast<int16_t>(v); break;
      case DataType::kInt32: reinterpret_cast<int32_t*>(p)[i] = static_cast<int32_t>(v); break;
      case DataType::kInt64: reinterpret_cast<int64_t*>(p)[i] = static_cast<int64_t>(v); break;
      case DataType::kFloat16: reinterpret_cast<uint16_t*>(p)[i] = floatToHalf(static_cast<float>(v)); break;
      case DataType::kBFloat16: reinterpret_cast<uint16_t*>(p)[i] = floatToBfloat16(static_cast<float>(v)); break;
      case DataType::kFloat32: reinterpret_cast<float*>(p)[i] = static_cast<float>(v); break;
      case DataType::kFloat64: reinterpret_cast<double*>(p)[i] = v; break;
      case DataType::kBool: p[i] = v != 0 ? 1 : 0; break;
    }
  }
  static double load(const void* base, DataType dtype, size_t i) {
    auto* p = static_cast<const uint8_t*>(base);
    switch (dtype) {
      case DataType::kUInt8: return p[i];
      case DataType::kInt8: return reinterpret_cast<const int8_t*>(p)[i];
      case DataType::kUInt16: return reinterpret_cast<const uint16_t*>(p)[i];
      case DataType::kInt16: return reinterpret_cast<const int16_t*>(p)[i];
      case DataType::kInt32: return reinterpret_cast<const int32_t*>(p)[i];
      case DataType::kInt64: return static_cast<double>(reinterpret_cast<const int64_t*>(p)[i]);
      case DataType::kFloat16: return halfToFloat(reinterpret_cast<const uint16_t*>(p)[i]);
      case DataType::kBFloat16: return bfloat16ToFloat(reinterpret_cast<const uint16_t*>(p)[i]);
      case DataType::kFloat32: return reinterpret_cast<const float*>(p)[i];
      case DataType::kFloat64: return reinterpret_cast<const double*>(p)[i];
      case DataType::kBool: return p[i] != 0 ? 1 : 0;
    }
    return 0;
  }

 private:
  DataType dtype_;
  std::vector<int64_t> shape_;
  size_t count_ = 0;
  std::vector<uint8_t> bytes_;
};

inline const std::vector<DataType>& allDataTypes() {
  static const std::vector<DataType> types = {DataType::kUInt8,   DataType::kInt8,     DataType::kUInt16,
                                              DataType::kInt16,   DataType::kInt32,    DataType::kInt64,
                                              DataType::kFloat16, DataType::kBFloat16, DataType::kFloat32,
                                              DataType::kFloat64, DataType::kBool};
  return types;
}

}  // namespace hvd::test
