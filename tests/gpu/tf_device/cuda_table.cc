#include "cuda_table.h"

#include <dlfcn.h>

#include <cstdlib>
#include <utility>
#include <vector>

namespace hvd_tf_standin {
namespace {

Cuda g_cuda;

template <typename F>
void** slot(F* field) {
  return reinterpret_cast<void**>(field);
}

}  // namespace

const Cuda& cuda() { return g_cuda; }

std::string loadCuda() {
  const char* path = std::getenv("HOROVOD_CUDA_LIBRARY");
  if (path == nullptr || *path == '\0')
    return "HOROVOD_CUDA_LIBRARY is not set: the stand-in GPU device runs on the CUDA library Horovod loads "
           "(point it at the stand-in, e.g. $(python3 tests/gpu/standin/build_standin.py))";
  // The same path and flags as Horovod's loader: dlopen hands both the one loaded instance.
  void* handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    return std::string("HOROVOD_CUDA_LIBRARY=") + path + " could not be opened: " + (why ? why : "dlopen failed");
  }
  Cuda c;
  c.path = path;
  const std::vector<std::pair<void**, const char*>> fields = {
      {slot(&c.getErrorString), "cudaGetErrorString"},
      {slot(&c.getLastError), "cudaGetLastError"},
      {slot(&c.getDeviceCount), "cudaGetDeviceCount"},
      {slot(&c.setDevice), "cudaSetDevice"},
      {slot(&c.malloc), "cudaMalloc"},
      {slot(&c.free), "cudaFree"},
      {slot(&c.hostAlloc), "cudaHostAlloc"},
      {slot(&c.freeHost), "cudaFreeHost"},
      {slot(&c.memcpyAsync), "cudaMemcpyAsync"},
      {slot(&c.memsetAsync), "cudaMemsetAsync"},
      {slot(&c.streamCreateWithFlags), "cudaStreamCreateWithFlags"},
      {slot(&c.streamDestroy), "cudaStreamDestroy"},
      {slot(&c.streamWaitEvent), "cudaStreamWaitEvent"},
      {slot(&c.streamSynchronize), "cudaStreamSynchronize"},
      {slot(&c.eventCreateWithFlags), "cudaEventCreateWithFlags"},
      {slot(&c.eventDestroy), "cudaEventDestroy"},
      {slot(&c.eventRecord), "cudaEventRecord"},
      {slot(&c.eventQuery), "cudaEventQuery"},
      {slot(&c.eventSynchronize), "cudaEventSynchronize"},
      {slot(&c.deviceSynchronize), "cudaDeviceSynchronize"},
  };
  std::string missing;
  for (const auto& [field, name] : fields) {
    *field = dlsym(handle, name);
    if (*field == nullptr) missing += std::string(missing.empty() ? "" : ", ") + name;
  }
  *slot(&c.launchHostFunc) = dlsym(handle, "hvd_standin_launch_host_func");
  if (c.launchHostFunc == nullptr) *slot(&c.launchHostFunc) = dlsym(handle, "cudaLaunchHostFunc");
  if (c.launchHostFunc == nullptr)
    missing += std::string(missing.empty() ? "" : ", ") + "hvd_standin_launch_host_func (or cudaLaunchHostFunc)";
  if (!missing.empty()) return std::string("HOROVOD_CUDA_LIBRARY=") + path + " lacks " + missing;
  if (auto table = reinterpret_cast<HvdCudaKernelsFn>(dlsym(handle, HVD_CUDA_KERNELS_SYMBOL))) {
    const HvdCudaKernels* kernels = table();
    if (kernels != nullptr && kernels->version == kHvdCudaKernelsVersion) c.kernels = kernels;
  }
  g_cuda = std::move(c);
  return "";
}

}  // namespace hvd_tf_standin
