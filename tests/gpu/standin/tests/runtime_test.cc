// The stand-in's CUDA runtime: devices, memory, streams, events, the ordering checker, handles.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

#include "backends/cuda/cuda_api.h"
#include "standin_hooks.h"

namespace {

std::vector<cudaStream_t> g_streams;  // created by the running test

// Every test starts from a clean context: a provoked sticky error does not leak into the next,
// and the host has observed all work of the previous test (whose records, on stack memory that
// the next test reuses, would otherwise be flagged).
class StandinRuntime : public ::testing::Test {
 protected:
  void SetUp() override {
    hvd_standin_clear_errors();
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  }
  void TearDown() override {
    hvd_standin_clear_errors();
    for (cudaStream_t s : g_streams) cudaStreamSynchronize(s);
    g_streams.clear();
    cudaGetLastError();
  }
};

void* deviceBuffer(size_t bytes) {
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, bytes), cudaSuccess);
  return p;
}

cudaStream_t newStream(unsigned flags = cudaStreamNonBlocking) {
  cudaStream_t s = nullptr;
  EXPECT_EQ(cudaStreamCreateWithFlags(&s, flags), cudaSuccess);
  g_streams.push_back(s);
  return s;
}

cudaEvent_t newEvent() {
  cudaEvent_t e = nullptr;
  EXPECT_EQ(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), cudaSuccess);
  return e;
}

// The tables of cuda_api.h filled from the stand-in's own symbols: compiling this checks every
// entry's signature against the real headers; dlsym checks the names the loader resolves.
TEST_F(StandinRuntime, ImplementsEveryEntryOfTheTables) {
  hvd::cuda::RuntimeApi rt{cudaGetErrorString,
                           cudaGetLastError,
                           cudaRuntimeGetVersion,
                           cudaDriverGetVersion,
                           cudaGetDeviceCount,
                           cudaGetDevice,
                           cudaSetDevice,
                           cudaPointerGetAttributes,
                           ::cudaMalloc,
                           cudaFree,
                           ::cudaHostAlloc,
                           cudaFreeHost,
                           cudaMemcpyAsync,
                           cudaMemsetAsync,
                           cudaStreamCreateWithFlags,
                           cudaStreamDestroy,
                           cudaStreamWaitEvent,
                           cudaStreamSynchronize,
                           cudaStreamQuery,
                           cudaEventCreateWithFlags,
                           cudaEventDestroy,
                           cudaEventRecord,
                           cudaEventQuery,
                           cudaEventSynchronize,
                           cudaDeviceSynchronize,
                           cudaDeviceGetAttribute,
                           cudaMemPoolCreate,
                           cudaMemPoolDestroy,
                           cudaMemPoolSetAttribute,
                           ::cudaMallocFromPoolAsync,
                           cudaFreeAsync};
  hvd::cuda::NcclApi nccl{ncclGetVersion,   ncclGetErrorString, ncclGetLastError, ncclGetUniqueId,
                          ncclCommInitRank, ncclCommDestroy,    ncclCommAbort,    ncclCommGetAsyncError,
                          ncclAllReduce,    ncclAllGather,      ncclBroadcast,    ncclReduceScatter,
                          ncclSend,         ncclRecv,           ncclGroupStart,   ncclGroupEnd};
  EXPECT_NE(rt.malloc, nullptr);
  EXPECT_NE(nccl.allReduce, nullptr);
  // What the loader does: dlopen the file by path, resolve every entry by its name.
  void* lib = dlopen(HVD_STANDIN_LIBRARY, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(lib, nullptr) << dlerror();
  for (const char* name : {"cudaGetErrorString",
                           "cudaGetLastError",
                           "cudaRuntimeGetVersion",
                           "cudaDriverGetVersion",
                           "cudaGetDeviceCount",
                           "cudaGetDevice",
                           "cudaSetDevice",
                           "cudaPointerGetAttributes",
                           "cudaMalloc",
                           "cudaFree",
                           "cudaHostAlloc",
                           "cudaFreeHost",
                           "cudaMemcpyAsync",
                           "cudaMemsetAsync",
                           "cudaStreamCreateWithFlags",
                           "cudaStreamDestroy",
                           "cudaStreamWaitEvent",
                           "cudaStreamSynchronize",
                           "cudaStreamQuery",
                           "cudaEventCreateWithFlags",
                           "cudaEventDestroy",
                           "cudaEventRecord",
                           "cudaEventQuery",
                           "cudaEventSynchronize",
                           "cudaDeviceSynchronize",
                           "cudaDeviceGetAttribute",
                           "cudaMemPoolCreate",
                           "cudaMemPoolDestroy",
                           "cudaMemPoolSetAttribute",
                           "cudaMallocFromPoolAsync",
                           "cudaFreeAsync",
                           "ncclGetVersion",
                           "ncclGetErrorString",
                           "ncclGetLastError",
                           "ncclGetUniqueId",
                           "ncclCommInitRank",
                           "ncclCommDestroy",
                           "ncclCommAbort",
                           "ncclCommGetAsyncError",
                           "ncclAllReduce",
                           "ncclAllGather",
                           "ncclBroadcast",
                           "ncclReduceScatter",
                           "ncclSend",
                           "ncclRecv",
                           "ncclGroupStart",
                           "ncclGroupEnd",
                           HVD_CUDA_KERNELS_SYMBOL})
    EXPECT_NE(dlsym(lib, name), nullptr) << name;
  EXPECT_EQ(dlsym(lib, "cudaMallocManaged"), nullptr);  // only what the tables use
  auto kernels = reinterpret_cast<HvdCudaKernelsFn>(dlsym(lib, HVD_CUDA_KERNELS_SYMBOL))();
  EXPECT_EQ(kernels->version, kHvdCudaKernelsVersion);
  int version = 0;
  EXPECT_EQ(cudaRuntimeGetVersion(&version), cudaSuccess);
  EXPECT_EQ(version, CUDART_VERSION);
  EXPECT_EQ(ncclGetVersion(&version), ncclSuccess);
  EXPECT_EQ(version, NCCL_VERSION_CODE);
}

TEST_F(StandinRuntime, DevicesArePerThread) {
  int count = 0;
  ASSERT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
  EXPECT_EQ(count, 2);  // HVD_STANDIN_DEVICES unset
  EXPECT_EQ(cudaSetDevice(2), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // not sticky
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  int other = -1;
  std::thread([&] { cudaGetDevice(&other); }).join();
  EXPECT_EQ(other, 0);
  int mine = -1;
  cudaGetDevice(&mine);
  EXPECT_EQ(mine, 1);
}

TEST_F(StandinRuntime, PointerAttributesComeFromTheAllocationTable) {
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  char* d = static_cast<char*>(deviceBuffer(1000));
  void* pinned = nullptr;
  ASSERT_EQ(cudaHostAlloc(&pinned, 64, cudaHostAllocDefault), cudaSuccess);
  int host = 0;
  cudaPointerAttributes a{};
  ASSERT_EQ(cudaPointerGetAttributes(&a, d + 10), cudaSuccess);
  EXPECT_EQ(a.type, cudaMemoryTypeDevice);
  EXPECT_EQ(a.device, 1);
  ASSERT_EQ(cudaPointerGetAttributes(&a, pinned), cudaSuccess);
  EXPECT_EQ(a.type, cudaMemoryTypeHost);
  ASSERT_EQ(cudaPointerGetAttributes(&a, &host), cudaSuccess);
  EXPECT_EQ(a.type, cudaMemoryTypeUnregistered);
  ASSERT_EQ(cudaPointerGetAttributes(&a, d + 1000), cudaSuccess);  // one past the end: not device memory
  EXPECT_EQ(a.type, cudaMemoryTypeUnregistered);
  EXPECT_EQ(cudaFree(pinned), cudaErrorInvalidValue);
  EXPECT_EQ(cudaFreeHost(d), cudaErrorInvalidValue);
  EXPECT_EQ(cudaFreeHost(pinned), cudaSuccess);
  EXPECT_EQ(cudaFree(d), cudaSuccess);
}

TEST_F(StandinRuntime, FreeOfUnknownInteriorOrFreedPointersFails) {
  int host = 0;
  EXPECT_EQ(cudaFree(&host), cudaErrorInvalidValue);
  char* d = static_cast<char*>(deviceBuffer(64));
  EXPECT_EQ(cudaFree(d + 8), cudaErrorInvalidValue);
  EXPECT_EQ(cudaFree(d), cudaSuccess);
  EXPECT_EQ(cudaFree(d), cudaErrorInvalidValue);  // double free
  EXPECT_EQ(cudaFree(nullptr), cudaSuccess);
}

TEST_F(StandinRuntime, AsyncCopiesRunLaterOnTheStreamThread) {
  cudaStream_t s = newStream();
  int* d = static_cast<int*>(deviceBuffer(sizeof(int)));
  int src = 7, dst = 0;
  HvdStandinGate* gate = hvd_standin_gate(s);
  ASSERT_NE(gate, nullptr);
  ASSERT_EQ(cudaMemcpyAsync(d, &src, sizeof(int), cudaMemcpyHostToDevice, s), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(&dst, d, sizeof(int), cudaMemcpyDeviceToHost, s), cudaSuccess);
  src = 8;  // the copy has not read the source yet: it sees the new value
  EXPECT_EQ(cudaStreamQuery(s), cudaErrorNotReady);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // NotReady is a status, not an error
  EXPECT_EQ(dst, 0);
  hvd_standin_open_gate(gate);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(dst, 8);
  EXPECT_EQ(cudaStreamQuery(s), cudaSuccess);
  EXPECT_EQ(cudaFree(d), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
}

TEST_F(StandinRuntime, EventsAreCompletionPoints) {
  cudaStream_t s = newStream();
  cudaEvent_t e = newEvent();
  EXPECT_EQ(cudaEventQuery(e), cudaSuccess);  // never recorded
  HvdStandinGate* gate = hvd_standin_gate(s);
  ASSERT_EQ(cudaEventRecord(e, s), cudaSuccess);
  EXPECT_EQ(cudaEventQuery(e), cudaErrorNotReady);
  hvd_standin_open_gate(gate);
  ASSERT_EQ(cudaEventSynchronize(e), cudaSuccess);
  EXPECT_EQ(cudaEventQuery(e), cudaSuccess);
  EXPECT_EQ(cudaEventDestroy(e), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
}

TEST_F(StandinRuntime, StreamWaitEventOrdersAnotherStream) {
  cudaStream_t a = newStream(), b = newStream();
  cudaEvent_t e = newEvent();
  int* d = static_cast<int*>(deviceBuffer(sizeof(int)));
  int one = 1, out = 0;
  HvdStandinGate* gate = hvd_standin_gate(a);
  ASSERT_EQ(cudaMemcpyAsync(d, &one, sizeof(int), cudaMemcpyHostToDevice, a), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(e, a), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(b, e, 0), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(&out, d, sizeof(int), cudaMemcpyDeviceToHost, b), cudaSuccess);
  EXPECT_EQ(cudaStreamQuery(b), cudaErrorNotReady);  // b waits for a, which is gated
  hvd_standin_open_gate(gate);
  ASSERT_EQ(cudaStreamSynchronize(b), cudaSuccess);
  EXPECT_EQ(out, 1);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

TEST_F(StandinRuntime, OrderingCheckerCatchesAMissingWait) {
  cudaStream_t a = newStream(), b = newStream();
  int* d = static_cast<int*>(deviceBuffer(16 * sizeof(int)));
  int out[16];
  ASSERT_EQ(cudaMemsetAsync(d, 0, 16 * sizeof(int), a), cudaSuccess);
  // b reads what a writes, with no event between them: an ordering error, sticky.
  EXPECT_EQ(cudaMemcpyAsync(out, d + 4, sizeof(int), cudaMemcpyDeviceToHost, b), cudaErrorLaunchFailure);
  EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchFailure);
  EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchFailure);  // sticky: not cleared by reading it
  EXPECT_EQ(cudaStreamSynchronize(a), cudaErrorLaunchFailure);
  EXPECT_EQ(cudaMemsetAsync(d, 0, 4, a), cudaErrorLaunchFailure);
  hvd_standin_clear_errors();
  ASSERT_EQ(cudaStreamSynchronize(a), cudaSuccess);
}

TEST_F(StandinRuntime, OrderingCheckerCatchesAWriteAfterAnUnorderedRead) {
  cudaStream_t a = newStream(), b = newStream();
  int* d = static_cast<int*>(deviceBuffer(sizeof(int)));
  ASSERT_EQ(cudaMemsetAsync(d, 0, sizeof(int), a), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(a), cudaSuccess);
  // Outlives the test: the copy is still queued on `a` when the test ends (the stand-in copies
  // to pageable memory asynchronously, as CUDA may), and runs during the fixture's teardown.
  static int out = 0;
  ASSERT_EQ(cudaMemcpyAsync(&out, d, sizeof(int), cudaMemcpyDeviceToHost, a), cudaSuccess);
  int* e = static_cast<int*>(deviceBuffer(sizeof(int)));
  ASSERT_EQ(cudaMemsetAsync(e, 0, sizeof(int), b), cudaSuccess);  // another buffer: fine
  EXPECT_EQ(cudaMemsetAsync(d, 1, sizeof(int), b), cudaErrorLaunchFailure);
}

TEST_F(StandinRuntime, OrderingCheckerAcceptsDisjointRangesAndEventChains) {
  cudaStream_t a = newStream(), b = newStream(), c = newStream();
  cudaEvent_t ea = newEvent(), eb = newEvent();
  char* d = static_cast<char*>(deviceBuffer(256));
  ASSERT_EQ(cudaMemsetAsync(d, 1, 128, a), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(d + 128, 2, 128, b), cudaSuccess);  // disjoint halves
  // c is ordered after a through b: a -> ea -> b -> eb -> c.
  ASSERT_EQ(cudaEventRecord(ea, a), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(b, ea, 0), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(eb, b), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(c, eb, 0), cudaSuccess);
  char out[256];
  ASSERT_EQ(cudaMemcpyAsync(out, d, 256, cudaMemcpyDeviceToHost, c), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(c), cudaSuccess);
  EXPECT_EQ(out[0], 1);
  EXPECT_EQ(out[255], 2);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

TEST_F(StandinRuntime, HostSynchronizationOrdersLaterWork) {
  cudaStream_t a = newStream(), b = newStream();
  cudaEvent_t e = newEvent();
  int* d = static_cast<int*>(deviceBuffer(sizeof(int)));
  int out = 0;
  ASSERT_EQ(cudaMemsetAsync(d, 0, sizeof(int), a), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(a), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(&out, d, sizeof(int), cudaMemcpyDeviceToHost, b), cudaSuccess);
  // An event the host has seen complete (query) counts as well.
  ASSERT_EQ(cudaMemsetAsync(d, 0, sizeof(int), b), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(e, b), cudaSuccess);
  while (cudaEventQuery(e) == cudaErrorNotReady) std::this_thread::yield();
  ASSERT_EQ(cudaMemsetAsync(d, 1, sizeof(int), a), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(a), cudaSuccess);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

TEST_F(StandinRuntime, DeviceSynchronizeOrdersLaterWorkOnEveryStream) {
  cudaStream_t a = newStream(cudaStreamNonBlocking), b = newStream(cudaStreamNonBlocking);
  int* d = static_cast<int*>(deviceBuffer(sizeof(int)));
  static int out = 0;  // the copies may still run after the test body
  // (a) b reads what a writes, with no event and no synchronization: an ordering error.
  ASSERT_EQ(cudaMemsetAsync(d, 0, sizeof(int), a), cudaSuccess);
  EXPECT_EQ(cudaMemcpyAsync(&out, d, sizeof(int), cudaMemcpyDeviceToHost, b), cudaErrorLaunchFailure);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorLaunchFailure);  // sticky, as for the other synchronizing calls
  hvd_standin_clear_errors();
  // (b) the same pair with cudaDeviceSynchronize between them: the host observed a's write.
  ASSERT_EQ(cudaMemsetAsync(d, 0, sizeof(int), a), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(cudaMemcpyAsync(&out, d, sizeof(int), cudaMemcpyDeviceToHost, b), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

TEST_F(StandinRuntime, DeviceSynchronizeWaitsForWorkQueuedByAnotherThread) {
  int* d = static_cast<int*>(deviceBuffer(sizeof(int)));
  cudaStream_t a = nullptr;
  HvdStandinGate* gate = nullptr;
  // Another thread queues a write on its own non-blocking stream, held back by a gate.
  std::thread([&] {
    a = newStream(cudaStreamNonBlocking);
    gate = hvd_standin_gate(a);
    EXPECT_EQ(cudaMemsetAsync(d, 7, sizeof(int), a), cudaSuccess);
  }).join();
  ASSERT_NE(gate, nullptr);
  EXPECT_EQ(cudaStreamQuery(a), cudaErrorNotReady);
  std::thread opener([gate] { hvd_standin_open_gate(gate); });
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // returns only once the gate and the write ran
  opener.join();
  EXPECT_EQ(*reinterpret_cast<volatile unsigned char*>(d), 7);  // device memory is host memory here
  // The host observed the write: another stream may read it, and the host may free it.
  cudaStream_t b = newStream(cudaStreamNonBlocking);
  static int out = 0;
  EXPECT_EQ(cudaMemcpyAsync(&out, d, sizeof(int), cudaMemcpyDeviceToHost, b), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(b), cudaSuccess);
  EXPECT_EQ(out, 0x07070707);
  EXPECT_EQ(cudaFree(d), cudaSuccess);
}

TEST_F(StandinRuntime, DeviceSynchronizeCoversTheCurrentDeviceOnly) {
  int* d = static_cast<int*>(deviceBuffer(sizeof(int)));  // device 0
  cudaStream_t a = newStream(cudaStreamNonBlocking);
  ASSERT_EQ(cudaMemsetAsync(d, 0, sizeof(int), a), cudaSuccess);
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // device 1 has no work: a is not observed
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  EXPECT_EQ(cudaFree(d), cudaErrorIllegalState);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(cudaFree(d), cudaSuccess);
}

// What the host function saw: the first byte of the buffer when it ran (-1: not run yet).
std::atomic<int> g_hostFuncSaw{-1};

TEST_F(StandinRuntime, HostFunctionsRunInStreamOrderAndCountAsHostObservation) {
  cudaStream_t a = newStream(), b = newStream();
  unsigned char* d = static_cast<unsigned char*>(deviceBuffer(64));
  g_hostFuncSaw = -1;
  HvdStandinGate* gate = hvd_standin_gate(a);
  ASSERT_EQ(cudaMemsetAsync(d, 5, 64, a), cudaSuccess);
  ASSERT_EQ(hvd_standin_launch_host_func(
                a, [](void* p) { g_hostFuncSaw = *static_cast<volatile unsigned char*>(p); }, d),
            cudaSuccess);
  EXPECT_EQ(g_hostFuncSaw, -1);  // the gate holds the stream
  hvd_standin_open_gate(gate);
  while (g_hostFuncSaw == -1) std::this_thread::yield();
  EXPECT_EQ(g_hostFuncSaw, 5);  // it ran after the memset
  // The host saw the memset complete (through the function): b may read the buffer.
  static unsigned char out[64];
  EXPECT_EQ(cudaMemcpyAsync(out, d, 64, cudaMemcpyDeviceToHost, b), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(b), cudaSuccess);
  EXPECT_EQ(out[63], 5);
  EXPECT_EQ(hvd_standin_launch_host_func(a, nullptr, nullptr), cudaErrorInvalidValue);
}

TEST_F(StandinRuntime, HostWaitersCountsThreadsBlockedOnDeviceWork) {
  cudaStream_t s = newStream();
  EXPECT_EQ(hvd_standin_host_waiters(0), 0);
  HvdStandinGate* gate = hvd_standin_gate(s);
  std::thread waiter([s] { EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess); });
  while (hvd_standin_host_waiters(0) == 0) std::this_thread::yield();
  EXPECT_EQ(hvd_standin_host_waiters(0), 1);
  EXPECT_EQ(hvd_standin_host_waiters(1), 0);  // another device
  EXPECT_EQ(hvd_standin_host_waiters(7), 0);  // no such device
  hvd_standin_open_gate(gate);
  waiter.join();
  EXPECT_EQ(hvd_standin_host_waiters(0), 0);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);  // complete already: not counted, no wait
}

TEST_F(StandinRuntime, LegacyDefaultStreamSynchronizesWithBlockingStreamsOnly) {
  cudaStream_t blocking = newStream(cudaStreamDefault), nonBlocking = newStream(cudaStreamNonBlocking);
  int* d = static_cast<int*>(deviceBuffer(sizeof(int)));
  int out = 0;
  ASSERT_EQ(cudaMemsetAsync(d, 0, sizeof(int), blocking), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(&out, d, sizeof(int), cudaMemcpyDeviceToHost, nullptr), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(d, 0, sizeof(int), blocking), cudaSuccess);  // after the null stream's read
  ASSERT_EQ(cudaStreamSynchronize(blocking), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(d, 0, sizeof(int), nonBlocking), cudaSuccess);
  EXPECT_EQ(cudaMemcpyAsync(&out, d, sizeof(int), cudaMemcpyDeviceToHost, cudaStreamLegacy), cudaErrorLaunchFailure);
}

TEST_F(StandinRuntime, FreeWhileQueuedWorkUsesTheBufferFails) {
  cudaStream_t s = newStream();
  int* d = static_cast<int*>(deviceBuffer(sizeof(int)));
  HvdStandinGate* gate = hvd_standin_gate(s);
  ASSERT_EQ(cudaMemsetAsync(d, 0, sizeof(int), s), cudaSuccess);
  EXPECT_EQ(cudaFree(d), cudaErrorIllegalState);
  hvd_standin_open_gate(gate);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(cudaFree(d), cudaSuccess);
}

cudaMemPool_t newPool(int device) {
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = device;
  cudaMemPool_t pool = nullptr;
  EXPECT_EQ(cudaMemPoolCreate(&pool, &props), cudaSuccess);
  uint64_t keep = 1 << 20;
  EXPECT_EQ(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep), cudaSuccess);
  return pool;
}

TEST_F(StandinRuntime, StreamOrderedMemoryIsValidFromItsStreamOn) {
  int supported = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, 0), cudaSuccess);
  EXPECT_EQ(supported, 1);
  cudaMemPool_t pool = newPool(0);
  cudaStream_t writer = newStream(), consumer = newStream();
  cudaEvent_t written = newEvent();
  void* d = nullptr;
  ASSERT_EQ(cudaMallocFromPoolAsync(&d, 64, pool, writer), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(d, 7, 64, writer), cudaSuccess);
  // The consumer is ordered after the writer; it reads, then frees on its own stream.
  ASSERT_EQ(cudaEventRecord(written, writer), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(consumer, written, 0), cudaSuccess);
  static char out[64];  // the copy may still run after the test body
  ASSERT_EQ(cudaMemcpyAsync(out, d, 64, cudaMemcpyDeviceToHost, consumer), cudaSuccess);
  ASSERT_EQ(cudaFreeAsync(d, consumer), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(consumer), cudaSuccess);
  EXPECT_EQ(out[63], 7);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(cudaMemPoolDestroy(pool), cudaSuccess);
}

TEST_F(StandinRuntime, StreamOrderedMemoryUsedBeforeItsAllocationIsAnOrderingError) {
  cudaMemPool_t pool = newPool(0);
  cudaStream_t writer = newStream(), other = newStream();
  void* d = nullptr;
  ASSERT_EQ(cudaMallocFromPoolAsync(&d, 64, pool, writer), cudaSuccess);
  EXPECT_EQ(cudaMemsetAsync(d, 0, 64, other), cudaErrorLaunchFailure);  // not ordered after the allocation
  hvd_standin_clear_errors();
  ASSERT_EQ(cudaStreamSynchronize(writer), cudaSuccess);
  EXPECT_EQ(cudaFreeAsync(d, writer), cudaSuccess);
  EXPECT_EQ(cudaMemPoolDestroy(pool), cudaSuccess);
}

TEST_F(StandinRuntime, FreeAsyncOnAStreamNotOrderedAfterTheLastUseIsAnOrderingError) {
  cudaMemPool_t pool = newPool(0);
  cudaStream_t writer = newStream(), consumer = newStream();
  void* d = nullptr;
  ASSERT_EQ(cudaMallocFromPoolAsync(&d, 64, pool, writer), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(d, 0, 64, writer), cudaSuccess);
  // Freed on a stream that never waited for the writer: the block could be reused under it.
  EXPECT_EQ(cudaFreeAsync(d, consumer), cudaErrorLaunchFailure);
  hvd_standin_clear_errors();
  ASSERT_EQ(cudaStreamSynchronize(writer), cudaSuccess);
  EXPECT_EQ(cudaFreeAsync(d, consumer), cudaSuccess);  // the host observed the writer: ordered now
  ASSERT_EQ(cudaStreamSynchronize(consumer), cudaSuccess);
  EXPECT_EQ(cudaMemPoolDestroy(pool), cudaSuccess);
}

TEST_F(StandinRuntime, UseAfterFreeAsyncAndDoubleFreesFail) {
  cudaMemPool_t pool = newPool(0);
  cudaStream_t s = newStream();
  void* d = nullptr;
  ASSERT_EQ(cudaMallocFromPoolAsync(&d, 64, pool, s), cudaSuccess);
  HvdStandinGate* gate = hvd_standin_gate(s);  // keeps the free queued
  ASSERT_EQ(cudaFreeAsync(d, s), cudaSuccess);
  EXPECT_EQ(cudaFreeAsync(d, s), cudaErrorInvalidValue);
  EXPECT_EQ(cudaFree(d), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemsetAsync(d, 0, 64, s), cudaErrorLaunchFailure);  // after its free, on the same stream
  hvd_standin_clear_errors();
  hvd_standin_open_gate(gate);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  void* plain = deviceBuffer(16);
  EXPECT_EQ(cudaFreeAsync(plain, s), cudaErrorInvalidValue);  // cudaMalloc'd: cudaFree it
  EXPECT_EQ(cudaFree(plain), cudaSuccess);
  EXPECT_EQ(cudaMemPoolDestroy(pool), cudaSuccess);
  EXPECT_EQ(cudaMemPoolDestroy(pool), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMallocFromPoolAsync(&d, 64, pool, s), cudaErrorInvalidValue);
}

TEST_F(StandinRuntime, DestroyedHandlesAreInvalid) {
  cudaStream_t s = newStream();
  cudaEvent_t e = newEvent();
  int* d = static_cast<int*>(deviceBuffer(sizeof(int)));
  ASSERT_EQ(cudaStreamDestroy(s), cudaSuccess);
  ASSERT_EQ(cudaEventDestroy(e), cudaSuccess);
  EXPECT_EQ(cudaMemsetAsync(d, 0, 4, s), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaStreamSynchronize(s), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaStreamQuery(s), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaStreamDestroy(s), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaEventRecord(e, nullptr), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaEventQuery(e), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaEventSynchronize(e), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaStreamWaitEvent(nullptr, e, 0), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaEventDestroy(e), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaStreamDestroy(nullptr), cudaErrorInvalidResourceHandle);
}

TEST_F(StandinRuntime, EventAndStreamMustShareADevice) {
  cudaEvent_t e = newEvent();  // device 0
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  cudaStream_t s = newStream();
  EXPECT_EQ(cudaEventRecord(e, s), cudaErrorInvalidResourceHandle);
}

TEST_F(StandinRuntime, CopiesAreCheckedAgainstKindAndBounds) {
  cudaStream_t s = newStream();
  char* d = static_cast<char*>(deviceBuffer(64));
  char host[128] = {};
  EXPECT_EQ(cudaMemcpyAsync(host, d, 64, cudaMemcpyHostToDevice, s), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpyAsync(d, host, 65, cudaMemcpyHostToDevice, s), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemsetAsync(host, 0, 4, s), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemcpyAsync(d, host, 64, static_cast<cudaMemcpyKind>(9), s), cudaErrorInvalidMemcpyDirection);
  ASSERT_EQ(cudaMemcpyAsync(d, host, 64, cudaMemcpyDefault, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
}

TEST_F(StandinRuntime, NewDeviceMemoryIsPoisoned) {
  cudaStream_t s = newStream();
  float* d = static_cast<float*>(deviceBuffer(sizeof(float)));
  float out = 0;
  ASSERT_EQ(cudaMemcpyAsync(&out, d, sizeof(float), cudaMemcpyDeviceToHost, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_TRUE(std::isnan(out));
}

}  // namespace
