#include "backends/cuda/device_util.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "backends/cuda/device_wide.h"
#include "common/logging.h"
#include "horovod/errors.h"

namespace hvd::cuda {
namespace {

std::string onDevice(int device) { return device >= 0 ? " on GPU " + std::to_string(device) : std::string(); }

std::string cudaMessage(const CudaApi& api, cudaError_t status, const char* call, int device) {
  const char* text = api.rt.getErrorString != nullptr ? api.rt.getErrorString(status) : nullptr;
  return std::string(call) + " failed" + onDevice(device) + ": " + (text != nullptr ? text : "unknown CUDA error") +
         " (cudaError " + std::to_string(static_cast<int>(status)) + ")";
}

// Logs instead of throwing: for destructors.
void logCuda(const CudaApi& api, cudaError_t status, const char* call, int device) {
  if (status != cudaSuccess) {
    HVD_LOG(Warning) << cudaMessage(api, status, call, device);
  }
}

}  // namespace

void checkCuda(const CudaApi& api, cudaError_t status, const char* call, int device) {
  if (status == cudaSuccess) [[likely]]
    return;
  throw Error(cudaMessage(api, status, call, device));
}

std::exception_ptr ncclError(const CudaApi& api, ncclResult_t status, const char* call, int device, ncclComm_t comm) {
  std::string message = std::string(call) + " failed" + onDevice(device) + ": ";
  if (api.nccl != nullptr) {
    const char* text = api.nccl->getErrorString(status);
    message += text != nullptr ? text : "unknown NCCL error";
    const char* detail = api.nccl->getLastError(comm);
    if (detail != nullptr && *detail != '\0') message += std::string(" (") + detail + ")";
  } else {
    message += "NCCL error " + std::to_string(static_cast<int>(status));
  }
  switch (status) {
    case ncclRemoteError:
    case ncclSystemError:
      // A peer exited or the network between the ranks failed: what the host transports call a
      // lost peer (which one NCCL does not say).
      return std::make_exception_ptr(PeerLost(-1, message));
    default: return std::make_exception_ptr(Error(message));
  }
}

void checkNccl(const CudaApi& api, ncclResult_t status, const char* call, int device, ncclComm_t comm) {
  if (status == ncclSuccess || status == ncclInProgress) [[likely]]
    return;
  std::rethrow_exception(ncclError(api, status, call, device, comm));
}

DeviceGuard::DeviceGuard(const CudaApi& api, int device) : api_(api) {
  HVD_CUDA_CHECK(api_, device, api_.rt.getDevice(&previous_));
  if (previous_ != device) {
    HVD_CUDA_CHECK(api_, device, api_.rt.setDevice(device));
    changed_ = true;
  }
}

DeviceGuard::~DeviceGuard() {
  if (changed_) logCuda(api_, api_.rt.setDevice(previous_), "cudaSetDevice (restoring the previous device)", previous_);
}

Stream::Stream(const CudaApi& api, int device) : api_(&api), device_(device) {
  DeviceGuard guard(api, device);
  HVD_CUDA_CHECK(api, device, api.rt.streamCreateWithFlags(&stream_, cudaStreamNonBlocking));
}

Stream::Stream(Stream&& other) noexcept
    : api_(other.api_), device_(other.device_), stream_(std::exchange(other.stream_, nullptr)) {}

Stream::~Stream() {
  if (stream_ == nullptr) return;
  logCuda(*api_, api_->rt.streamDestroy(stream_), "cudaStreamDestroy", device_);
}

void Stream::synchronize() const { HVD_CUDA_CHECK(*api_, device_, api_->rt.streamSynchronize(stream_)); }

Event::Event(const CudaApi& api, int device) : api_(&api), device_(device) {
  DeviceGuard guard(api, device);
  HVD_CUDA_CHECK(api, device, api.rt.eventCreateWithFlags(&event_, cudaEventDisableTiming));
}

Event::Event(Event&& other) noexcept
    : api_(other.api_), device_(other.device_), event_(std::exchange(other.event_, nullptr)) {}

Event::~Event() {
  if (event_ == nullptr) return;
  logCuda(*api_, api_->rt.eventDestroy(event_), "cudaEventDestroy", device_);
}

void Event::record(cudaStream_t stream) { HVD_CUDA_CHECK(*api_, device_, api_->rt.eventRecord(event_, stream)); }

void Event::waitOn(cudaStream_t stream) const {
  HVD_CUDA_CHECK(*api_, device_, api_->rt.streamWaitEvent(stream, event_, 0));
}

bool Event::query() const {
  const cudaError_t status = api_->rt.eventQuery(event_);
  if (status == cudaErrorNotReady) return false;
  checkCuda(*api_, status, "cudaEventQuery", device_);
  return true;
}

void Event::synchronize() const { HVD_CUDA_CHECK(*api_, device_, api_->rt.eventSynchronize(event_)); }

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : api_(other.api_),
      device_(other.device_),
      data_(std::exchange(other.data_, nullptr)),
      capacity_(std::exchange(other.capacity_, 0)) {}

DeviceBuffer::~DeviceBuffer() { release(); }

void DeviceBuffer::release() {
  if (data_ == nullptr) return;
  logCuda(*api_, api_->rt.free(data_), "cudaFree", device_);
  data_ = nullptr;
  capacity_ = 0;
}

bool DeviceBuffer::reserve(size_t bytes) {
  if (bytes <= capacity_) return false;
  DeviceGuard guard(*api_, device_);
  release();
  void* fresh = nullptr;
  const cudaError_t status = api_->rt.malloc(&fresh, bytes);
  if (status != cudaSuccess) {
    throw Error(cudaMessage(*api_, status, ("cudaMalloc(" + std::to_string(bytes) + " bytes)").c_str(), device_));
  }
  data_ = fresh;
  capacity_ = bytes;
  return true;
}

PinnedBuffer::PinnedBuffer(PinnedBuffer&& other) noexcept
    : api_(other.api_), data_(std::exchange(other.data_, nullptr)), capacity_(std::exchange(other.capacity_, 0)) {}

PinnedBuffer::~PinnedBuffer() { release(); }

void PinnedBuffer::release() {
  if (data_ == nullptr) return;
  logCuda(*api_, api_->rt.freeHost(data_), "cudaFreeHost", -1);
  data_ = nullptr;
  capacity_ = 0;
}

bool PinnedBuffer::reserve(size_t bytes) {
  if (bytes <= capacity_) return false;
  release();
  void* fresh = nullptr;
  const cudaError_t status = api_->rt.hostAlloc(&fresh, bytes, cudaHostAllocPortable);
  if (status != cudaSuccess) {
    throw Error(cudaMessage(*api_, status, ("cudaHostAlloc(" + std::to_string(bytes) + " bytes)").c_str(), -1));
  }
  data_ = fresh;
  capacity_ = bytes;
  return true;
}

namespace {

OwnedTensor emptyTensor(int device, DataType dtype, std::vector<int64_t> shape) {
  OwnedTensor t;
  t.view.dtype = dtype;
  t.view.shape = std::move(shape);
  t.view.device.kind = DeviceKind::kCuda;
  t.view.device.index = device;
  return t;
}

}  // namespace

DeviceOutputs::DeviceOutputs(const CudaApi& api, int device, size_t keepBytes) : api_(api), device_(device) {
  DeviceGuard guard(api_, device_);
  int supported = 0;
  HVD_CUDA_CHECK(api_, device_, api_.rt.deviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, device_));
  if (supported == 0) {
    HVD_LOG(Info) << "GPU " << device_ << " has no stream-ordered memory pools: allgather and alltoall outputs use "
                  << "cudaMalloc/cudaFree, which wait for the device";
    return;
  }
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.handleTypes = cudaMemHandleTypeNone;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = device_;
  // A pool the driver will not make or configure is not fatal: the outputs then take the
  // cudaMalloc path, said in the log.
  cudaError_t status = api_.rt.memPoolCreate(&pool_, &props);
  const char* call = "cudaMemPoolCreate";
  if (status == cudaSuccess) {
    uint64_t threshold = keepBytes;
    status = api_.rt.memPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &threshold);
    call = "cudaMemPoolSetAttribute(cudaMemPoolAttrReleaseThreshold)";
    if (status != cudaSuccess) logCuda(api_, api_.rt.memPoolDestroy(pool_), "cudaMemPoolDestroy", device_);
  }
  if (status != cudaSuccess) {
    pool_ = nullptr;
    api_.rt.getLastError();  // this call's error, not the context's
    HVD_LOG(Warning) << call << " failed on GPU " << device_ << " (" << api_.rt.getErrorString(status)
                     << "): allgather and alltoall outputs use cudaMalloc/cudaFree, which wait for the device";
  }
}

DeviceOutputs::~DeviceOutputs() {
  if (pool_ != nullptr) logCuda(api_, api_.rt.memPoolDestroy(pool_), "cudaMemPoolDestroy", device_);
}

OwnedTensor DeviceOutputs::allocate(DataType dtype, std::vector<int64_t> shape, cudaStream_t writer,
                                    cudaStream_t consumer) {
  OwnedTensor t = emptyTensor(device_, dtype, std::move(shape));
  const size_t bytes = std::max<size_t>(t.view.bytes(), 1);
  void* data = nullptr;
  const CudaApi* table = &api_;  // process-wide: outlives every tensor
  const int device = device_;
  const bool pooled = pool_ != nullptr;
  if (Device::isDeviceWide(consumer)) {
    // The framework's streams are unknown: release once the whole device has passed the drop.
    if (pooled) {
      const std::string call = "cudaMallocFromPoolAsync(" + std::to_string(bytes) + " bytes) for an output";
      checkCuda(api_, api_.rt.mallocFromPoolAsync(&data, bytes, pool_, writer), call.c_str(), device_);
    } else {
      const std::string call = "cudaMalloc(" + std::to_string(bytes) + " bytes) for an output";
      checkCuda(api_, api_.rt.malloc(&data, bytes), call.c_str(), device_);
    }
    t.storage = std::shared_ptr<void>(
        data, [table, device, pooled](void* p) { releaseAfterDeviceSync(*table, device, p, pooled); });
  } else if (!pooled) {
    const std::string call = "cudaMalloc(" + std::to_string(bytes) + " bytes) for an output";
    checkCuda(api_, api_.rt.malloc(&data, bytes), call.c_str(), device_);
    t.storage = std::shared_ptr<void>(
        data, [table, device](void* p) { logCuda(*table, table->rt.free(p), "cudaFree", device); });
  } else {
    const std::string call = "cudaMallocFromPoolAsync(" + std::to_string(bytes) + " bytes) for an output";
    checkCuda(api_, api_.rt.mallocFromPoolAsync(&data, bytes, pool_, writer), call.c_str(), device_);
    t.storage = std::shared_ptr<void>(data, [table, device, consumer](void* p) {
      // The framework dropped the tensor: its work on it is queued on `consumer` by now. (A
      // null consumer is the legacy default stream of the current device: make it this GPU.)
      try {
        DeviceGuard guard(*table, device);
        if (table->rt.freeAsync(p, consumer) == cudaSuccess) return;
        table->rt.getLastError();  // the failed call's error, not the context's
        logCuda(*table, table->rt.free(p), "cudaFree (after cudaFreeAsync failed)", device);
      } catch (const std::exception& e) {
        HVD_LOG(Warning) << "An output on GPU " << device << " could not be released: " << e.what();
      }
    });
  }
  t.view.data = data;
  return t;
}

}  // namespace hvd::cuda
