#include "stream_executor.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "cuda_table.h"
#include "registry.h"

namespace hvd_tf_standin {
namespace {

constexpr int64_t kDefaultMemoryMiB = 512;
constexpr int kMaxDevices = 64;  // the stand-in's limit (HVD_STANDIN_DEVICES)

// Bytes handed out per device, against deviceMemoryBytes().
std::atomic<int64_t> g_allocated[kMaxDevices];

cudaStream_t stream(SP_Stream s) { return reinterpret_cast<cudaStream_t>(s); }
cudaEvent_t event(SP_Event e) { return reinterpret_cast<cudaEvent_t>(e); }

// Sets `status` from a CUDA status: OK, or an internal error naming the call, the device and
// CUDA's message. Returns whether it succeeded.
bool check(cudaError_t error, const char* call, const SP_Device* device, TF_Status* status) {
  if (error == cudaSuccess) {
    TF_SetStatus(status, TF_OK, "");
    return true;
  }
  std::string message = std::string("stand-in GPU ") + std::to_string(device->ordinal) + ": " + call +
                        " failed: " + cuda().getErrorString(error) + " (" + std::to_string(error) + ")";
  TF_SetStatus(status, TF_INTERNAL, message.c_str());
  return false;
}

// A CUDA call from a callback that has no status to return: printed when it fails.
void logFailure(cudaError_t error, const char* call, const SP_Device* device) {
  if (error == cudaSuccess) return;
  std::fprintf(stderr, "hvd-tf-standin-gpu: device %d: %s failed: %s (%d)\n", device->ordinal, call,
               cuda().getErrorString(error), static_cast<int>(error));
}

// Every callback may run on any TensorFlow thread: make the device current first.
bool select(const SP_Device* device, TF_Status* status) {
  return check(cuda().setDevice(device->ordinal), "cudaSetDevice", device, status);
}
bool select(const SP_Device* device) {
  cudaError_t e = cuda().setDevice(device->ordinal);
  logFailure(e, "cudaSetDevice", device);
  return e == cudaSuccess;
}

void allocate(const SP_Device* device, uint64_t size, int64_t memory_space, SP_DeviceMemoryBase* mem) {
  mem->struct_size = SP_DEVICE_MEMORY_BASE_STRUCT_SIZE;
  mem->opaque = nullptr;
  mem->size = 0;
  auto& used = g_allocated[device->ordinal];
  const auto bytes = static_cast<int64_t>(size);
  if (used.fetch_add(bytes) + bytes > deviceMemoryBytes()) {
    used.fetch_sub(bytes);
    return;  // out of the device's memory: TensorFlow reports the failed allocation
  }
  void* p = nullptr;
  if (select(device)) logFailure(cuda().malloc(&p, size), "cudaMalloc", device);
  if (p == nullptr) {
    used.fetch_sub(bytes);
    return;
  }
  mem->opaque = p;
  mem->size = size;
}

void deallocate(const SP_Device* device, SP_DeviceMemoryBase* mem) {
  if (mem->opaque == nullptr) return;
  if (!select(device)) return;
  cudaError_t e = cuda().free(mem->opaque);
  logFailure(e, "cudaFree", device);
  if (e == cudaSuccess) g_allocated[device->ordinal].fetch_sub(static_cast<int64_t>(mem->size));
  mem->opaque = nullptr;
}

void* hostMemoryAllocate(const SP_Device* device, uint64_t size) {
  void* p = nullptr;
  if (select(device)) logFailure(cuda().hostAlloc(&p, size, cudaHostAllocDefault), "cudaHostAlloc", device);
  return p;
}

void hostMemoryDeallocate(const SP_Device* device, void* mem) {
  if (mem != nullptr && select(device)) logFailure(cuda().freeHost(mem), "cudaFreeHost", device);
}

TF_Bool getAllocatorStats(const SP_Device*, SP_AllocatorStats*) { return false; }  // TF's BFC keeps them

TF_Bool deviceMemoryUsage(const SP_Device* device, int64_t* free, int64_t* total) {
  *total = deviceMemoryBytes();
  *free = *total - g_allocated[device->ordinal].load();
  return true;
}

// TensorFlow's real GPU device creates non-blocking streams: they do not synchronize with the
// legacy default stream, so nothing here may rely on it.
void createStream(const SP_Device* device, SP_Stream* out, TF_Status* status) {
  cudaStream_t s = nullptr;
  *out = nullptr;
  if (select(device, status) &&
      check(cuda().streamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags", device, status)) {
    *out = reinterpret_cast<SP_Stream>(s);
    noteStreamCreated(device->ordinal, s);
  }
}

void destroyStream(const SP_Device* device, SP_Stream s) {
  noteStreamDestroyed(device->ordinal, stream(s));
  if (select(device)) logFailure(cuda().streamDestroy(stream(s)), "cudaStreamDestroy", device);
}

// `dependent` waits for the work queued on `other` so far: an event recorded on `other`. TensorFlow
// passes streams of two devices for a copy between devices (`device` is one of them): the event
// belongs to `other`'s device, as CUDA requires.
void createStreamDependency(const SP_Device* device, SP_Stream dependent, SP_Stream other, TF_Status* status) {
  const int otherDevice = streamDevice(stream(other));
  const int dependentDevice = streamDevice(stream(dependent));
  if (otherDevice < 0 || dependentDevice < 0) {
    TF_SetStatus(status, TF_INVALID_ARGUMENT, "create_stream_dependency: a stream the plugin did not create");
    return;
  }
  if (!check(cuda().setDevice(otherDevice), "cudaSetDevice", device, status)) return;
  cudaEvent_t e = nullptr;
  if (!check(cuda().eventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreateWithFlags", device, status))
    return;
  if (check(cuda().eventRecord(e, stream(other)), "cudaEventRecord", device, status) &&
      check(cuda().setDevice(dependentDevice), "cudaSetDevice", device, status))
    check(cuda().streamWaitEvent(stream(dependent), e, 0), "cudaStreamWaitEvent", device, status);
  logFailure(cuda().eventDestroy(e), "cudaEventDestroy", device);
}

// The stream's error state without waiting and without observing its completion (a successful
// cudaStreamQuery would order later work after it and hide missing waits): the context's error.
void getStreamStatus(const SP_Device* device, SP_Stream, TF_Status* status) {
  if (select(device, status)) check(cuda().getLastError(), "the stream's context", device, status);
}

void createEvent(const SP_Device* device, SP_Event* out, TF_Status* status) {
  cudaEvent_t e = nullptr;
  *out = nullptr;
  if (select(device, status) &&
      check(cuda().eventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreateWithFlags", device, status))
    *out = reinterpret_cast<SP_Event>(e);
}

void destroyEvent(const SP_Device* device, SP_Event e) {
  if (select(device)) logFailure(cuda().eventDestroy(event(e)), "cudaEventDestroy", device);
}

SE_EventStatus getEventStatus(const SP_Device* device, SP_Event e) {
  if (!select(device)) return SE_EVENT_ERROR;
  cudaError_t status = cuda().eventQuery(event(e));
  if (status == cudaSuccess) return SE_EVENT_COMPLETE;
  if (status == cudaErrorNotReady) return SE_EVENT_PENDING;
  logFailure(status, "cudaEventQuery", device);
  return SE_EVENT_ERROR;
}

void recordEvent(const SP_Device* device, SP_Stream s, SP_Event e, TF_Status* status) {
  if (select(device, status)) check(cuda().eventRecord(event(e), stream(s)), "cudaEventRecord", device, status);
}

void waitForEvent(const SP_Device* device, SP_Stream s, SP_Event e, TF_Status* status) {
  if (select(device, status))
    check(cuda().streamWaitEvent(stream(s), event(e), 0), "cudaStreamWaitEvent", device, status);
}

// Timers need event timing, which the stand-in does not model.
void timerUnsupported(const SP_Device*, SP_Timer* timer, TF_Status* status) {
  *timer = nullptr;
  TF_SetStatus(status, TF_UNIMPLEMENTED, "the stand-in GPU device has no timers (event timing is not modelled)");
}
void destroyTimer(const SP_Device*, SP_Timer) {}
void timerOpUnsupported(const SP_Device*, SP_Stream, SP_Timer, TF_Status* status) {
  TF_SetStatus(status, TF_UNIMPLEMENTED, "the stand-in GPU device has no timers (event timing is not modelled)");
}

void copyAsync(const SP_Device* device, SP_Stream s, void* dst, const void* src, uint64_t size, cudaMemcpyKind kind,
               TF_Status* status) {
  if (select(device, status) &&
      check(cuda().memcpyAsync(dst, src, size, kind, stream(s)), "cudaMemcpyAsync", device, status))
    noteCopyQueued(device->ordinal, dst, src, size);
}

void memcpyDtoH(const SP_Device* device, SP_Stream s, void* host_dst, const SP_DeviceMemoryBase* src, uint64_t size,
                TF_Status* status) {
  copyAsync(device, s, host_dst, src->opaque, size, cudaMemcpyDeviceToHost, status);
}

void memcpyHtoD(const SP_Device* device, SP_Stream s, SP_DeviceMemoryBase* dst, const void* host_src, uint64_t size,
                TF_Status* status) {
  copyAsync(device, s, dst->opaque, host_src, size, cudaMemcpyHostToDevice, status);
}

void memcpyDtoD(const SP_Device* device, SP_Stream s, SP_DeviceMemoryBase* dst, const SP_DeviceMemoryBase* src,
                uint64_t size, TF_Status* status) {
  copyAsync(device, s, dst->opaque, src->opaque, size, cudaMemcpyDeviceToDevice, status);
}

// A synchronous copy is what cudaMemcpy does: on the legacy default stream, then waited for. It
// is not ordered after TensorFlow's (non-blocking) streams, as in CUDA.
void copySync(const SP_Device* device, void* dst, const void* src, uint64_t size, cudaMemcpyKind kind,
              TF_Status* status) {
  if (select(device, status) &&
      check(cuda().memcpyAsync(dst, src, size, kind, nullptr), "cudaMemcpyAsync (synchronous copy)", device, status))
    check(cuda().streamSynchronize(nullptr), "cudaStreamSynchronize (synchronous copy)", device, status);
}

void syncMemcpyDtoH(const SP_Device* device, void* host_dst, const SP_DeviceMemoryBase* src, uint64_t size,
                    TF_Status* status) {
  copySync(device, host_dst, src->opaque, size, cudaMemcpyDeviceToHost, status);
}

void syncMemcpyHtoD(const SP_Device* device, SP_DeviceMemoryBase* dst, const void* host_src, uint64_t size,
                    TF_Status* status) {
  copySync(device, dst->opaque, host_src, size, cudaMemcpyHostToDevice, status);
}

void syncMemcpyDtoD(const SP_Device* device, SP_DeviceMemoryBase* dst, const SP_DeviceMemoryBase* src, uint64_t size,
                    TF_Status* status) {
  copySync(device, dst->opaque, src->opaque, size, cudaMemcpyDeviceToDevice, status);
}

void blockHostForEvent(const SP_Device* device, SP_Event e, TF_Status* status) {
  if (select(device, status)) check(cuda().eventSynchronize(event(e)), "cudaEventSynchronize", device, status);
}

void blockHostUntilDone(const SP_Device* device, SP_Stream s, TF_Status* status) {
  if (select(device, status)) check(cuda().streamSynchronize(stream(s)), "cudaStreamSynchronize", device, status);
}

void synchronizeAllActivity(const SP_Device* device, TF_Status* status) {
  if (select(device, status)) check(cuda().deviceSynchronize(), "cudaDeviceSynchronize", device, status);
}

void memsetBytes(const SP_Device* device, SP_Stream s, SP_DeviceMemoryBase* location, int value, uint64_t size,
                 TF_Status* status) {
  if (select(device, status))
    check(cuda().memsetAsync(location->opaque, value, size, stream(s)), "cudaMemsetAsync", device, status);
}

void memZero(const SP_Device* device, SP_Stream s, SP_DeviceMemoryBase* location, uint64_t size, TF_Status* status) {
  memsetBytes(device, s, location, 0, size, status);
}

void memset8(const SP_Device* device, SP_Stream s, SP_DeviceMemoryBase* location, uint8_t pattern, uint64_t size,
             TF_Status* status) {
  memsetBytes(device, s, location, pattern, size, status);
}

// cudaMemsetAsync sets bytes: a 32-bit pattern whose four bytes are equal is one of those; any
// other needs cuMemsetD32Async, which the stand-in does not have.
void memset32(const SP_Device* device, SP_Stream s, SP_DeviceMemoryBase* location, uint32_t pattern, uint64_t size,
              TF_Status* status) {
  const uint32_t low = pattern & 0xFFu;
  if (pattern != low * 0x01010101u) {
    TF_SetStatus(status, TF_UNIMPLEMENTED,
                 "the stand-in GPU device cannot memset a 32-bit pattern whose bytes differ "
                 "(cuMemsetD32Async is not modelled)");
    return;
  }
  memsetBytes(device, s, location, static_cast<int>(low), size, status);
}

struct HostCallback {
  SE_StatusCallbackFn fn;
  void* arg;
  int ordinal;
};

// Runs on the stream's thread: TensorFlow's callback, whose failure has nowhere to go but stderr
// (as a CUDA host function, it has no status).
void runHostCallback(void* p) {
  auto* cb = static_cast<HostCallback*>(p);
  TF_Status* status = TF_NewStatus();
  cb->fn(cb->arg, status);
  if (TF_GetCode(status) != TF_OK)
    std::fprintf(stderr, "hvd-tf-standin-gpu: device %d: a host callback failed: %s\n", cb->ordinal,
                 TF_Message(status));
  TF_DeleteStatus(status);
  delete cb;
}

TF_Bool hostCallback(const SP_Device* device, SP_Stream s, SE_StatusCallbackFn fn, void* arg) {
  if (!select(device)) return false;
  auto* cb = new HostCallback{fn, arg, device->ordinal};
  cudaError_t e = cuda().launchHostFunc(stream(s), runHostCallback, cb);
  logFailure(e, "launching a host function", device);
  if (e != cudaSuccess) delete cb;
  return e == cudaSuccess;
}

}  // namespace

int64_t deviceMemoryBytes() {
  static const int64_t bytes = [] {
    const char* env = std::getenv("HVD_TF_STANDIN_GPU_MB");
    int64_t mib = kDefaultMemoryMiB;
    if (env != nullptr) {
      char* end = nullptr;
      long long n = std::strtoll(env, &end, 10);
      if (*env == '\0' || *end != '\0' || n < 1) {
        std::fprintf(stderr, "hvd-tf-standin-gpu: HVD_TF_STANDIN_GPU_MB='%s' is not a positive number of MiB\n", env);
        std::abort();
      }
      mib = n;
    }
    return mib << 20;
  }();
  return bytes;
}

void fillStreamExecutor(SP_StreamExecutor* se) {
  se->struct_size = SP_STREAMEXECUTOR_STRUCT_SIZE;
  se->allocate = allocate;
  se->deallocate = deallocate;
  se->host_memory_allocate = hostMemoryAllocate;
  se->host_memory_deallocate = hostMemoryDeallocate;
  se->unified_memory_allocate = nullptr;  // SP_Platform.supports_unified_memory is false
  se->unified_memory_deallocate = nullptr;
  se->get_allocator_stats = getAllocatorStats;
  se->device_memory_usage = deviceMemoryUsage;
  se->create_stream = createStream;
  se->destroy_stream = destroyStream;
  se->create_stream_dependency = createStreamDependency;
  se->get_stream_status = getStreamStatus;
  se->create_event = createEvent;
  se->destroy_event = destroyEvent;
  se->get_event_status = getEventStatus;
  se->record_event = recordEvent;
  se->wait_for_event = waitForEvent;
  se->create_timer = timerUnsupported;
  se->destroy_timer = destroyTimer;
  se->start_timer = timerOpUnsupported;
  se->stop_timer = timerOpUnsupported;
  se->memcpy_dtoh = memcpyDtoH;
  se->memcpy_htod = memcpyHtoD;
  se->memcpy_dtod = memcpyDtoD;
  se->sync_memcpy_dtoh = syncMemcpyDtoH;
  se->sync_memcpy_htod = syncMemcpyHtoD;
  se->sync_memcpy_dtod = syncMemcpyDtoD;
  se->block_host_for_event = blockHostForEvent;
  se->block_host_until_done = blockHostUntilDone;
  se->synchronize_all_activity = synchronizeAllActivity;
  se->mem_zero = memZero;
  se->memset = memset8;
  se->memset32 = memset32;
  se->host_callback = hostCallback;
}

}  // namespace hvd_tf_standin
