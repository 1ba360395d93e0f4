#include "backends/cuda/staged_pipeline.h"

#include "backends/cuda/device_wide.h"

#include <algorithm>
#include <cstring>

namespace hvd::cuda {

StagingPipeline::StagingPipeline(const CudaApi& api, int device)
    : api_(api),
      device_(device),
      toHost_(api, device),
      toDevice_(api, device),
      producer_(api, device),
      backOnDevice_(api, device) {}

void StagingPipeline::after(void* stream) {
  if (Device::isDeviceWide(stream)) {
    synchronizeDevice(api_, device_);  // the host has observed it all: both streams are after it
    return;
  }
  producer_.record(static_cast<cudaStream_t>(stream));
  producer_.waitOn(toHost_.get());
  producer_.waitOn(toDevice_.get());
}

void StagingPipeline::copyIn(uint8_t* host, const std::vector<DevicePiece>& pieces, size_t begin, size_t end) {
  for (const DevicePiece& p : pieces) {
    const size_t from = std::max(begin, p.offset), to = std::min(end, p.offset + p.bytes);
    if (from >= to) continue;
    if (p.device == nullptr) {
      std::memset(host + from, 0, to - from);
      continue;
    }
    checkCuda(api_,
              api_.rt.memcpyAsync(host + from, static_cast<const uint8_t*>(p.device) + (from - p.offset), to - from,
                                  cudaMemcpyDeviceToHost, toHost_.get()),
              "cudaMemcpyAsync (device to host staging buffer)", device_);
  }
}

void StagingPipeline::copyOut(const uint8_t* host, const std::vector<DevicePiece>& pieces, size_t begin, size_t end) {
  for (const DevicePiece& p : pieces) {
    const size_t from = std::max(begin, p.offset), to = std::min(end, p.offset + p.bytes);
    if (from >= to || p.device == nullptr) continue;
    checkCuda(api_,
              api_.rt.memcpyAsync(static_cast<uint8_t*>(p.device) + (from - p.offset), host + from, to - from,
                                  cudaMemcpyHostToDevice, toDevice_.get()),
              "cudaMemcpyAsync (host staging buffer to device)", device_);
  }
}

void StagingPipeline::run(uint8_t* host, size_t total, size_t chunk, const std::vector<DevicePiece>& in,
                          const std::vector<DevicePiece>& out, const std::function<void(size_t, size_t)>& collective,
                          const std::function<void(Phase)>& phase) {
  if (chunk == 0 || chunk >= total) chunk = std::max<size_t>(total, 1);
  const size_t chunks = (total + chunk - 1) / chunk;
  while (chunkOnHost_.size() < std::max<size_t>(chunks, 1)) chunkOnHost_.emplace_back(api_, device_);
  auto tell = [&phase](Phase p) {
    if (phase) phase(p);
  };
  try {
    tell(Phase::kCopyInStart);
    for (size_t c = 0; c < chunks; ++c) {
      copyIn(host, in, c * chunk, std::min(total, (c + 1) * chunk));
      chunkOnHost_[c].record(toHost_.get());
    }
    for (size_t c = 0; c < chunks; ++c) {
      const size_t begin = c * chunk, end = std::min(total, begin + chunk);
      chunkOnHost_[c].synchronize();
      if (c == 0) tell(Phase::kCopyInEnd);
      collective(begin, end);
      if (c + 1 == chunks) tell(Phase::kCopyOutStart);
      copyOut(host, out, begin, end);
    }
    if (chunks == 0) {  // nothing to move: the collective still runs (it may be a barrier step)
      tell(Phase::kCopyInEnd);
      collective(0, 0);
      tell(Phase::kCopyOutStart);
    }
    backOnDevice_.record(toDevice_.get());
    backOnDevice_.synchronize();
    tell(Phase::kCopyOutEnd);
  } catch (...) {
    drainQuietly();
    throw;
  }
}

void StagingPipeline::drainQuietly() noexcept {
  try {
    toHost_.synchronize();
  } catch (...) {
  }
  try {
    toDevice_.synchronize();
  } catch (...) {
  }
}

}  // namespace hvd::cuda
