// Counters of the default runtime (hvd::init) for the tests of the paths over shared buffers:
// which path an operation took, and what the output pool mapped. Zero without a runtime.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "api/default_runtime.h"
#include "engine/runtime.h"
#include "horovod/horovod.h"

namespace hvd::test_support {

inline engine::RuntimeStats defaultRuntimeStats() {
  auto runtime = api::defaultRuntime();
  return runtime ? runtime->stats() : engine::RuntimeStats{};
}
// Collectives the CPU backend ran with `algorithm` (hvd::engineCounters).
inline uint64_t cpuCount(const std::string& algorithm) {
  for (const CollectiveCount& c : engineCounters()) {
    if (c.backend == "cpu" && c.algorithm == algorithm) return c.count;
  }
  return 0;
}
// Allreduces that ran in place in the ranks' shared buffers (shm_inplace).
inline uint64_t sharedInPlaceCount() { return cpuCount("shm_inplace"); }
// Allgathers that wrote straight into the ranks' shared outputs (shm_outputs).
inline uint64_t sharedAllgatherCount() { return cpuCount("shm_outputs"); }
inline size_t outputBlocksMapped() { return defaultRuntimeStats().outputBlocksMapped; }

}  // namespace hvd::test_support
