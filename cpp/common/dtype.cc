#include "horovod/types.h"

namespace hvd {

std::string_view dataTypeName(DataType type) {
  switch (type) {
    case DataType::kUInt8: return "uint8";
    case DataType::kInt8: return "int8";
    case DataType::kUInt16: return "uint16";
    case DataType::kInt16: return "int16";
    case DataType::kInt32: return "int32";
    case DataType::kInt64: return "int64";
    case DataType::kFloat16: return "float16";
    case DataType::kBFloat16: return "bfloat16";
    case DataType::kFloat32: return "float32";
    case DataType::kFloat64: return "float64";
    case DataType::kBool: return "bool";
  }
  return "unknown";
}

bool isFloatingPoint(DataType type) {
  return type == DataType::kFloat16 || type == DataType::kBFloat16 || type == DataType::kFloat32 ||
         type == DataType::kFloat64;
}

std::string_view opTypeName(OpType type) {
  switch (type) {
    case OpType::kAllreduce: return "ALLREDUCE";
    case OpType::kAllgather: return "ALLGATHER";
    case OpType::kBroadcast: return "BROADCAST";
    case OpType::kJoin: return "JOIN";
    case OpType::kAdasum: return "ADASUM";
    case OpType::kAlltoall: return "ALLTOALL";
    case OpType::kBarrier: return "BARRIER";
    case OpType::kReducescatter: return "REDUCESCATTER";
  }
  return "UNKNOWN";
}

std::string deviceName(const Device& device) {
  switch (device.kind) {
    case DeviceKind::kCpu: return "cpu";
    case DeviceKind::kCuda: return "cuda:" + std::to_string(device.index);
    case DeviceKind::kRocm: return "rocm:" + std::to_string(device.index);
  }
  return "device(" + std::to_string(static_cast<int>(device.kind)) + "):" + std::to_string(device.index);
}

}  // namespace hvd
