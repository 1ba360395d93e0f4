// HostResources: what a Runtime lends every collective backend that works in host memory (one
// per Runtime, shared by the backends of all its process sets, which run one response at a time
// on the engine's thread).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "engine/fusion.h"
#include "engine/output_pool.h"

namespace hvd::engine {

struct HostResources {
  // Fused collectives stage through it (engine thread only).
  FusionBuffer fusion;
  // Engine-allocated outputs (allgather, alltoall) come from it; blocks handed out keep it
  // alive. Thread-safe.
  std::shared_ptr<OutputPool> outputs;
  // Operations that ran over the members' shared outputs: the allreduce "shm_inplace", the
  // allgather "shm_outputs". Written by the engine's thread, read by any.
  std::atomic<uint64_t> sharedInPlaceOps{0};
  std::atomic<uint64_t> sharedAllgatherOps{0};
  // Collectives that ran through MPI (the MPI data plane, engine/mpi_backend.h).
  std::atomic<uint64_t> mpiOps{0};
};

}  // namespace hvd::engine
