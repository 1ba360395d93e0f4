// What every CUDA backend (NCCL, host-staged) needs around the entry-point table (cuda_api.h):
// status checks that turn a CUDA or NCCL failure into an hvd::Error naming the call, the
// library's message and the device, and owners for the device objects (stream, event, device and
// pinned host buffers, the current device). Everything goes through hvd::cuda::CudaApi, never a
// linked CUDA symbol, so the host-memory stand-in (tests/gpu/standin) serves them the same way.
//
// Errors: a CUDA failure is an hvd::Error (HorovodInternalError in Python). An NCCL failure that
// means a peer or the network went away (ncclRemoteError, ncclSystemError) is an hvd::PeerLost,
// the type the host transports raise for a lost peer, so the Runtime treats it as fatal and users
// see the same HorovodInternalError as on the CPU path; ncclInvalidArgument/ncclInvalidUsage are
// plain Errors too (the engine has validated shapes before: such a failure is a bug here).
//
// Threads: the owners are not synchronized; one thread uses each at a time. Destructors never
// throw (a failure to release is logged).
#pragma once

#include <cstddef>
#include <exception>
#include <string>
#include <vector>

#include "backends/cuda/cuda_api.h"
#include "horovod/operation.h"

namespace hvd::cuda {

// Throws unless `status` is cudaSuccess: "<call> failed on GPU <device>: <cudaGetErrorString>".
// device < 0: the message names no device.
void checkCuda(const CudaApi& api, cudaError_t status, const char* call, int device);
// Throws unless `status` is ncclSuccess (ncclInProgress counts as success: a non-blocking
// communicator's call was accepted). `comm` (may be null) adds NCCL's last error detail.
void checkNccl(const CudaApi& api, ncclResult_t status, const char* call, int device, ncclComm_t comm = nullptr);
// The exception checkNccl throws for `status` (for errors found asynchronously, e.g. by
// ncclCommGetAsyncError on a finalizer thread).
std::exception_ptr ncclError(const CudaApi& api, ncclResult_t status, const char* call, int device,
                             ncclComm_t comm = nullptr);

// Checks `expr` (a call through the table), naming it as written.
#define HVD_CUDA_CHECK(api, device, expr) ::hvd::cuda::checkCuda((api), (expr), #expr, (device))
#define HVD_NCCL_CHECK(api, device, comm, expr) ::hvd::cuda::checkNccl((api), (expr), #expr, (device), (comm))

// Makes `device` current on this thread for the guard's lifetime, restoring the previous one.
// Costs one cudaGetDevice (and two cudaSetDevice when the device changes).
class DeviceGuard {
 public:
  DeviceGuard(const CudaApi& api, int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  const CudaApi& api_;
  int previous_ = -1;
  bool changed_ = false;
};

// A non-blocking stream on one device (cudaStreamNonBlocking: it does not wait for the legacy
// default stream, so producer order comes only from explicit events).
class Stream {
 public:
  Stream(const CudaApi& api, int device);
  ~Stream();
  Stream(Stream&& other) noexcept;
  Stream& operator=(Stream&&) = delete;
  Stream(const Stream&) = delete;

  cudaStream_t get() const { return stream_; }
  int device() const { return device_; }
  // Waits on the host until everything queued on the stream ran (throws its error).
  void synchronize() const;

 private:
  const CudaApi* api_;
  int device_;
  cudaStream_t stream_ = nullptr;
};

// An event without timing (cheapest to record and query).
class Event {
 public:
  Event(const CudaApi& api, int device);
  ~Event();
  Event(Event&& other) noexcept;
  Event& operator=(Event&&) = delete;
  Event(const Event&) = delete;

  cudaEvent_t get() const { return event_; }
  // Records the event on `stream` (the stream's work so far).
  void record(cudaStream_t stream);
  // Makes `stream` wait for the last record (device side; the host does not block).
  void waitOn(cudaStream_t stream) const;
  // Whether the recorded work is done (true for an event never recorded); throws the error of
  // the recorded work, if any.
  bool query() const;
  // Blocks the host until the recorded work is done.
  void synchronize() const;

 private:
  const CudaApi* api_;
  int device_;
  cudaEvent_t event_ = nullptr;
};

// Device memory that grows on demand and is freed with the owner. reserve() frees and
// reallocates: the caller makes sure no queued device work still uses the old memory (e.g. by
// synchronizing the streams that use it) before asking for more.
class DeviceBuffer {
 public:
  DeviceBuffer(const CudaApi& api, int device) : api_(&api), device_(device) {}
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&&) = delete;
  DeviceBuffer(const DeviceBuffer&) = delete;

  // At least `bytes` of device memory; returns whether it had to reallocate (old contents lost).
  bool reserve(size_t bytes);
  void* data() const { return data_; }
  size_t capacity() const { return capacity_; }
  int device() const { return device_; }

 private:
  void release();
  const CudaApi* api_;
  int device_;
  void* data_ = nullptr;
  size_t capacity_ = 0;
};

// Page-locked host memory (cudaHostAlloc), for device<->host copies that overlap; same growth
// contract as DeviceBuffer.
class PinnedBuffer {
 public:
  explicit PinnedBuffer(const CudaApi& api) : api_(&api) {}
  ~PinnedBuffer();
  PinnedBuffer(PinnedBuffer&& other) noexcept;
  PinnedBuffer& operator=(PinnedBuffer&&) = delete;
  PinnedBuffer(const PinnedBuffer&) = delete;

  bool reserve(size_t bytes);
  void* data() const { return data_; }
  size_t capacity() const { return capacity_; }

 private:
  void release();
  const CudaApi* api_;
  void* data_ = nullptr;
  size_t capacity_ = 0;
};

// The outputs whose size only negotiation decides (allgather, alltoall) on one GPU, from a
// stream-ordered memory pool of the backend's own: a tensor is allocated on the stream that
// writes it (cudaMallocFromPoolAsync) and released, when the framework drops its last reference,
// on the stream the framework consumes it on (cudaFreeAsync on the entry's Device::stream, which
// the framework's later work on the tensor is ordered on). Neither call waits for the device,
// where cudaMalloc/cudaFree would (cudaFree synchronizes the whole device), and a released block
// is reused only once the consumer stream has passed the release. Up to `keepBytes` of released
// memory stays reserved for reuse (HOROVOD_OUTPUT_POOL_BYTES); the rest goes back to the driver.
// As with the framework's own caching allocator, a tensor used on another stream than the one it
// was produced for must be recorded there by the user (torch: Tensor.record_stream).
//
// A device without memory-pool support (cudaDevAttrMemoryPoolsSupported = 0), or whose driver
// refuses to make or configure the pool, gets cudaMalloc / cudaFree instead, said in the log. Destroying the pool while tensors live is safe: CUDA
// releases it when the last allocation is freed.
class DeviceOutputs {
 public:
  DeviceOutputs(const CudaApi& api, int device, size_t keepBytes);
  ~DeviceOutputs();
  DeviceOutputs(const DeviceOutputs&) = delete;
  DeviceOutputs& operator=(const DeviceOutputs&) = delete;

  // A tensor of `dtype` and `shape` on this GPU, valid on `writer` from now on, released on
  // `consumer` (null: the legacy default stream; Device::deviceWideStream(): after a device
  // synchronize, device_wide.h). Throws like checkCuda when allocation fails.
  OwnedTensor allocate(DataType dtype, std::vector<int64_t> shape, cudaStream_t writer, cudaStream_t consumer);
  bool pooled() const { return pool_ != nullptr; }

 private:
  const CudaApi& api_;
  int device_;
  cudaMemPool_t pool_ = nullptr;
};

}  // namespace hvd::cuda
