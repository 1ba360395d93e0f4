#include "registry.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <vector>

namespace hvd_tf_standin {
namespace {

struct Copy {
  uint64_t count = 0;  // asynchronous copies queued on the device so far
  void* dst = nullptr;
  const void* src = nullptr;
  uint64_t bytes = 0;
};

struct Registry {
  std::mutex mu;
  std::map<int, std::vector<cudaStream_t>> streams;
  std::map<int, Copy> copies;
  std::map<int, Copy> scales;  // dst: the output; src unused
};

Registry& registry() {
  static auto* r = new Registry();  // never destroyed: TensorFlow may call in during exit
  return *r;
}

}  // namespace

void noteStreamCreated(int device, cudaStream_t stream) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.streams[device].push_back(stream);
}

void noteStreamDestroyed(int device, cudaStream_t stream) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto& list = r.streams[device];
  list.erase(std::remove(list.begin(), list.end(), stream), list.end());
}

int streamDevice(cudaStream_t stream) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  for (const auto& [device, list] : r.streams)
    if (std::find(list.begin(), list.end(), stream) != list.end()) return device;
  return -1;
}

void noteCopyQueued(int device, void* dst, const void* src, uint64_t bytes) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  Copy& c = r.copies[device];
  c.count++;
  c.dst = dst;
  c.src = src;
  c.bytes = bytes;
}

void noteScaleQueued(int device, void* out, uint64_t bytes) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  Copy& c = r.scales[device];
  c.count++;
  c.dst = out;
  c.bytes = bytes;
}

}  // namespace hvd_tf_standin

extern "C" {

// The live streams TensorFlow created on `device`, in creation order: up to `capacity` of them
// into `out`; returns how many there are.
__attribute__((visibility("default"))) int hvd_tf_standin_gpu_streams(int device, cudaStream_t* out, int capacity) {
  auto& r = hvd_tf_standin::registry();
  std::lock_guard<std::mutex> lock(r.mu);
  const auto& list = r.streams[device];
  for (int i = 0; i < capacity && i < static_cast<int>(list.size()); ++i) out[i] = list[static_cast<size_t>(i)];
  return static_cast<int>(list.size());
}

// How many asynchronous copies (memcpy_htod/dtoh/dtod) TensorFlow has queued on `device`; the last
// one's destination, source and size go to the non-null outputs.
__attribute__((visibility("default"))) uint64_t hvd_tf_standin_gpu_last_copy(int device, void** dst, const void** src,
                                                                             uint64_t* bytes) {
  auto& r = hvd_tf_standin::registry();
  std::lock_guard<std::mutex> lock(r.mu);
  const auto& c = r.copies[device];
  if (dst) *dst = c.dst;
  if (src) *src = c.src;
  if (bytes) *bytes = c.bytes;
  return c.count;
}

// How many HvdStandinGpuScale kernels ran on `device`; the last one's output and its size go to
// the non-null outputs (TensorFlow cannot hand out that pointer while the kernel's stream is held:
// its DLPack export waits for the device).
__attribute__((visibility("default"))) uint64_t hvd_tf_standin_gpu_last_scale(int device, void** out, uint64_t* bytes) {
  auto& r = hvd_tf_standin::registry();
  std::lock_guard<std::mutex> lock(r.mu);
  const auto& c = r.scales[device];
  if (out) *out = c.dst;
  if (bytes) *bytes = c.bytes;
  return c.count;
}

}  // extern "C"
