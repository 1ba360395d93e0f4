// Horovod's device kernels (the HvdCudaKernels table of cuda_api.h), built by nvcc into
// libhorovod_cuda_kernels.so, which exports only hvd_cuda_kernels_v1. The core never links it:
// the loader (cuda_library.h) dlopen()s it from next to the core library.
//
// The CUDA runtime is linked statically (cudart_static), so the library loads whatever
// libcudart.so the process already has (torch's libcudart.so.13, or none: the core itself loads
// the runtime with dlopen) and needs no library path to find one. This is sound because the
// two runtimes share everything that matters through the driver: both work in the device's
// primary context, and a cudaStream_t is the driver's stream handle, valid in either. The only
// runtime state not shared is the per-thread "last error", so every entry point returns its
// launch status itself instead of leaving it for the caller's cudaGetLastError. Callers launch
// with the stream's device current (cudaSetDevice), as for any kernel launch. The static runtime
// and the C++ runtime are hidden (-Wl,--exclude-libs,ALL), so nothing but the table is exported.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <limits>

#include "backends/cuda/cuda_api.h"
#include "horovod/types.h"

namespace {

constexpr int kThreads = 256;
constexpr int kMaxBlocks = 1024;   // per buffer (copy) or per call (scale); grid-stride beyond
constexpr int kBatch = 64;         // buffers per batchedCopy launch (1.5 KiB of parameters)
constexpr size_t kVectorBytes = 16;

// ---- batchedCopy ---------------------------------------------------------------------------------

// One launch's buffers, passed by value as the kernel's parameters (no staging copy, no sync).
struct CopyBatch {
  char* dst[kBatch];
  const char* src[kBatch];
  size_t bytes[kBatch];
};

// Copies [0, bytes) with `Word`-wide loads and stores where dst and src share their alignment
// modulo sizeof(Word): the unaligned head and the tail byte by byte, the body in words. Blocks
// x of the grid split the buffer, each thread striding by the grid's width.
template <typename Word>
__device__ void copyBuffer(char* dst, const char* src, size_t bytes) {
  const size_t thread = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  size_t head = (sizeof(Word) - reinterpret_cast<uintptr_t>(dst) % sizeof(Word)) % sizeof(Word);
  head = head < bytes ? head : bytes;
  const size_t words = (bytes - head) / sizeof(Word);
  const size_t tail = head + words * sizeof(Word);
  for (size_t i = thread; i < head; i += stride) dst[i] = src[i];
  Word* dstWords = reinterpret_cast<Word*>(dst + head);
  const Word* srcWords = reinterpret_cast<const Word*>(src + head);
  for (size_t i = thread; i < words; i += stride) dstWords[i] = srcWords[i];
  for (size_t i = tail + thread; i < bytes; i += stride) dst[i] = src[i];
}

// Buffer blockIdx.y of the batch.
__global__ void batchedCopyKernel(CopyBatch batch) {
  const int i = blockIdx.y;
  char* dst = batch.dst[i];
  const char* src = batch.src[i];
  const size_t bytes = batch.bytes[i];
  if (bytes == 0) return;
  // The widest word whose alignment dst and src share.
  const uintptr_t skew = reinterpret_cast<uintptr_t>(dst) ^ reinterpret_cast<uintptr_t>(src);
  if (skew % 16 == 0) {
    copyBuffer<uint4>(dst, src, bytes);
  } else if (skew % 8 == 0) {
    copyBuffer<uint2>(dst, src, bytes);
  } else if (skew % 4 == 0) {
    copyBuffer<uint32_t>(dst, src, bytes);
  } else if (skew % 2 == 0) {
    copyBuffer<uint16_t>(dst, src, bytes);
  } else {
    copyBuffer<uint8_t>(dst, src, bytes);
  }
}

int blocksFor(size_t bytesOrElements, size_t perBlock) {
  size_t blocks = (bytesOrElements + perBlock - 1) / perBlock;
  return static_cast<int>(std::clamp<size_t>(blocks, 1, kMaxBlocks));
}

cudaError_t batchedCopy(void* const* dst, const void* const* src, const size_t* bytes, int n, cudaStream_t stream) {
  if (n < 0 || (n > 0 && (dst == nullptr || src == nullptr || bytes == nullptr))) return cudaErrorInvalidValue;
  for (int first = 0; first < n; first += kBatch) {
    const int count = std::min(kBatch, n - first);
    CopyBatch batch{};
    size_t largest = 0;
    for (int j = 0; j < count; ++j) {
      batch.dst[j] = static_cast<char*>(dst[first + j]);
      batch.src[j] = static_cast<const char*>(src[first + j]);
      batch.bytes[j] = bytes[first + j];
      if (bytes[first + j] != 0 && (dst[first + j] == nullptr || src[first + j] == nullptr)) {
        return cudaErrorInvalidValue;
      }
      largest = std::max(largest, bytes[first + j]);
    }
    if (largest == 0) continue;
    dim3 grid(blocksFor(largest, kThreads * kVectorBytes * 4), count);
    batchedCopyKernel<<<grid, kThreads, 0, stream>>>(batch);
    cudaError_t status = cudaGetLastError();
    if (status != cudaSuccess) return status;
  }
  return cudaSuccess;
}

// ---- scale ---------------------------------------------------------------------------------------

// How one element is scaled: Compute is the arithmetic type (fp16/bf16 in float, integers in
// double), load/store convert.
template <typename T>
struct Scaler;

template <>
struct Scaler<__half> {
  using Compute = float;
  __device__ static __half apply(__half x, Compute f) { return __float2half_rn(__half2float(x) * f); }
};
template <>
struct Scaler<__nv_bfloat16> {
  using Compute = float;
  __device__ static __nv_bfloat16 apply(__nv_bfloat16 x, Compute f) {
    return __float2bfloat16_rn(__bfloat162float(x) * f);
  }
};
template <>
struct Scaler<float> {
  using Compute = float;
  __device__ static float apply(float x, Compute f) { return x * f; }
};
template <>
struct Scaler<double> {
  using Compute = double;
  __device__ static double apply(double x, Compute f) { return x * f; }
};
// bool: true stays true unless the factor is 0 (the product's truth value).
template <>
struct Scaler<bool> {
  using Compute = double;
  __device__ static bool apply(bool x, Compute f) { return x && f != 0.0; }
};

// Integers: the product in double, truncated toward zero as the CPU path does (collectives/reduce.cc;
// Horovod's kernels cast the same way), saturated to the
// type's range; NaN gives 0.
template <typename T>
struct Scaler {
  using Compute = double;
  __device__ static T apply(T x, Compute f) {
    const double v = trunc(static_cast<double>(x) * f);
    if (v != v) return 0;
    if (v <= static_cast<double>(std::numeric_limits<T>::lowest())) return std::numeric_limits<T>::lowest();
    if (v >= static_cast<double>(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
    return static_cast<T>(v);
  }
};

// out[i] = in[i] * f. With `vectorized` (in and out 16-byte aligned) the body moves 16 bytes per
// load and store; the elements past the last whole vector go one by one.
template <typename T>
__global__ void scaleKernel(T* out, const T* in, int64_t count, typename Scaler<T>::Compute f, bool vectorized) {
  const int64_t thread = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  constexpr int kPer = kVectorBytes / sizeof(T);
  int64_t done = 0;
  if (vectorized) {
    const int64_t vectors = count / kPer;
    for (int64_t v = thread; v < vectors; v += stride) {
      union {
        uint4 raw;
        T items[kPer];
      } chunk;
      chunk.raw = reinterpret_cast<const uint4*>(in)[v];
#pragma unroll
      for (int k = 0; k < kPer; ++k) chunk.items[k] = Scaler<T>::apply(chunk.items[k], f);
      reinterpret_cast<uint4*>(out)[v] = chunk.raw;
    }
    done = vectors * kPer;
  }
  for (int64_t i = done + thread; i < count; i += stride) out[i] = Scaler<T>::apply(in[i], f);
}

template <typename T>
cudaError_t launchScale(void* out, const void* in, int64_t count, double factor, cudaStream_t stream) {
  const bool vectorized =
      reinterpret_cast<uintptr_t>(out) % kVectorBytes == 0 && reinterpret_cast<uintptr_t>(in) % kVectorBytes == 0;
  const int blocks = blocksFor(static_cast<size_t>(count), kThreads * (kVectorBytes / sizeof(T)) * 4);
  scaleKernel<T><<<blocks, kThreads, 0, stream>>>(static_cast<T*>(out), static_cast<const T*>(in), count,
                                                  static_cast<typename Scaler<T>::Compute>(factor), vectorized);
  return cudaGetLastError();
}

cudaError_t scale(void* out, const void* in, int64_t count, int dtype, double factor, cudaStream_t stream) {
  if (count < 0 || (count > 0 && (out == nullptr || in == nullptr))) return cudaErrorInvalidValue;
  if (count == 0) return cudaSuccess;
  switch (static_cast<hvd::DataType>(dtype)) {
    case hvd::DataType::kUInt8: return launchScale<uint8_t>(out, in, count, factor, stream);
    case hvd::DataType::kInt8: return launchScale<int8_t>(out, in, count, factor, stream);
    case hvd::DataType::kUInt16: return launchScale<uint16_t>(out, in, count, factor, stream);
    case hvd::DataType::kInt16: return launchScale<int16_t>(out, in, count, factor, stream);
    case hvd::DataType::kInt32: return launchScale<int32_t>(out, in, count, factor, stream);
    case hvd::DataType::kInt64: return launchScale<int64_t>(out, in, count, factor, stream);
    case hvd::DataType::kFloat16: return launchScale<__half>(out, in, count, factor, stream);
    case hvd::DataType::kBFloat16: return launchScale<__nv_bfloat16>(out, in, count, factor, stream);
    case hvd::DataType::kFloat32: return launchScale<float>(out, in, count, factor, stream);
    case hvd::DataType::kFloat64: return launchScale<double>(out, in, count, factor, stream);
    case hvd::DataType::kBool: return launchScale<bool>(out, in, count, factor, stream);
  }
  return cudaErrorInvalidValue;
}

const HvdCudaKernels kTable = {kHvdCudaKernelsVersion, &batchedCopy, &scale};

}  // namespace

extern "C" __attribute__((visibility("default"))) const HvdCudaKernels* hvd_cuda_kernels_v1() { return &kTable; }
