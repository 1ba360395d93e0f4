// The CUDA runtime entry points the plugin calls, resolved by name from the library Horovod's
// loader opens (HOROVOD_CUDA_LIBRARY), so that TensorFlow's device and Horovod share one instance
// of the CUDA stand-in: one allocation table, one set of streams, one ordering checker.
#pragma once

#include <cuda_runtime_api.h>

#include "backends/cuda/cuda_api.h"

#include <string>

namespace hvd_tf_standin {

struct Cuda {
  decltype(&::cudaGetErrorString) getErrorString;
  decltype(&::cudaGetLastError) getLastError;
  decltype(&::cudaGetDeviceCount) getDeviceCount;
  decltype(&::cudaSetDevice) setDevice;
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
  decltype(&::cudaEventCreateWithFlags) eventCreateWithFlags;
  decltype(&::cudaEventDestroy) eventDestroy;
  decltype(&::cudaEventRecord) eventRecord;
  decltype(&::cudaEventQuery) eventQuery;
  decltype(&::cudaEventSynchronize) eventSynchronize;
  decltype(&::cudaDeviceSynchronize) deviceSynchronize;
  // What cudaLaunchHostFunc does: the stand-in's hvd_standin_launch_host_func, else (a real
  // libcudart) cudaLaunchHostFunc itself.
  decltype(&::cudaLaunchHostFunc) launchHostFunc;
  // Horovod's device kernels as the library exports them (the stand-in does; null if absent):
  // HvdStandinGpuScale (scale_kernel.cc) runs their `scale`.
  const HvdCudaKernels* kernels = nullptr;
  std::string path;  // the library these came from
};

// Opens HOROVOD_CUDA_LIBRARY and resolves every entry. Returns "" on success, else what is
// missing (the variable, the file, or the names of the entry points it lacks).
std::string loadCuda();

// The table loadCuda() filled (only valid after it succeeded).
const Cuda& cuda();

}  // namespace hvd_tf_standin
