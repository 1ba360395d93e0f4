// The autotuner of the default Runtime: started on rank 0 at init from HOROVOD_AUTOTUNE*
// (autotune/autotune_options.h). The Runtime holds it until it settles or shuts down.
#include <memory>
#include <set>

#include "api/default_runtime.h"
#include "autotune/autotuner.h"
#include "common/logging.h"

namespace hvd::api {

AutotuneStart prepareAutotune(const EnvLookup& env, int rank) {
  AutotuneStart start;
  start.options = autotune::AutotuneOptions::fromEnvironment(env);
  if (start.options.enabled && rank == 0 && !start.options.logPath.empty()) {
    start.log = std::make_unique<autotune::AutotuneLog>(start.options.logPath);
  }
  return start;
}

void startAutotuneAtInit(const std::shared_ptr<engine::Runtime>& runtime, AutotuneStart start) {
  if (!start.options.enabled || runtime->topology().rank != 0) return;
  const engine::Config& config = runtime->config();
  const engine::Topology& topology = runtime->topology();
  autotune::KnobSpaceInputs in;
  in.initial = runtime->knobs();
  in.pinFusion = config.pinned.fusionThreshold;
  in.pinCache = config.pinned.cacheCapacity;
  in.pinBurst = config.pinned.burstQuiet;
  in.pinProgress = config.pinned.callerProgress;
  in.pinSpin = config.pinned.callerSpin;
  in.pinAlgorithm = config.pinned.allreduceAlgorithm;
  in.pinCrossover = config.pinned.allreduceCrossover;
  in.pinHierarchical = config.pinned.hierarchical;
  in.cacheAvailable = config.cacheCapacity > 0;
  in.hosts = static_cast<int>(std::set<std::string>(topology.hostOf.begin(), topology.hostOf.end()).size());
  // Horovod's rounding of the threshold (engine::Config::roundFusionThreshold).
  in.fusionUnit = topology.homogeneous ? static_cast<int64_t>(topology.localSize) * 8 * 64 : 1;
  try {
    auto tuner = std::make_shared<autotune::Autotuner>(start.options, autotune::KnobSpace(in), std::move(start.log));
    runtime->setTuner(std::move(tuner));
  } catch (const std::exception& e) {
    // The other ranks are initialized already: failing here would leave them waiting.
    HVD_LOG(Error) << "Autotune not started: " << e.what();
  }
}

}  // namespace hvd::api
