// backends/cuda/device_util: status checks and the owners of device objects, over a fake entry
// table that records what it was asked (no CUDA library needed): errors become the right
// hvd::Error subclass with the call, the message and the GPU; every owner releases what it got,
// on the device it got it on.
#include "backends/cuda/device_util.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <set>
#include <string>

#include "horovod/errors.h"

namespace hvd::cuda {
namespace {

// The fake runtime's state (one test at a time).
struct FakeState {
  int current = 0;
  std::vector<int> setDeviceCalls;
  std::set<void*> allocations;
  int streamsAlive = 0;
  int streamCreatedOn = -1;
  unsigned streamFlags = 0;
  int eventsAlive = 0;
  cudaError_t eventStatus = cudaSuccess;
  cudaError_t mallocStatus = cudaSuccess;
};
FakeState fake;

const char* errorString(cudaError_t e) { return e == cudaErrorMemoryAllocation ? "out of memory" : "some CUDA error"; }
cudaError_t getDevice(int* d) {
  *d = fake.current;
  return cudaSuccess;
}
cudaError_t setDevice(int d) {
  fake.setDeviceCalls.push_back(d);
  fake.current = d;
  return cudaSuccess;
}
cudaError_t fakeMalloc(void** p, size_t bytes) {
  if (fake.mallocStatus != cudaSuccess) return fake.mallocStatus;
  *p = std::malloc(bytes);
  fake.allocations.insert(*p);
  return cudaSuccess;
}
cudaError_t fakeFree(void* p) {
  if (fake.allocations.erase(p) == 0) return cudaErrorInvalidValue;
  std::free(p);
  return cudaSuccess;
}
cudaError_t streamCreate(cudaStream_t* s, unsigned flags) {
  fake.streamsAlive++;
  fake.streamCreatedOn = fake.current;
  fake.streamFlags = flags;
  *s = reinterpret_cast<cudaStream_t>(0x1000 + fake.streamsAlive);
  return cudaSuccess;
}
cudaError_t streamDestroy(cudaStream_t) {
  fake.streamsAlive--;
  return cudaSuccess;
}
cudaError_t eventCreate(cudaEvent_t* e, unsigned) {
  fake.eventsAlive++;
  *e = reinterpret_cast<cudaEvent_t>(0x2000 + fake.eventsAlive);
  return cudaSuccess;
}
cudaError_t eventDestroy(cudaEvent_t) {
  fake.eventsAlive--;
  return cudaSuccess;
}
cudaError_t eventQuery(cudaEvent_t) { return fake.eventStatus; }

const char* ncclErrorString(ncclResult_t r) {
  return r == ncclRemoteError ? "remote process exited or there was a network error" : "other NCCL error";
}
const char* ncclLastError(ncclComm_t) { return "peer 2 closed the connection"; }

CudaApi makeApi(NcclApi& nccl) {
  CudaApi api;
  api.rt.getErrorString = errorString;
  api.rt.getDevice = getDevice;
  api.rt.setDevice = setDevice;
  api.rt.malloc = fakeMalloc;
  api.rt.free = fakeFree;
  api.rt.streamCreateWithFlags = streamCreate;
  api.rt.streamDestroy = streamDestroy;
  api.rt.eventCreateWithFlags = eventCreate;
  api.rt.eventDestroy = eventDestroy;
  api.rt.eventQuery = eventQuery;
  nccl.getErrorString = ncclErrorString;
  nccl.getLastError = ncclLastError;
  api.nccl = &nccl;
  return api;
}

class DeviceUtil : public ::testing::Test {
 protected:
  void SetUp() override {
    fake = FakeState{};
    api_ = makeApi(nccl_);
  }
  NcclApi nccl_{};
  CudaApi api_;
};

TEST_F(DeviceUtil, CudaFailuresNameTheCallTheErrorAndTheGpu) {
  EXPECT_NO_THROW(checkCuda(api_, cudaSuccess, "cudaMemcpyAsync", 1));
  try {
    checkCuda(api_, cudaErrorMemoryAllocation, "cudaMemcpyAsync", 3);
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInternal);
    EXPECT_EQ(std::string(e.what()), "cudaMemcpyAsync failed on GPU 3: out of memory (cudaError 2)");
  }
}

TEST_F(DeviceUtil, NcclLostPeerErrorsArePeerLost) {
  EXPECT_NO_THROW(checkNccl(api_, ncclSuccess, "ncclAllReduce", 0));
  EXPECT_NO_THROW(checkNccl(api_, ncclInProgress, "ncclAllReduce", 0));
  for (ncclResult_t lost : {ncclRemoteError, ncclSystemError}) {
    try {
      checkNccl(api_, lost, "ncclAllReduce", 1);
      FAIL() << "no throw";
    } catch (const PeerLost& e) {
      EXPECT_EQ(e.code(), ErrorCode::kPeerLost);
      EXPECT_NE(std::string(e.what()).find("ncclAllReduce failed on GPU 1: "), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("(peer 2 closed the connection)"), std::string::npos) << e.what();
    }
  }
  try {
    checkNccl(api_, ncclInvalidUsage, "ncclSend", 0);
    FAIL() << "no throw";
  } catch (const PeerLost&) {
    FAIL() << "a usage error is not a lost peer";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInternal);
    EXPECT_NE(std::string(e.what()).find("ncclSend failed on GPU 0: other NCCL error"), std::string::npos);
  }
}

TEST_F(DeviceUtil, GuardSetsAndRestoresTheDevice) {
  fake.current = 2;
  {
    DeviceGuard same(api_, 2);
    EXPECT_TRUE(fake.setDeviceCalls.empty());  // already current: no switch
  }
  {
    DeviceGuard other(api_, 5);
    EXPECT_EQ(fake.current, 5);
  }
  EXPECT_EQ(fake.current, 2);
  EXPECT_EQ(fake.setDeviceCalls, (std::vector<int>{5, 2}));
}

TEST_F(DeviceUtil, StreamsAndEventsAreMadeOnTheirDeviceAndReleased) {
  {
    Stream s(api_, 4);
    EXPECT_EQ(fake.streamCreatedOn, 4);
    EXPECT_EQ(fake.streamFlags, static_cast<unsigned>(cudaStreamNonBlocking));
    EXPECT_EQ(fake.current, 0);  // restored
    Stream moved(std::move(s));
    EXPECT_EQ(moved.get(), reinterpret_cast<cudaStream_t>(0x1001));
    Event e(api_, 4);
    fake.eventStatus = cudaErrorNotReady;
    EXPECT_FALSE(e.query());
    fake.eventStatus = cudaSuccess;
    EXPECT_TRUE(e.query());
    fake.eventStatus = cudaErrorLaunchFailure;
    EXPECT_THROW(e.query(), Error);
    EXPECT_EQ(fake.streamsAlive, 1);
    EXPECT_EQ(fake.eventsAlive, 1);
  }
  EXPECT_EQ(fake.streamsAlive, 0);
  EXPECT_EQ(fake.eventsAlive, 0);
}

TEST_F(DeviceUtil, DeviceBufferGrowsAndFreesOnDestruction) {
  {
    DeviceBuffer b(api_, 1);
    EXPECT_EQ(b.data(), nullptr);
    EXPECT_TRUE(b.reserve(100));
    void* first = b.data();
    EXPECT_FALSE(b.reserve(50));  // fits: same memory
    EXPECT_EQ(b.data(), first);
    EXPECT_TRUE(b.reserve(1000));
    EXPECT_EQ(b.capacity(), 1000u);
    EXPECT_EQ(fake.allocations.size(), 1u);  // the old block went back
    fake.mallocStatus = cudaErrorMemoryAllocation;
    try {
      b.reserve(5000);
      FAIL() << "no throw";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("cudaMalloc(5000 bytes) failed on GPU 1: out of memory"), std::string::npos)
          << e.what();
    }
    EXPECT_EQ(b.capacity(), 0u);  // nothing held after a failed growth
  }
  EXPECT_TRUE(fake.allocations.empty());
}

}  // namespace
}  // namespace hvd::cuda
