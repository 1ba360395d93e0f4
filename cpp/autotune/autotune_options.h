// The autotuner's settings: the HOROVOD_AUTOTUNE* variables (declared in autotune_options.cc,
// set by horovodrun's --autotune* flags), read once at init.
#pragma once

#include <cstdint>
#include <string>

#include "common/params.h"

namespace hvd::autotune {

struct AutotuneOptions {
  bool enabled = false;          // HOROVOD_AUTOTUNE
  std::string logPath;           // HOROVOD_AUTOTUNE_LOG ("" = no log)
  int warmupSamples = 3;         // HOROVOD_AUTOTUNE_WARMUP_SAMPLES
  int stepsPerSample = 10;       // HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE
  int maxSamples = 20;           // HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES
  double noise = 0.8;            // HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE
  // HOROVOD_AUTOTUNE_STRATEGY: "bayes" (Bayesian optimisation, max samples) or "grid" (every
  // combination of HOROVOD_AUTOTUNE_GRID_POINTS values per knob; for comparisons, slow).
  std::string strategy = "bayes";
  int gridPoints = 3;
  uint64_t seed = 1;             // HOROVOD_AUTOTUNE_SEED: the optimiser's random candidates

  // Reads and validates every variable (InvalidArgument naming the variable otherwise), also
  // when autotuning is off, so a typo fails init either way.
  static AutotuneOptions fromEnvironment(const EnvLookup& env = processEnvironment());
};

}  // namespace hvd::autotune
