// The process's default Runtime behind the free functions of horovod.h and the C API.
// Internal to cpp/api (and the Python binding, which may reach the engine through it).
#pragma once

#include <memory>

#include "autotune/autotune_log.h"
#include "autotune/autotune_options.h"
#include "common/params.h"
#include "engine/runtime.h"
#include "horovod/horovod.h"
#include "timeline/timeline.h"

namespace hvd::api {

// The current default runtime (may be null or shut down).
std::shared_ptr<engine::Runtime> defaultRuntime();
// The initialized default runtime; throws hvd::Error(kNotInitializedMessage) otherwise (what
// operations raise).
std::shared_ptr<engine::Runtime> runtimeForOps();
// Same, but throws InvalidArgument (what topology getters raise: ValueError in Python).
std::shared_ptr<engine::Runtime> runtimeForQueries();
// init() with an explicit environment (tests). No-op while initialized.
void initDefault(const InitOptions& options, const EnvLookup& env);
void shutdownDefault();

// The timeline of the default runtime (timeline_api.cc). Settings are read before the runtime is
// built (a bad value fails init early); the timeline starts just before it is initialized, so it
// sees the first requests (rank 0 only, when HOROVOD_TIMELINE names a file), and stops after it
// shut down (or after its init failed).
timeline::TimelineSettings readTimelineSettings(const EnvLookup& env);
void startTimelineAtInit(const std::shared_ptr<engine::Runtime>& runtime, const timeline::TimelineSettings& settings);
void stopTimelineAtShutdown();

// The autotuner of the default runtime (autotune_api.cc). Options are read before the runtime is
// built and rank 0 opens the log then (a bad value or an unwritable log fails init there); the
// tuner starts on rank 0 once the runtime is initialized and ends by itself (or at shutdown).
struct AutotuneStart {
  autotune::AutotuneOptions options;
  std::unique_ptr<autotune::AutotuneLog> log;  // rank 0 with HOROVOD_AUTOTUNE_LOG only
};
AutotuneStart prepareAutotune(const EnvLookup& env, int rank);
void startAutotuneAtInit(const std::shared_ptr<engine::Runtime>& runtime, AutotuneStart start);

}  // namespace hvd::api
