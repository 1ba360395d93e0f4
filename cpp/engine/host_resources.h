// HostResources: what a Runtime lends every collective backend that works in host memory (one
// per Runtime, shared by the backends of all its process sets, which run one response at a time
// on the engine's thread).
#pragma once

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
};

}  // namespace hvd::engine
