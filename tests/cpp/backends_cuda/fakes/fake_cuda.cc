// Fake CUDA runtime / NCCL / kernel libraries for the loader's tests (cuda_library_test.cc): the
// entry points' names only (dlsym finds them; the loader never calls most of them), each fake
// compiled with the definitions below choosing what it exports:
//   HVD_FAKE_RUNTIME           every CUDA runtime entry point the loader resolves
//   HVD_FAKE_OMIT_EVENT_SYNC   ... except cudaEventSynchronize
//   HVD_FAKE_NCCL              every NCCL entry point (ncclGetVersion reports 99999)
//   HVD_FAKE_KERNELS_VERSION   hvd_cuda_kernels_v1, with a table of that version
// Deliberately without the CUDA headers: the symbols' names are what is being tested.
#include <cstddef>

#define HVD_FAKE(name) \
  extern "C" __attribute__((visibility("default"))) int name() { return 0; }

#ifdef HVD_FAKE_RUNTIME
extern "C" __attribute__((visibility("default"))) int cudaGetDeviceCount(int* count) {
  *count = 7;  // the tests recognise this fake by it
  return 0;
}
extern "C" __attribute__((visibility("default"))) int cudaRuntimeGetVersion(int* version) {
  *version = 13000;
  return 0;
}
extern "C" __attribute__((visibility("default"))) int cudaDriverGetVersion(int* version) {
  *version = 0;
  return 0;
}
extern "C" __attribute__((visibility("default"))) const char* cudaGetErrorString(int) { return "fake error"; }
HVD_FAKE(cudaGetLastError)
HVD_FAKE(cudaGetDevice)
HVD_FAKE(cudaSetDevice)
HVD_FAKE(cudaPointerGetAttributes)
HVD_FAKE(cudaMalloc)
HVD_FAKE(cudaFree)
HVD_FAKE(cudaHostAlloc)
HVD_FAKE(cudaFreeHost)
HVD_FAKE(cudaMemcpyAsync)
HVD_FAKE(cudaMemsetAsync)
HVD_FAKE(cudaStreamCreateWithFlags)
HVD_FAKE(cudaStreamDestroy)
HVD_FAKE(cudaStreamWaitEvent)
HVD_FAKE(cudaStreamSynchronize)
HVD_FAKE(cudaStreamQuery)
HVD_FAKE(cudaEventCreateWithFlags)
HVD_FAKE(cudaEventDestroy)
HVD_FAKE(cudaEventRecord)
HVD_FAKE(cudaEventQuery)
HVD_FAKE(cudaDeviceSynchronize)
HVD_FAKE(cudaDeviceGetAttribute)
HVD_FAKE(cudaMemPoolCreate)
HVD_FAKE(cudaMemPoolDestroy)
HVD_FAKE(cudaMemPoolSetAttribute)
HVD_FAKE(cudaMallocFromPoolAsync)
HVD_FAKE(cudaFreeAsync)
#ifndef HVD_FAKE_OMIT_EVENT_SYNC
HVD_FAKE(cudaEventSynchronize)
#endif
#endif

#ifdef HVD_FAKE_NCCL
extern "C" __attribute__((visibility("default"))) int ncclGetVersion(int* version) {
  *version = 99999;
  return 0;
}
HVD_FAKE(ncclGetErrorString)
HVD_FAKE(ncclGetLastError)
HVD_FAKE(ncclGetUniqueId)
HVD_FAKE(ncclCommInitRank)
HVD_FAKE(ncclCommDestroy)
HVD_FAKE(ncclCommAbort)
HVD_FAKE(ncclCommGetAsyncError)
HVD_FAKE(ncclAllReduce)
HVD_FAKE(ncclAllGather)
HVD_FAKE(ncclBroadcast)
HVD_FAKE(ncclReduceScatter)
HVD_FAKE(ncclSend)
HVD_FAKE(ncclRecv)
HVD_FAKE(ncclGroupStart)
HVD_FAKE(ncclGroupEnd)
#endif

#ifdef HVD_FAKE_KERNELS_VERSION
namespace {
int fakeKernel() { return 0; }
// HvdCudaKernels' layout: the version, then the two entry points.
struct FakeKernels {
  int version;
  void* batchedCopy;
  void* scale;
};
const FakeKernels kTable = {HVD_FAKE_KERNELS_VERSION, reinterpret_cast<void*>(&fakeKernel),
                            reinterpret_cast<void*>(&fakeKernel)};
}  // namespace
extern "C" __attribute__((visibility("default"))) const FakeKernels* hvd_cuda_kernels_v1() { return &kTable; }
#endif
