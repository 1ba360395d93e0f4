// Internals shared by the stand-in's translation units: the process-wide state (devices, the
// memory table, streams, events), the work queues and the ordering checker. The public surface is
// only the CUDA runtime / NCCL / HvdCudaKernels entry points (cuda_api.h) plus the few
// hvd_standin_* test hooks declared in standin_hooks.h.
#pragma once

#include <cuda_runtime_api.h>

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace standin {

// One buffer an op reads or writes, declared to the ordering checker when the op is queued.
struct Access {
  const void* ptr;
  size_t bytes;
  bool write;
};

// Where a pointer lives, answered from the allocation table.
enum class MemKind { kHost, kPinned, kDevice };
struct MemInfo {
  MemKind kind = MemKind::kHost;
  int device = -1;             // the ordinal of device memory; the allocating device for pinned
  const char* base = nullptr;  // the allocation containing the pointer (null for kHost)
  size_t size = 0;
};
MemInfo lookupMemory(const void* ptr);

// The failure of a stand-in call: the CUDA status plus the line printed to stderr.
cudaError_t fail(cudaError_t error, const std::string& message);

// Queues `run` on `stream` (0 / cudaStreamLegacy = the current device's legacy default stream)
// after checking `accesses` against the ordering checker and the stream's and device's sticky
// errors. `what` names the op in messages. `requiredDevice` >= 0: the stream must belong to that
// device (a kernel launch: the current device; NCCL: the communicator's), else
// cudaErrorInvalidResourceHandle.
cudaError_t enqueue(cudaStream_t stream, std::string what, std::vector<Access> accesses, std::function<void()> run,
                    int requiredDevice = -1);

// The calling thread's current device (cudaSetDevice), validated against the device count.
int currentDevice();
int deviceCount();

// A printable name of a stream handle, for messages.
std::string streamName(cudaStream_t stream);

// Writes one line "hvd-cuda-standin: <message>" to stderr.
void report(const std::string& message);

}  // namespace standin
