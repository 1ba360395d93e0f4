#include "arrays.h"

#include <cstdint>
#include <memory>
#include <string>

namespace hvd::py {
namespace {

namespace dl = nb::dlpack;

DataType toDataType(dl::dtype t, const char* what) {
  if (t.lanes == 1) {
    switch (static_cast<dl::dtype_code>(t.code)) {
      case dl::dtype_code::Int:
        if (t.bits == 8) return DataType::kInt8;
        if (t.bits == 16) return DataType::kInt16;
        if (t.bits == 32) return DataType::kInt32;
        if (t.bits == 64) return DataType::kInt64;
        break;
      case dl::dtype_code::UInt:
        if (t.bits == 8) return DataType::kUInt8;
        if (t.bits == 16) return DataType::kUInt16;
        break;
      case dl::dtype_code::Float:
        if (t.bits == 16) return DataType::kFloat16;
        if (t.bits == 32) return DataType::kFloat32;
        if (t.bits == 64) return DataType::kFloat64;
        break;
      case dl::dtype_code::Bfloat:
        if (t.bits == 16) return DataType::kBFloat16;
        break;
      case dl::dtype_code::Bool:
        if (t.bits == 8) return DataType::kBool;
        break;
      default: break;
    }
  }
  throw InvalidArgument(std::string(what) + ": unsupported DLPack dtype (code " +
                        std::to_string(t.code) + ", " + std::to_string(t.bits) + " bits, " +
                        std::to_string(t.lanes) + " lanes)");
}

dl::dtype toDlpack(DataType t) {
  switch (t) {
    case DataType::kUInt8: return {uint8_t(dl::dtype_code::UInt), 8, 1};
    case DataType::kInt8: return {uint8_t(dl::dtype_code::Int), 8, 1};
    case DataType::kUInt16: return {uint8_t(dl::dtype_code::UInt), 16, 1};
    case DataType::kInt16: return {uint8_t(dl::dtype_code::Int), 16, 1};
    case DataType::kInt32: return {uint8_t(dl::dtype_code::Int), 32, 1};
    case DataType::kInt64: return {uint8_t(dl::dtype_code::Int), 64, 1};
    case DataType::kFloat16: return {uint8_t(dl::dtype_code::Float), 16, 1};
    case DataType::kBFloat16: return {uint8_t(dl::dtype_code::Bfloat), 16, 1};
    case DataType::kFloat32: return {uint8_t(dl::dtype_code::Float), 32, 1};
    case DataType::kFloat64: return {uint8_t(dl::dtype_code::Float), 64, 1};
    case DataType::kBool: return {uint8_t(dl::dtype_code::Bool), 8, 1};
  }
  throw Error("unknown DataType");
}

// DLPack's device types (dlpack.h, DLDeviceType) that map onto hvd::Device.
enum DlDevice : int {
  kDLCPU = 1,
  kDLCUDA = 2,
  kDLCUDAHost = 3,
  kDLROCM = 10,
  kDLROCMHost = 11,
  kDLCUDAManaged = 13,
};

const char* dlDeviceName(int type) {
  switch (type) {
    case 4: return "opencl";
    case 7: return "vulkan";
    case 8: return "metal";
    case 9: return "vpi";
    case 12: return "ext_dev";
    case 14: return "oneapi";
    case 15: return "webgpu";
    case 16: return "hexagon";
    case 17: return "maia";
    default: return "an unknown device";
  }
}

// The stream argument's value for a tensor on `device` (see arrays.h).
void* producerStream(nb::handle stream, int ordinal) {
  if (!stream.is_valid() || stream.is_none()) return nullptr;
  nb::object value = PyLong_Check(stream.ptr()) ? nb::borrow(stream) : stream(ordinal);
  if (!PyLong_Check(value.ptr())) {
    throw InvalidArgument("stream: expected an int (a stream handle), got " +
                          std::string(Py_TYPE(value.ptr())->tp_name));
  }
  const auto handle = PyLong_AsUnsignedLongLongMask(value.ptr());
  if (PyErr_Occurred()) throw nb::python_error();
  return reinterpret_cast<void*>(static_cast<uintptr_t>(handle));
}

Device toDevice(int deviceType, int ordinal, nb::handle stream, const char* what) {
  Device device;
  switch (deviceType) {
    case kDLCPU:
    case kDLCUDAHost:
    case kDLROCMHost: return device;
    case kDLCUDA:
    case kDLCUDAManaged: device.kind = DeviceKind::kCuda; break;
    case kDLROCM: device.kind = DeviceKind::kRocm; break;
    default:
      throw InvalidArgument(std::string(what) + ": tensor is on " + dlDeviceName(deviceType) +
                            " (DLPack device type " + std::to_string(deviceType) +
                            "), which Horovod does not support; move the tensor to the CPU or a "
                            "CUDA device");
  }
  device.index = ordinal;
  device.stream = producerStream(stream, ordinal);
  return device;
}

// The checks and the conversion shared by every entry point. `strides` may be null (compact).
void fill(TensorView& view, dl::dtype dtype, size_t ndim, const int64_t* shape,
          const int64_t* strides, void* data, const char* what) {
  view.data = data;
  view.dtype = toDataType(dtype, what);
  view.shape.resize(ndim);
  // C-contiguous: strides (in elements) are the suffix products of the shape; dimensions of
  // extent 1 may carry any stride. A NULL strides pointer means compact row-major.
  int64_t expected = 1;
  bool contiguous = true;
  for (size_t i = ndim; i-- > 0;) {
    const int64_t extent = shape[i];
    view.shape[i] = extent;
    if (strides != nullptr && extent != 1 && strides[i] != expected) contiguous = false;
    expected *= extent;
  }
  if (!contiguous && expected != 0) {
    throw InvalidArgument("Tensor is required to be contiguous.");
  }
}

}  // namespace

template <typename Array>
TensorView toView(const Array& array, const char* what, nb::handle stream) {
  TensorView view;
  const int deviceType = array.device_type();
  if (deviceType != kDLCPU) [[unlikely]] {
    view.device = toDevice(deviceType, array.device_id(), stream, what);
  }
  fill(view, array.dtype(), array.ndim(), array.shape_ptr(), array.stride_ptr(),
       const_cast<void*>(static_cast<const void*>(array.data())), what);
  return view;
}

bool viewOfCapsule(nb::handle capsule, TensorView& view, const char* what, nb::handle stream) {
  if (!PyCapsule_IsValid(capsule.ptr(), "dltensor")) return false;
  auto* t = static_cast<const dl::dltensor*>(PyCapsule_GetPointer(capsule.ptr(), "dltensor"));
  if (t == nullptr) throw nb::python_error();
  if (t->device.device_type != kDLCPU) [[unlikely]] {
    view.device = toDevice(t->device.device_type, t->device.device_id, stream, what);
  } else {
    view.device = Device{};  // `view` may be a reused scratch that last held a device tensor
  }
  fill(view, t->dtype, static_cast<size_t>(t->ndim), t->shape, t->strides,
       static_cast<char*>(t->data) + t->byte_offset, what);
  return true;
}

template TensorView toView<InArray>(const InArray&, const char*, nb::handle);
template TensorView toView<OutArray>(const OutArray&, const char*, nb::handle);

ResultArray toResult(const OwnedTensor& tensor) {
  auto* keep = new std::shared_ptr<void>(tensor.storage);
  nb::capsule owner(keep, [](void* p) noexcept { delete static_cast<std::shared_ptr<void>*>(p); });
  const auto& shape = tensor.view.shape;
  std::vector<size_t> dims(shape.begin(), shape.end());
  int deviceType = kDLCPU;
  int ordinal = 0;
  const Device& device = tensor.view.device;
  if (!device.isCpu()) [[unlikely]] {
    deviceType = device.kind == DeviceKind::kCuda ? kDLCUDA : kDLROCM;
    ordinal = device.index;
  }
  return ResultArray(tensor.view.data, dims.size(), dims.data(), owner, nullptr,
                     toDlpack(tensor.view.dtype), deviceType, ordinal);
}

}  // namespace hvd::py
