// Ordering for device tensors whose streams Horovod cannot see (Device::deviceWideStream():
// TensorFlow's GPU kernels, whose C API gives a kernel no stream). Without the producer's stream
// there is no event to wait for, so the backends order by the whole device instead:
//   - before a collective reads or writes such a tensor, synchronizeDevice(): everything queued on
//     the GPU before it (the producers included, whichever stream they run on) has finished;
//   - an engine-allocated output such a framework drops goes to releaseAfterDeviceSync(): it is
//     freed only once a device synchronize that began after the drop has returned, so no work
//     the framework queued on it before dropping it (on any stream) can still use it.
// Both cost a device-wide wait, never on the framework's thread for the release: the waits run on
// the engine's thread (synchronizeDevice) and on one release thread per GPU.
#pragma once

#include "backends/cuda/cuda_api.h"

namespace hvd::cuda {

// Blocks this thread until every stream of `device` has run the work queued before the call
// (cudaDeviceSynchronize with `device` current). Throws like checkCuda.
void synchronizeDevice(const CudaApi& api, int device);

// Frees `data` (device memory of `device`: from a stream-ordered pool when `pooled`, else from
// cudaMalloc) after the next device synchronize that begins after this call, on a thread of its
// own. Never blocks nor throws (a failure is logged).
void releaseAfterDeviceSync(const CudaApi& api, int device, void* data, bool pooled);

// Returns once every release requested (through `api`) before the call has been carried out.
void flushDeviceWideReleases(const CudaApi& api);

}  // namespace hvd::cuda
