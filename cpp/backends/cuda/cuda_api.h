// The CUDA runtime, NCCL and Horovod's own device kernels as the CUDA backend sees them: one table
// of entry points, resolved at run time (cuda_library.h), never linked. The same build therefore
// loads on a machine without a GPU, and tests point the loader at a host-memory stand-in
// (tests/gpu/standin) that implements exactly these entry points.
//
// Contract for whoever adds an entry: the backend calls the CUDA runtime and NCCL only through
// this table; the stand-in implements every entry (strictly: misuse that CUDA reports, the
// stand-in reports too); the loader resolves every entry or reports the one it could not find.
// Signatures come from the real headers (cuda_runtime_api.h from the CUDA toolkit, nccl.h from the
// nvidia-nccl wheel), so a mismatch with the libraries' ABI fails to compile.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstddef>
#include <cstdint>

extern "C" {

// Horovod's device kernels (cuda_kernels.cu), exported by the kernel library (and by the
// stand-in, which runs them in host memory on its stream threads). Every call is asynchronous on
// `stream` and returns the launch status; `dtype` is an hvd::DataType value.
struct HvdCudaKernels {
  int version;  // kHvdCudaKernelsVersion
  // dst[i][0..bytes[i]) = src[i][0..bytes[i]) for i in [0, n): the fusion buffer's pack and
  // unpack, in as few launches as the sizes allow. The three arrays are host memory, read before
  // the call returns.
  cudaError_t (*batchedCopy)(void* const* dst, const void* const* src, const size_t* bytes, int n, cudaStream_t stream);
  // out[0..count) = in[0..count) * factor (in == out allowed). Integers are scaled in double and
  // truncated toward zero (as on the CPU) and saturated; fp16/bf16 in fp32.
  cudaError_t (*scale)(void* out, const void* in, int64_t count, int dtype, double factor, cudaStream_t stream);
};
constexpr int kHvdCudaKernelsVersion = 1;
// The one symbol the kernel library (and the stand-in) exports for the table above.
using HvdCudaKernelsFn = const HvdCudaKernels* (*)();
#define HVD_CUDA_KERNELS_SYMBOL "hvd_cuda_kernels_v1"

}  // extern "C"

namespace hvd::cuda {

// Entry points of the CUDA runtime (libcudart.so.*) the backend uses.
struct RuntimeApi {
  decltype(&::cudaGetErrorString) getErrorString;
  decltype(&::cudaGetLastError) getLastError;
  decltype(&::cudaRuntimeGetVersion) runtimeGetVersion;
  decltype(&::cudaDriverGetVersion) driverGetVersion;
  decltype(&::cudaGetDeviceCount) getDeviceCount;
  decltype(&::cudaGetDevice) getDevice;
  decltype(&::cudaSetDevice) setDevice;
  decltype(&::cudaPointerGetAttributes) pointerGetAttributes;
  cudaError_t (*malloc)(void** devPtr, size_t size);  // cudaMalloc (overloaded in C++)
  decltype(&::cudaFree) free;
  cudaError_t (*hostAlloc)(void** pHost, size_t size, unsigned int flags);  // cudaHostAlloc
  decltype(&::cudaFreeHost) freeHost;
  decltype(&::cudaMemcpyAsync) memcpyAsync;
  decltype(&::cudaMemsetAsync) memsetAsync;
  decltype(&::cudaStreamCreateWithFlags) streamCreateWithFlags;
  decltype(&::cudaStreamDestroy) streamDestroy;
  decltype(&::cudaStreamWaitEvent) streamWaitEvent;
  decltype(&::cudaStreamSynchronize) streamSynchronize;
  decltype(&::cudaStreamQuery) streamQuery;
  decltype(&::cudaEventCreateWithFlags) eventCreateWithFlags;
  decltype(&::cudaEventDestroy) eventDestroy;
  decltype(&::cudaEventRecord) eventRecord;
  decltype(&::cudaEventQuery) eventQuery;
  decltype(&::cudaEventSynchronize) eventSynchronize;
  // Waits for all work queued on the current device (every stream) before the call.
  decltype(&::cudaDeviceSynchronize) deviceSynchronize;
  // Stream-ordered allocation (CUDA 11.2+): the outputs whose size negotiation decides
  // (device_util.h's DeviceOutputs).
  decltype(&::cudaDeviceGetAttribute) deviceGetAttribute;
  decltype(&::cudaMemPoolCreate) memPoolCreate;
  decltype(&::cudaMemPoolDestroy) memPoolDestroy;
  decltype(&::cudaMemPoolSetAttribute) memPoolSetAttribute;
  cudaError_t (*mallocFromPoolAsync)(void** ptr, size_t size, cudaMemPool_t pool,
                                     cudaStream_t stream);  // cudaMallocFromPoolAsync (overloaded in C++)
  decltype(&::cudaFreeAsync) freeAsync;
};

// Entry points of NCCL (libnccl.so.2) the backend uses.
struct NcclApi {
  decltype(&::ncclGetVersion) getVersion;
  decltype(&::ncclGetErrorString) getErrorString;
  decltype(&::ncclGetLastError) getLastError;
  decltype(&::ncclGetUniqueId) getUniqueId;
  decltype(&::ncclCommInitRank) commInitRank;
  decltype(&::ncclCommDestroy) commDestroy;
  decltype(&::ncclCommAbort) commAbort;
  decltype(&::ncclCommGetAsyncError) commGetAsyncError;
  decltype(&::ncclAllReduce) allReduce;
  decltype(&::ncclAllGather) allGather;
  decltype(&::ncclBroadcast) broadcast;
  decltype(&::ncclReduceScatter) reduceScatter;
  decltype(&::ncclSend) send;
  decltype(&::ncclRecv) recv;
  decltype(&::ncclGroupStart) groupStart;
  decltype(&::ncclGroupEnd) groupEnd;
};

// Everything the backend reaches on the device: runtime, NCCL (absent: `nccl` is null and only
// the host-staged path is available) and the kernels.
struct CudaApi {
  RuntimeApi rt;
  const NcclApi* nccl = nullptr;
  const HvdCudaKernels* kernels = nullptr;
};

}  // namespace hvd::cuda
