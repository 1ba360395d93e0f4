// The CUDA runtime entry points of cuda_api.h's RuntimeApi, over host memory. Misuse CUDA
// reports is reported here too (with a line on stderr saying what and where); see README.md.
#include <cuda_runtime_api.h>

#include <cstdlib>
#include <cstring>
#include <deque>
#include <set>
#include <sstream>

#include "runtime_state.h"
#include "standin_hooks.h"

using standin::Access;
using standin::Clock;
using standin::fail;
using standin::MemInfo;
using standin::MemKind;
using standin::State;
using standin::state;

namespace standin {
namespace {

thread_local int t_device = 0;

constexpr size_t kAlignment = 256;
// Freed blocks are kept this long (in bytes) before they go back to the C heap, so that a second
// free of the same pointer is recognized as such instead of freeing a newer allocation.
constexpr size_t kQuarantineBytes = size_t{64} << 20;
// These live as long as the process (never destroyed: memory and handles stay reachable).
auto& g_quarantine = *new std::deque<std::pair<void*, size_t>>();
size_t g_quarantineBytes = 0;
auto& g_freed = *new std::set<uintptr_t>();
// Handles are never freed (a stale handle must never name a new object); kept reachable here.
auto& g_retiredStreams = *new std::vector<cudaStream_t>();
auto& g_retiredEvents = *new std::vector<cudaEvent_t>();
auto& g_retiredPools = *new std::vector<cudaMemPool_t>();

std::string hex(const void* p) {
  std::ostringstream out;
  out << p;
  return out.str();
}

void quarantine(void* p, size_t size) {
  g_freed.insert(reinterpret_cast<uintptr_t>(p));
  g_quarantine.emplace_back(p, size);
  g_quarantineBytes += size;
  while (g_quarantineBytes > kQuarantineBytes && g_quarantine.size() > 1) {
    auto [old, bytes] = g_quarantine.front();
    g_quarantine.pop_front();
    g_quarantineBytes -= bytes;
    g_freed.erase(reinterpret_cast<uintptr_t>(old));
    std::free(old);
  }
}

cudaError_t checkDevices(State& s) {
  if (s.devices <= 0) return fail(cudaErrorInitializationError, s.devicesError);
  return cudaSuccess;
}

// Memory that cudaMalloc/cudaHostAlloc handed out, freed by the matching call, and not in use by
// work the host has not seen complete.
cudaError_t release(void* ptr, bool pinned, const char* call) {
  if (ptr == nullptr) return cudaSuccess;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  auto addr = reinterpret_cast<uintptr_t>(ptr);
  auto it = s.allocations.find(addr);
  if (it == s.allocations.end()) {
    MemInfo inside = lookupMemoryLocked(s, ptr);
    if (inside.kind != MemKind::kHost)
      return fail(cudaErrorInvalidValue, std::string(call) + "(" + hex(ptr) +
                                             "): not the start of an allocation (it is inside " + hex(inside.base) +
                                             ")");
    if (g_freed.count(addr))
      return fail(cudaErrorInvalidValue, std::string(call) + "(" + hex(ptr) + "): double free (already freed)");
    return fail(cudaErrorInvalidValue, std::string(call) + "(" + hex(ptr) + "): not a pointer " +
                                           (pinned ? "cudaHostAlloc" : "cudaMalloc") + " returned");
  }
  if (it->second.pinned != pinned)
    return fail(cudaErrorInvalidValue,
                std::string(call) + "(" + hex(ptr) + "): the pointer is " +
                    (pinned ? "device memory (use cudaFree)" : "pinned host memory (use cudaFreeHost)"));
  if (cudaError_t sticky = stickyError(s, it->second.device)) return sticky;
  if (!it->second.freeQueued.empty())
    return fail(cudaErrorInvalidValue, std::string(call) + "(" + hex(ptr) + "): double free (its " +
                                           it->second.freeQueued + " is already queued)");
  for (const auto& r : it->second.records) {
    if (clockGet(s.host, r.stream) >= r.seq) continue;
    return fail(cudaErrorIllegalState, std::string(call) + "(" + hex(ptr) + "): the allocation is still in use by " +
                                           r.what + " (op " + std::to_string(r.seq) + " of " + r.streamName +
                                           "), whose completion the host has not observed (synchronize first)");
  }
  size_t size = it->second.size;
  s.allocations.erase(it);
  quarantine(ptr, size);
  return cudaSuccess;
}

// `device` < 0: the current device.
cudaError_t allocate(void** out, size_t size, bool pinned, const char* call, int device = -1) {
  if (out == nullptr) return fail(cudaErrorInvalidValue, std::string(call) + ": null output pointer");
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (cudaError_t e = checkDevices(s)) return e;
  if (device < 0) device = t_device;
  if (cudaError_t sticky = stickyError(s, device)) return sticky;
  *out = nullptr;
  if (size == 0) return cudaSuccess;
  size_t rounded = (size + kAlignment - 1) / kAlignment * kAlignment;
  void* p = std::aligned_alloc(kAlignment, rounded);
  if (p == nullptr)
    return fail(cudaErrorMemoryAllocation,
                std::string(call) + ": out of memory for " + std::to_string(size) + " bytes");
  // cudaMalloc'd memory is uninitialized: poison it (NaN for floats, -1 / max for integers).
  if (!pinned) std::memset(p, 0xFF, rounded);
  g_freed.erase(reinterpret_cast<uintptr_t>(p));
  standin::Allocation alloc;
  alloc.size = size;
  alloc.device = device;
  alloc.pinned = pinned;
  s.allocations[reinterpret_cast<uintptr_t>(p)] = std::move(alloc);
  *out = p;
  return cudaSuccess;
}

// `ptr`..+bytes lies inside the allocation `info` describes (host memory is not checked).
cudaError_t checkRange(const MemInfo& info, const void* ptr, size_t bytes, const std::string& what) {
  if (info.kind == MemKind::kHost) return cudaSuccess;
  size_t offset = static_cast<size_t>(static_cast<const char*>(ptr) - info.base);
  if (offset + bytes <= info.size) return cudaSuccess;
  return fail(cudaErrorInvalidValue, what + ": " + std::to_string(bytes) + " bytes at offset " +
                                         std::to_string(offset) + " run past the end of the " +
                                         std::to_string(info.size) + "-byte allocation " + hex(info.base));
}

const char* kindName(cudaMemcpyKind kind) {
  switch (kind) {
    case cudaMemcpyHostToHost: return "HostToHost";
    case cudaMemcpyHostToDevice: return "HostToDevice";
    case cudaMemcpyDeviceToHost: return "DeviceToHost";
    case cudaMemcpyDeviceToDevice: return "DeviceToDevice";
    case cudaMemcpyDefault: return "Default";
  }
  return "?";
}

// Shared by the event and stream queries: a status the host can read without blocking.
cudaError_t observeIfDone(State& s, const standin::Stream& stream, uint64_t seq, const Clock& clock) {
  if (stream.completed < seq) return cudaErrorNotReady;
  hostObserved(s, clock);
  return cudaSuccess;
}

std::shared_ptr<standin::Event> findEvent(State& s, cudaEvent_t event, const char* call, cudaError_t* error) {
  auto it = s.events.find(event);
  if (it != s.events.end()) return it->second;
  *error = fail(cudaErrorInvalidResourceHandle,
                std::string(call) + ": event " + hex(event) + " is not a live event (destroyed, or never created)");
  return nullptr;
}

}  // namespace

int currentDevice() { return state().devices > 0 ? t_device : -1; }

}  // namespace standin

using standin::t_device;

extern "C" {

HVD_STANDIN_EXPORT const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInitializationError: return "initialization error";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorIllegalState: return "the operation cannot be performed in the present state";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorNotSupported: return "operation not supported";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    default: return "unrecognized error code";
  }
}

HVD_STANDIN_EXPORT cudaError_t cudaGetLastError(void) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  cudaError_t last = standin::takeLastError();
  if (cudaError_t sticky = standin::stickyError(s, standin::currentDevice())) return sticky;
  return last;
}

HVD_STANDIN_EXPORT cudaError_t cudaRuntimeGetVersion(int* version) {
  if (version == nullptr) return fail(cudaErrorInvalidValue, "cudaRuntimeGetVersion: null output pointer");
  *version = CUDART_VERSION;
  return cudaSuccess;
}

HVD_STANDIN_EXPORT cudaError_t cudaDriverGetVersion(int* version) {
  if (version == nullptr) return fail(cudaErrorInvalidValue, "cudaDriverGetVersion: null output pointer");
  *version = CUDART_VERSION;
  return cudaSuccess;
}

HVD_STANDIN_EXPORT cudaError_t cudaGetDeviceCount(int* count) {
  if (count == nullptr) return fail(cudaErrorInvalidValue, "cudaGetDeviceCount: null output pointer");
  State& s = state();
  if (cudaError_t e = standin::checkDevices(s)) return e;
  *count = s.devices;
  return cudaSuccess;
}

HVD_STANDIN_EXPORT cudaError_t cudaGetDevice(int* device) {
  if (device == nullptr) return fail(cudaErrorInvalidValue, "cudaGetDevice: null output pointer");
  if (cudaError_t e = standin::checkDevices(state())) return e;
  *device = t_device;
  return cudaSuccess;
}

HVD_STANDIN_EXPORT cudaError_t cudaSetDevice(int device) {
  State& s = state();
  if (cudaError_t e = standin::checkDevices(s)) return e;
  if (device < 0 || device >= s.devices)
    return fail(cudaErrorInvalidDevice, "cudaSetDevice(" + std::to_string(device) + "): the stand-in has " +
                                            std::to_string(s.devices) + " devices (HVD_STANDIN_DEVICES)");
  t_device = device;
  return cudaSuccess;
}

HVD_STANDIN_EXPORT cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attributes, const void* ptr) {
  if (attributes == nullptr) return fail(cudaErrorInvalidValue, "cudaPointerGetAttributes: null output pointer");
  MemInfo info = standin::lookupMemory(ptr);
  std::memset(attributes, 0, sizeof(*attributes));
  switch (info.kind) {
    case MemKind::kDevice:
      attributes->type = cudaMemoryTypeDevice;
      attributes->device = info.device;
      attributes->devicePointer = const_cast<void*>(ptr);
      break;
    case MemKind::kPinned:
      attributes->type = cudaMemoryTypeHost;
      attributes->device = info.device;
      attributes->devicePointer = const_cast<void*>(ptr);
      attributes->hostPointer = const_cast<void*>(ptr);
      break;
    case MemKind::kHost:
      attributes->type = cudaMemoryTypeUnregistered;
      attributes->device = -2;
      break;
  }
  return cudaSuccess;
}

HVD_STANDIN_EXPORT cudaError_t cudaMalloc(void** devPtr, size_t size) {
  return standin::allocate(devPtr, size, false, "cudaMalloc");
}

HVD_STANDIN_EXPORT cudaError_t cudaFree(void* devPtr) { return standin::release(devPtr, false, "cudaFree"); }

HVD_STANDIN_EXPORT cudaError_t cudaHostAlloc(void** pHost, size_t size, unsigned int flags) {
  if (flags & ~0xFu) return fail(cudaErrorInvalidValue, "cudaHostAlloc: unknown flags " + std::to_string(flags));
  return standin::allocate(pHost, size, true, "cudaHostAlloc");
}

HVD_STANDIN_EXPORT cudaError_t cudaFreeHost(void* ptr) { return standin::release(ptr, true, "cudaFreeHost"); }

HVD_STANDIN_EXPORT cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (value == nullptr) return fail(cudaErrorInvalidValue, "cudaDeviceGetAttribute: null output pointer");
  State& s = state();
  if (cudaError_t e = standin::checkDevices(s)) return e;
  if (device < 0 || device >= s.devices)
    return fail(cudaErrorInvalidDevice, "cudaDeviceGetAttribute: no device " + std::to_string(device));
  if (attr != cudaDevAttrMemoryPoolsSupported)
    return fail(cudaErrorInvalidValue, "cudaDeviceGetAttribute: attribute " + std::to_string(attr) +
                                           " is not modelled by the stand-in (only cudaDevAttrMemoryPoolsSupported)");
  // HVD_STANDIN_NO_MEMPOOLS=1: a device without stream-ordered allocation (the fallback path).
  const char* off = std::getenv("HVD_STANDIN_NO_MEMPOOLS");
  *value = off != nullptr && off[0] == '1' ? 0 : 1;
  return cudaSuccess;
}

HVD_STANDIN_EXPORT cudaError_t cudaMemPoolCreate(cudaMemPool_t* pool, const cudaMemPoolProps* props) {
  if (pool == nullptr || props == nullptr) return fail(cudaErrorInvalidValue, "cudaMemPoolCreate: null pointer");
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (cudaError_t e = standin::checkDevices(s)) return e;
  if (props->allocType != cudaMemAllocationTypePinned || props->location.type != cudaMemLocationTypeDevice ||
      props->location.id < 0 || props->location.id >= s.devices)
    return fail(cudaErrorInvalidValue,
                "cudaMemPoolCreate: the stand-in models pinned pools of a device only "
                "(cudaMemAllocationTypePinned, cudaMemLocationTypeDevice, a valid id)");
  // Handles are never freed, so a destroyed pool's handle never names a new pool.
  auto handle = reinterpret_cast<cudaMemPool_t>(new char);
  s.pools[handle] = standin::Pool{props->location.id, 0};
  *pool = handle;
  return cudaSuccess;
}

HVD_STANDIN_EXPORT cudaError_t cudaMemPoolDestroy(cudaMemPool_t pool) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.pools.erase(pool) == 0)
    return fail(cudaErrorInvalidValue, "cudaMemPoolDestroy: " + standin::hex(pool) + " is not a live pool");
  standin::g_retiredPools.push_back(pool);
  return cudaSuccess;  // as in CUDA, allocations still out are released when freed
}

HVD_STANDIN_EXPORT cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.pools.find(pool);
  if (it == s.pools.end())
    return fail(cudaErrorInvalidValue, "cudaMemPoolSetAttribute: " + standin::hex(pool) + " is not a live pool");
  if (attr != cudaMemPoolAttrReleaseThreshold || value == nullptr)
    return fail(cudaErrorInvalidValue,
                "cudaMemPoolSetAttribute: only cudaMemPoolAttrReleaseThreshold (a uint64_t) "
                "is modelled");
  it->second.releaseThreshold = *static_cast<const uint64_t*>(value);
  return cudaSuccess;
}

// Stream-ordered allocation: the memory is valid from this point of `stream` on. The stand-in
// hands out fresh (poisoned) memory and queues a marker that "writes" all of it, so that the
// ordering checker reports any use from a stream not ordered after the allocation.
HVD_STANDIN_EXPORT cudaError_t cudaMallocFromPoolAsync(void** ptr, size_t size, cudaMemPool_t pool,
                                                       cudaStream_t stream) {
  int device = -1;
  {
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    auto it = s.pools.find(pool);
    if (it == s.pools.end())
      return fail(cudaErrorInvalidValue, "cudaMallocFromPoolAsync: " + standin::hex(pool) + " is not a live pool");
    device = it->second.device;
  }
  if (size == 0) return fail(cudaErrorInvalidValue, "cudaMallocFromPoolAsync: size 0");
  if (cudaError_t e = standin::allocate(ptr, size, false, "cudaMallocFromPoolAsync", device)) return e;
  {
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    s.allocations[reinterpret_cast<uintptr_t>(*ptr)].pooled = true;
  }
  const std::string what = "cudaMallocFromPoolAsync(" + std::to_string(size) + " bytes)";
  if (cudaError_t e = standin::enqueue(stream, what, {{*ptr, size, true}}, nullptr, device)) {
    standin::release(*ptr, false, "cudaMallocFromPoolAsync (undoing a failed allocation)");
    *ptr = nullptr;
    return e;
  }
  return cudaSuccess;
}

// Stream-ordered free: queued on `stream` as an op that "writes" the whole allocation, so every
// earlier use on another stream must be ordered before it (cudaStreamWaitEvent chain or host
// observation), else it is an ordering error; any use queued after it is a use after free. The
// memory goes back when the stream reaches the op.
HVD_STANDIN_EXPORT cudaError_t cudaFreeAsync(void* devPtr, cudaStream_t stream) {
  if (devPtr == nullptr) return cudaSuccess;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.allocations.find(reinterpret_cast<uintptr_t>(devPtr));
  if (it == s.allocations.end() || it->second.pinned || !it->second.pooled)
    return fail(cudaErrorInvalidValue, "cudaFreeAsync(" + standin::hex(devPtr) +
                                           "): not the start of a live cudaMallocFromPoolAsync allocation");
  if (!it->second.freeQueued.empty())
    return fail(cudaErrorInvalidValue, "cudaFreeAsync(" + standin::hex(devPtr) + "): double free (its " +
                                           it->second.freeQueued + " is queued)");
  cudaError_t error = cudaSuccess;
  auto target = standin::resolveStream(s, stream, &error);
  if (!target) return error;
  const size_t size = it->second.size;
  const std::string what = "cudaFreeAsync(" + std::to_string(size) + " bytes)";
  if (cudaError_t e = standin::enqueueLocked(s, target, what, {{devPtr, size, true}}, [devPtr] {
        State& st = state();
        std::lock_guard<std::mutex> inner(st.mu);
        auto a = st.allocations.find(reinterpret_cast<uintptr_t>(devPtr));
        if (a == st.allocations.end()) return;
        const size_t bytes = a->second.size;
        st.allocations.erase(a);
        standin::quarantine(devPtr, bytes);
      }))
    return e;
  it->second.freeQueued = what + " on " + target->name;
  return cudaSuccess;
}

HVD_STANDIN_EXPORT cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind,
                                               cudaStream_t stream) {
  std::string what =
      std::string("cudaMemcpyAsync(") + standin::kindName(kind) + ", " + std::to_string(count) + " bytes)";
  if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault)
    return fail(cudaErrorInvalidMemcpyDirection, what + ": not a cudaMemcpyKind");
  if (count > 0 && (dst == nullptr || src == nullptr)) return fail(cudaErrorInvalidValue, what + ": null pointer");
  MemInfo d = standin::lookupMemory(dst);
  MemInfo s = standin::lookupMemory(src);
  bool dstDevice = d.kind == MemKind::kDevice;
  bool srcDevice = s.kind == MemKind::kDevice;
  bool ok = kind == cudaMemcpyDefault || (kind == cudaMemcpyHostToHost && !dstDevice && !srcDevice) ||
            (kind == cudaMemcpyHostToDevice && dstDevice && !srcDevice) ||
            (kind == cudaMemcpyDeviceToHost && !dstDevice && srcDevice) ||
            (kind == cudaMemcpyDeviceToDevice && dstDevice && srcDevice);
  if (!ok)
    return fail(cudaErrorInvalidValue, what + ": the destination is " + (dstDevice ? "device" : "host") +
                                           " memory and the source is " + (srcDevice ? "device" : "host") + " memory");
  if (cudaError_t e = standin::checkRange(d, dst, count, what + " destination")) return e;
  if (cudaError_t e = standin::checkRange(s, src, count, what + " source")) return e;
  if (count == 0) return standin::enqueue(stream, what, {}, nullptr);
  return standin::enqueue(stream, what, {{src, count, false}, {dst, count, true}},
                          [dst, src, count] { std::memmove(dst, src, count); });
}

HVD_STANDIN_EXPORT cudaError_t cudaMemsetAsync(void* devPtr, int value, size_t count, cudaStream_t stream) {
  std::string what = "cudaMemsetAsync(" + std::to_string(count) + " bytes)";
  MemInfo d = standin::lookupMemory(devPtr);
  if (count > 0 && d.kind != MemKind::kDevice)
    return fail(cudaErrorInvalidValue, what + ": " + standin::hex(devPtr) + " is not device memory");
  if (cudaError_t e = standin::checkRange(d, devPtr, count, what)) return e;
  return standin::enqueue(stream, what, {{devPtr, count, true}},
                          [devPtr, value, count] { std::memset(devPtr, value, count); });
}

HVD_STANDIN_EXPORT cudaError_t cudaStreamCreateWithFlags(cudaStream_t* pStream, unsigned int flags) {
  if (pStream == nullptr) return fail(cudaErrorInvalidValue, "cudaStreamCreateWithFlags: null output pointer");
  if (flags & ~unsigned{cudaStreamNonBlocking})
    return fail(cudaErrorInvalidValue, "cudaStreamCreateWithFlags: unknown flags " + std::to_string(flags));
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (cudaError_t e = standin::checkDevices(s)) return e;
  if (cudaError_t sticky = standin::stickyError(s, t_device)) return sticky;
  auto stream = standin::startStream(s, t_device, (flags & cudaStreamNonBlocking) == 0, false);
  auto* handle = new CUstream_st{stream->id};  // never freed: a stale handle never names a new stream
  s.streams[handle] = stream;
  *pStream = handle;
  return cudaSuccess;
}

HVD_STANDIN_EXPORT cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = stream == nullptr || stream == cudaStreamLegacy ? s.streams.end() : s.streams.find(stream);
  if (it == s.streams.end())
    return fail(cudaErrorInvalidResourceHandle,
                "cudaStreamDestroy(" + standin::streamName(stream) + "): not a live created stream");
  it->second->destroyed = true;  // its thread finishes the queued work, then exits
  standin::g_retiredStreams.push_back(it->first);
  s.streams.erase(it);
  s.cv.notify_all();
  return cudaSuccess;
}

HVD_STANDIN_EXPORT cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
  if (flags != 0)
    return fail(cudaErrorInvalidValue,
                "cudaStreamWaitEvent: flags " + std::to_string(flags) + " are not modelled (only 0)");
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  cudaError_t error = cudaSuccess;
  auto ev = standin::findEvent(s, event, "cudaStreamWaitEvent", &error);
  if (!ev) return error;
  auto target = standin::resolveStream(s, stream, &error);
  if (!target) return error;
  if (!ev->recorded) return standin::stickyError(s, target->device);  // waits for nothing, as in CUDA
  return standin::enqueueLocked(s, target, "cudaStreamWaitEvent", {}, nullptr, {{ev->stream, ev->seq}}, &ev->clock);
}

HVD_STANDIN_EXPORT cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  State& s = state();
  std::unique_lock<std::mutex> lock(s.mu);
  cudaError_t error = cudaSuccess;
  auto target = standin::resolveStream(s, stream, &error);
  if (!target) return error;
  uint64_t seq = 0;
  Clock clock;
  // A marker op: on the legacy stream it also waits for the blocking streams' earlier work.
  if (cudaError_t e =
          standin::enqueueLocked(s, target, "cudaStreamSynchronize", {}, nullptr, {}, nullptr, &seq, &clock))
    return e;
  standin::waitCompleted(s, lock, *target, seq);
  standin::hostObserved(s, clock);
  return standin::stickyError(s, target->device);
}

// Waits until every stream of the current device (the legacy one and streams being destroyed
// included) has run the work queued before the call; the host then has observed all of it (its
// clock covers every one of those streams' clocks), so work queued later by any thread is ordered
// after it. Work queued by other threads while it waits is not waited for.
HVD_STANDIN_EXPORT cudaError_t cudaDeviceSynchronize(void) {
  State& s = state();
  std::unique_lock<std::mutex> lock(s.mu);
  if (cudaError_t e = standin::checkDevices(s)) return e;
  const int device = t_device;
  if (cudaError_t sticky = standin::stickyError(s, device)) {
    standin::setLastError(sticky);
    return sticky;
  }
  std::vector<std::pair<std::shared_ptr<standin::Stream>, uint64_t>> pending;
  Clock clock;
  for (const auto& stream : s.running) {
    if (stream->device != device) continue;
    pending.emplace_back(stream, stream->enqueued);
    standin::clockMerge(clock, stream->clock);
  }
  for (const auto& [stream, seq] : pending) standin::waitCompleted(s, lock, *stream, seq);
  standin::hostObserved(s, clock);
  return standin::stickyError(s, device);
}

HVD_STANDIN_EXPORT cudaError_t cudaStreamQuery(cudaStream_t stream) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  cudaError_t error = cudaSuccess;
  auto target = standin::resolveStream(s, stream, &error);
  if (!target) return error;
  if (cudaError_t sticky = standin::stickyError(s, target->device)) return sticky;
  return standin::observeIfDone(s, *target, target->enqueued, target->clock);
}

HVD_STANDIN_EXPORT cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  if (event == nullptr) return fail(cudaErrorInvalidValue, "cudaEventCreateWithFlags: null output pointer");
  const unsigned known = cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess;
  if ((flags & ~known) || ((flags & cudaEventInterprocess) && !(flags & cudaEventDisableTiming)))
    return fail(cudaErrorInvalidValue, "cudaEventCreateWithFlags: invalid flags " + std::to_string(flags));
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (cudaError_t e = standin::checkDevices(s)) return e;
  if (cudaError_t sticky = standin::stickyError(s, t_device)) return sticky;
  auto ev = std::make_shared<standin::Event>();
  ev->device = t_device;
  ev->flags = flags;
  auto* handle = new CUevent_st{s.nextId++};  // never freed: a stale handle never names a new event
  s.events[handle] = ev;
  *event = handle;
  return cudaSuccess;
}

HVD_STANDIN_EXPORT cudaError_t cudaEventDestroy(cudaEvent_t event) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  cudaError_t error = cudaSuccess;
  if (!standin::findEvent(s, event, "cudaEventDestroy", &error)) return error;
  standin::g_retiredEvents.push_back(event);
  s.events.erase(event);
  return cudaSuccess;
}

HVD_STANDIN_EXPORT cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  cudaError_t error = cudaSuccess;
  auto ev = standin::findEvent(s, event, "cudaEventRecord", &error);
  if (!ev) return error;
  auto target = standin::resolveStream(s, stream, &error);
  if (!target) return error;
  if (target->device != ev->device)
    return fail(cudaErrorInvalidResourceHandle, "cudaEventRecord: the event belongs to device " +
                                                    std::to_string(ev->device) + " and " + target->name +
                                                    " to device " + std::to_string(target->device));
  uint64_t seq = 0;
  Clock clock;
  if (cudaError_t e = standin::enqueueLocked(s, target, "cudaEventRecord", {}, nullptr, {}, nullptr, &seq, &clock))
    return e;
  ev->recorded = true;
  ev->stream = target;
  ev->seq = seq;
  ev->clock = std::move(clock);
  return cudaSuccess;
}

HVD_STANDIN_EXPORT cudaError_t cudaEventQuery(cudaEvent_t event) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  cudaError_t error = cudaSuccess;
  auto ev = standin::findEvent(s, event, "cudaEventQuery", &error);
  if (!ev) return error;
  if (cudaError_t sticky = standin::stickyError(s, ev->device)) return sticky;
  if (!ev->recorded) return cudaSuccess;
  return standin::observeIfDone(s, *ev->stream, ev->seq, ev->clock);
}

HVD_STANDIN_EXPORT cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  State& s = state();
  std::unique_lock<std::mutex> lock(s.mu);
  cudaError_t error = cudaSuccess;
  auto ev = standin::findEvent(s, event, "cudaEventSynchronize", &error);
  if (!ev) return error;
  if (!ev->recorded) return standin::stickyError(s, ev->device);
  auto stream = ev->stream;
  uint64_t seq = ev->seq;
  Clock clock = ev->clock;
  standin::waitCompleted(s, lock, *stream, seq);
  standin::hostObserved(s, clock);
  return standin::stickyError(s, ev->device);
}

struct HvdStandinGate {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
};

HVD_STANDIN_EXPORT HvdStandinGate* hvd_standin_gate(cudaStream_t stream) {
  // Never freed (a test hook: open_gate may race the op's end); kept reachable.
  static auto& gates = *new std::vector<HvdStandinGate*>();
  static auto& gatesMu = *new std::mutex();
  auto* gate = new HvdStandinGate();
  {
    std::lock_guard<std::mutex> lock(gatesMu);
    gates.emplace_back(gate);
  }
  cudaError_t e = standin::enqueue(stream, "test gate", {}, [gate] {
    std::unique_lock<std::mutex> lock(gate->mu);
    gate->cv.wait(lock, [&] { return gate->open; });
  });
  return e == cudaSuccess ? gate : nullptr;
}

HVD_STANDIN_EXPORT void hvd_standin_open_gate(HvdStandinGate* gate) {
  std::lock_guard<std::mutex> lock(gate->mu);
  gate->open = true;
  gate->cv.notify_all();
}

HVD_STANDIN_EXPORT cudaError_t hvd_standin_launch_host_func(cudaStream_t stream, cudaHostFn_t fn, void* arg) {
  if (fn == nullptr) return fail(cudaErrorInvalidValue, "hvd_standin_launch_host_func: null function");
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  cudaError_t error = cudaSuccess;
  auto target = standin::resolveStream(s, stream, &error);
  if (!target) return error;
  // Filled below, before the stream's thread (which needs the lock) can start the op.
  auto clock = std::make_shared<Clock>();
  return standin::enqueueLocked(
      s, target, "host function", {},
      [clock, fn, arg] {
        {
          State& st = state();
          std::lock_guard<std::mutex> inner(st.mu);
          standin::hostObserved(st, *clock);
        }
        fn(arg);
      },
      {}, nullptr, nullptr, clock.get());
}

HVD_STANDIN_EXPORT int hvd_standin_host_waiters(int device) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (device < 0 || device >= static_cast<int>(s.hostWaiters.size())) return 0;
  return s.hostWaiters[static_cast<size_t>(device)];
}

HVD_STANDIN_EXPORT void hvd_standin_clear_errors(void) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  for (auto& e : s.sticky) e = cudaSuccess;
  standin::setLastError(cudaSuccess);
}

}  // extern "C"
