// StagedBackend ("cuda_staged"): GPU tensors' collectives through host memory. Each collective
// copies its device tensors into a pinned host buffer (laid out as engine/fused_layout.h says,
// as the CPU backend lays out its fusion buffer), runs Horovod's own shm/tcp collectives
// (collectives/) on it over the Communicator it owns for its process set, and copies the results
// back; large allreduces and broadcasts are chunked so that the copies overlap the collective
// (staged_pipeline.h).
//
// Chosen for a (process set, GPU) when agreeGpuOperations() says HOST (gpu_operations.h): GPUs
// without NCCL, several ranks on one GPU, or HOROVOD_GPU_OPERATIONS=HOST.
//
// Ordering: each collective's copies wait (device side) for the work queued on its entries'
// producer streams (Entry::stream) when it runs. Completion: synchronous: run() returns once the
// results are back on the device (the thread running the engine waits for the last copy: the
// background thread, or a caller already blocked in a wait; an enqueueing thread never does),
// and the engine then completes the works as for the CPU. Outputs the engine
// allocates (allgather, alltoall) are device memory of the input's GPU, freed by their deleter.
// Reductions, prescale/postscale and Average run on the host, for every dtype the CPU path has.
// Adasum is the GPU Adasum (the same meaning as on the NCCL backend), not the CPU one.
//
// Engine thread only. Transport failures propagate as thrown hvd::Errors (PeerLost for a lost
// rank); CUDA failures as hvd::Error naming the call and the GPU.
#pragma once

#include <vector>

#include "backends/cuda/cuda_api.h"
#include "backends/cuda/device_util.h"
#include "backends/cuda/staged_pipeline.h"
#include "backends/host_backend.h"
#include "collectives/communicator.h"

namespace hvd::backends {

class StagedBackend : public HostBackend<StagedBackend> {
 public:
  StagedBackend(const BackendContext& context, const cuda::CudaApi& api);
  void applyKnobs(const engine::Knobs& knobs) override;

 private:
  friend class HostBackend<StagedBackend>;
  void allreduce(const Response& r, ProcessSet& set, const std::vector<Entry*>& entries);
  void allgather(const Response& r, ProcessSet& set, const std::vector<Entry*>& entries);
  void broadcast(const Response& r, ProcessSet& set, const std::vector<Entry*>& entries);
  void alltoall(const Response& r, ProcessSet& set, const std::vector<Entry*>& entries);
  void reducescatter(const Response& r, ProcessSet& set, const std::vector<Entry*>& entries);
  void barrier(const Response& r, ProcessSet& set);
  // Horovod's GPU Adasum (collectives/adasum_hosts.h) on the staged copy: reduce-scatter among
  // the set's members on each host, Adasum across hosts, allgather inside the host, all over the
  // host collectives; MismatchError (before anything is sent) where the hosts do not allow it.
  void adasum(const Response& r, ProcessSet& set, const std::vector<Entry*>& entries);

  // Orders the pipeline after the producer streams of `entries` (each distinct stream once).
  void afterProducers(const std::vector<Entry*>& entries);
  // The pinned buffer, at least `bytes` long.
  uint8_t* staging(size_t bytes);
  // Publishes the fusion-copy events of `r` for the pipeline's phases.
  std::function<void(cuda::StagingPipeline::Phase)> copyEvents(const Response& r, int64_t bytes);

  const cuda::CudaApi& api_;
  const Device device_;
  const size_t chunkBytes_;
  Communicator comm_;
  cuda::StagingPipeline pipeline_;
  cuda::PinnedBuffer staging_;
  cuda::DeviceOutputs outputs_;  // allgather and alltoall outputs
  std::vector<cuda::DevicePiece> in_, out_;  // scratch
  std::vector<void*> streams_;              // scratch
  std::vector<uint8_t> adasumPairScratch_;  // collectives::adasum's receive space
};

}  // namespace hvd::backends
