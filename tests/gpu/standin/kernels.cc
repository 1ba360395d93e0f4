// hvd_cuda_kernels_v1: Horovod's device kernels (cuda_api.h's HvdCudaKernels) run in host memory
// on the stream's thread, their buffers declared to the ordering checker like any queued op.
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "backends/cuda/cuda_api.h"
#include "numeric.h"
#include "standin.h"
#include "standin_hooks.h"

namespace standin {
namespace {

// hvd::DataType values (cpp/include/horovod/types.h; the numbering is the binding ABI).
enum HvdType : int {
  kUInt8 = 0,
  kInt8 = 1,
  kUInt16 = 2,
  kInt16 = 3,
  kInt32 = 4,
  kInt64 = 5,
  kFloat16 = 6,
  kBFloat16 = 7,
  kFloat32 = 8,
  kFloat64 = 9,
  kBool = 10,
};

size_t elementSize(int dtype) {
  switch (dtype) {
    case kUInt8:
    case kInt8:
    case kBool: return 1;
    case kUInt16:
    case kInt16:
    case kFloat16:
    case kBFloat16: return 2;
    case kInt32:
    case kFloat32: return 4;
    case kInt64:
    case kFloat64: return 8;
    default: return 0;
  }
}

// Scaled in double, truncated toward zero (as the CPU path and the real kernels), saturated to the
// type's range.
template <typename T>
void scaleInteger(T* out, const T* in, int64_t n, double factor) {
  for (int64_t i = 0; i < n; ++i) {
    double v = std::trunc(static_cast<double>(in[i]) * factor);
    if (std::isnan(v)) v = 0;
    v = std::fmin(std::fmax(v, static_cast<double>(std::numeric_limits<T>::lowest())),
                  static_cast<double>(std::numeric_limits<T>::max()));
    // int64's max is not representable in double; the clamp above can land just past it.
    if constexpr (sizeof(T) == 8) {
      if (v >= 9223372036854775807.0) {
        out[i] = std::numeric_limits<T>::max();
        continue;
      }
    }
    out[i] = static_cast<T>(v);
  }
}

template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float)>
void scaleHalf(uint16_t* out, const uint16_t* in, int64_t n, float factor) {
  for (int64_t i = 0; i < n; ++i) out[i] = FromFloat(ToFloat(in[i]) * factor);
}

float halfIn(uint16_t h) { return halfToFloat(h); }
uint16_t halfOut(float f) { return floatToHalf(f); }
float bf16In(uint16_t h) { return bf16ToFloat(h); }
uint16_t bf16Out(float f) { return floatToBf16(f); }

void runScale(void* out, const void* in, int64_t n, int dtype, double factor) {
  switch (dtype) {
    case kUInt8: return scaleInteger(static_cast<uint8_t*>(out), static_cast<const uint8_t*>(in), n, factor);
    case kInt8: return scaleInteger(static_cast<int8_t*>(out), static_cast<const int8_t*>(in), n, factor);
    case kUInt16: return scaleInteger(static_cast<uint16_t*>(out), static_cast<const uint16_t*>(in), n, factor);
    case kInt16: return scaleInteger(static_cast<int16_t*>(out), static_cast<const int16_t*>(in), n, factor);
    case kInt32: return scaleInteger(static_cast<int32_t*>(out), static_cast<const int32_t*>(in), n, factor);
    case kInt64: return scaleInteger(static_cast<int64_t*>(out), static_cast<const int64_t*>(in), n, factor);
    case kFloat16:
      return scaleHalf<halfIn, halfOut>(static_cast<uint16_t*>(out), static_cast<const uint16_t*>(in), n,
                                        static_cast<float>(factor));
    case kBFloat16:
      return scaleHalf<bf16In, bf16Out>(static_cast<uint16_t*>(out), static_cast<const uint16_t*>(in), n,
                                        static_cast<float>(factor));
    case kFloat32: {
      auto* o = static_cast<float*>(out);
      auto* x = static_cast<const float*>(in);
      float f = static_cast<float>(factor);
      for (int64_t i = 0; i < n; ++i) o[i] = x[i] * f;
      return;
    }
    case kFloat64: {
      auto* o = static_cast<double*>(out);
      auto* x = static_cast<const double*>(in);
      for (int64_t i = 0; i < n; ++i) o[i] = x[i] * factor;
      return;
    }
    case kBool: {
      auto* o = static_cast<uint8_t*>(out);
      auto* x = static_cast<const uint8_t*>(in);
      for (int64_t i = 0; i < n; ++i) o[i] = std::nearbyint((x[i] != 0 ? 1.0 : 0.0) * factor) != 0;
      return;
    }
  }
}

std::string hex(const void* p) {
  std::ostringstream out;
  out << p;
  return out.str();
}

// A kernel may touch device memory of the stream's device and pinned (mapped) host memory; pageable
// host memory or another device's memory would fault on a GPU without peer access.
cudaError_t checkKernelPointer(const char* kernel, const void* ptr, size_t bytes, int device, const char* role) {
  if (bytes == 0) return cudaSuccess;
  MemInfo info = lookupMemory(ptr);
  if (info.kind == MemKind::kHost)
    return fail(cudaErrorInvalidValue, std::string(kernel) + ": " + role + " " + hex(ptr) +
                                           " is neither device memory nor pinned host memory");
  if (info.kind == MemKind::kDevice && info.device != device)
    return fail(cudaErrorInvalidValue, std::string(kernel) + ": " + role + " " + hex(ptr) + " is memory of device " +
                                           std::to_string(info.device) + ", the stream runs on device " +
                                           std::to_string(device));
  size_t offset = static_cast<size_t>(static_cast<const char*>(ptr) - info.base);
  if (offset + bytes > info.size)
    return fail(cudaErrorInvalidValue, std::string(kernel) + ": " + role + " " + hex(ptr) + " +" +
                                           std::to_string(bytes) + " bytes runs past the end of its " +
                                           std::to_string(info.size) + "-byte allocation");
  return cudaSuccess;
}

// A launch runs on the current device (enqueue() refuses a stream of another device), so the
// pointers are checked against it.
cudaError_t launchDevice(const char* kernel, int* device) {
  *device = currentDevice();
  if (*device < 0) return fail(cudaErrorInitializationError, std::string(kernel) + ": no devices");
  return cudaSuccess;
}

cudaError_t batchedCopy(void* const* dst, const void* const* src, const size_t* bytes, int n, cudaStream_t stream) {
  const char* kernel = "hvd batchedCopy";
  if (n < 0) return fail(cudaErrorInvalidValue, std::string(kernel) + ": negative count " + std::to_string(n));
  if (n > 0 && (dst == nullptr || src == nullptr || bytes == nullptr))
    return fail(cudaErrorInvalidValue, std::string(kernel) + ": null array");
  int device = 0;
  if (cudaError_t e = launchDevice(kernel, &device)) return e;
  std::vector<void*> d;
  std::vector<const void*> s;
  std::vector<size_t> b;
  std::vector<Access> accesses;
  size_t total = 0;
  for (int i = 0; i < n; ++i) {
    if (cudaError_t e = checkKernelPointer(kernel, src[i], bytes[i], device, "source")) return e;
    if (cudaError_t e = checkKernelPointer(kernel, dst[i], bytes[i], device, "destination")) return e;
    if (bytes[i] == 0) continue;
    d.push_back(dst[i]);
    s.push_back(src[i]);
    b.push_back(bytes[i]);
    accesses.push_back({src[i], bytes[i], false});
    accesses.push_back({dst[i], bytes[i], true});
    total += bytes[i];
  }
  std::string what = std::string(kernel) + "(" + std::to_string(n) + " buffers, " + std::to_string(total) + " bytes)";
  return enqueue(
      stream, what, std::move(accesses),
      [d = std::move(d), s = std::move(s), b = std::move(b)] {
        for (size_t i = 0; i < d.size(); ++i) std::memmove(d[i], s[i], b[i]);
      },
      device);
}

cudaError_t scale(void* out, const void* in, int64_t count, int dtype, double factor, cudaStream_t stream) {
  const char* kernel = "hvd scale";
  size_t esize = elementSize(dtype);
  if (esize == 0)
    return fail(cudaErrorInvalidValue, std::string(kernel) + ": unknown hvd::DataType " + std::to_string(dtype));
  if (count < 0) return fail(cudaErrorInvalidValue, std::string(kernel) + ": negative count " + std::to_string(count));
  int device = 0;
  if (cudaError_t e = launchDevice(kernel, &device)) return e;
  size_t bytes = static_cast<size_t>(count) * esize;
  if (cudaError_t e = checkKernelPointer(kernel, in, bytes, device, "input")) return e;
  if (cudaError_t e = checkKernelPointer(kernel, out, bytes, device, "output")) return e;
  std::string what = std::string(kernel) + "(" + std::to_string(count) + " elements of type " + std::to_string(dtype) +
                     ", factor " + std::to_string(factor) + ")";
  return enqueue(
      stream, what, {{in, bytes, false}, {out, bytes, true}}, [=] { runScale(out, in, count, dtype, factor); }, device);
}

const HvdCudaKernels kKernels{kHvdCudaKernelsVersion, batchedCopy, scale};

}  // namespace
}  // namespace standin

extern "C" HVD_STANDIN_EXPORT const HvdCudaKernels* hvd_cuda_kernels_v1() { return &standin::kKernels; }
