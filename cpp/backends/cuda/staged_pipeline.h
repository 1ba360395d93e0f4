// StagingPipeline: the copies of one host-staged collective. Pieces of device tensors go to a
// pinned host buffer (device-to-host on one stream), a host collective runs over the buffer, and
// the results go back (host-to-device on a second stream). A large buffer is handled in chunks,
// so that the copy-in of chunk k+1 and the copy-back of chunk k-1 run on the device while the
// host collective works on chunk k:
//
//   to-host stream:   D2H c0 | D2H c1 | D2H c2 | ...         (all queued at once, one event each)
//   engine thread:            wait c0, collective c0, wait c1, collective c1, ...
//   to-device stream:                 H2D c0 |        H2D c1 | ...   (queued after each collective)
//
// Ordering: after() makes both streams wait (device side) for a producer stream's work so far
// (for Device::deviceWideStream(), the engine thread synchronizes the device instead);
// run() returns once the last copy back is done (the engine thread waits: the results are then
// visible to any later work on any stream, and the host buffer is free for the next collective).
// If the collective throws, run() waits for the copies already queued (they use the buffer)
// before rethrowing.
//
// Engine thread only; one collective at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "backends/cuda/device_util.h"

namespace hvd::cuda {

// Bytes [offset, offset + bytes) of the host buffer and a device tensor's bytes at `device`.
// Copy-in with device == nullptr: the host bytes are zeroed (a rank without that tensor).
// Copy-back with device == nullptr: nothing is copied.
struct DevicePiece {
  size_t offset = 0;
  void* device = nullptr;
  size_t bytes = 0;
};

class StagingPipeline {
 public:
  enum class Phase { kCopyInStart, kCopyInEnd, kCopyOutStart, kCopyOutEnd };

  StagingPipeline(const CudaApi& api, int device);

  // The copies issued from now on wait for the work queued so far on `stream` (null: the legacy
  // default stream).
  void after(void* stream);
  // Copies `in` to `host`, runs collective(begin, end) over host bytes [begin, end) of each chunk
  // (every chunk but the last `chunk` bytes; chunk 0 = one chunk of `total`), copies `out` back.
  // `phase` (may be empty) hears the phases' boundaries: copy-in ends when the first chunk is on
  // the host, copy-out starts after the last collective.
  void run(uint8_t* host, size_t total, size_t chunk, const std::vector<DevicePiece>& in,
           const std::vector<DevicePiece>& out, const std::function<void(size_t, size_t)>& collective,
           const std::function<void(Phase)>& phase = {});
  // The stream the copies back to the device run on (what writes the `out` pieces).
  cudaStream_t deviceStream() const { return toDevice_.get(); }

 private:
  // Queues the part of `pieces` inside [begin, end) on the to-host or to-device stream.
  void copyIn(uint8_t* host, const std::vector<DevicePiece>& pieces, size_t begin, size_t end);
  void copyOut(const uint8_t* host, const std::vector<DevicePiece>& pieces, size_t begin, size_t end);
  // Waits for both streams, reporting nothing (the path of an error already thrown).
  void drainQuietly() noexcept;

  const CudaApi& api_;
  int device_;
  Stream toHost_;
  Stream toDevice_;
  Event producer_;
  Event backOnDevice_;
  std::vector<Event> chunkOnHost_;  // one per chunk of the largest collective so far
};

}  // namespace hvd::cuda
