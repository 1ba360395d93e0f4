#include "autotune/autotune_options.h"

#include "horovod/errors.h"

namespace hvd::autotune {
namespace {

const Param<bool> kAutotune(
    "HOROVOD_AUTOTUNE", false,
    "Tune the engine's knobs while the job trains (Bayesian optimisation of the bytes reduced per second; "
    "docs/autotune.md). Knobs set explicitly stay as set.");
const Param<std::string> kAutotuneLog(
    "HOROVOD_AUTOTUNE_LOG", "", "CSV file (written by rank 0) with one row per autotune sample and the final choice.");
const Param<int64_t> kWarmupSamples("HOROVOD_AUTOTUNE_WARMUP_SAMPLES", 3,
                                    "Samples discarded at the start of autotuning.");
const Param<int64_t> kStepsPerSample("HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", 10,
                                     "Training steps (recurrences of a tensor name) measured per autotune sample.");
const Param<int64_t> kMaxSamples("HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES", 20,
                                 "Scored samples (knob settings tried) before autotuning settles on the best.");
const Param<double> kNoise("HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE", 0.8,
                           "Noise (alpha) of the Gaussian process on standardised scores, in [0, 1].");
const Param<std::string> kStrategy(
    "HOROVOD_AUTOTUNE_STRATEGY", "bayes",
    "bayes (default): Bayesian optimisation. grid: measure every combination of HOROVOD_AUTOTUNE_GRID_POINTS "
    "values per knob, then settle on the best (an exhaustive reference, for benchmarks).");
const Param<int64_t> kGridPoints("HOROVOD_AUTOTUNE_GRID_POINTS", 3,
                                 "Values per knob of the grid strategy (on/off knobs: 2).");
const Param<int64_t> kSeed("HOROVOD_AUTOTUNE_SEED", 1, "Seed of the autotuner's random candidates.");

int64_t atLeast(const Param<int64_t>& p, const EnvLookup& env, int64_t lo, int64_t hi) {
  const int64_t v = p.get(env);
  if (v < lo || v > hi) {
    throw InvalidArgument(std::string(p.name()) + "='" + std::to_string(v) + "' must be in [" + std::to_string(lo) +
                          ", " + std::to_string(hi) + "]");
  }
  return v;
}

}  // namespace

AutotuneOptions AutotuneOptions::fromEnvironment(const EnvLookup& env) {
  AutotuneOptions o;
  o.enabled = kAutotune.get(env);
  o.logPath = kAutotuneLog.get(env);
  o.warmupSamples = static_cast<int>(atLeast(kWarmupSamples, env, 0, 1000000));
  o.stepsPerSample = static_cast<int>(atLeast(kStepsPerSample, env, 1, 1000000));
  o.maxSamples = static_cast<int>(atLeast(kMaxSamples, env, 1, 100000));
  o.noise = kNoise.get(env);
  if (!(o.noise >= 0.0 && o.noise <= 1.0)) {
    throw InvalidArgument(std::string(kNoise.name()) + "='" + std::to_string(o.noise) + "' must be in [0, 1]");
  }
  o.strategy = kStrategy.get(env);
  if (o.strategy != "bayes" && o.strategy != "grid") {
    throw InvalidArgument(std::string(kStrategy.name()) + "='" + o.strategy + "' must be bayes or grid");
  }
  o.gridPoints = static_cast<int>(atLeast(kGridPoints, env, 2, 16));
  o.seed = static_cast<uint64_t>(kSeed.get(env));
  return o;
}

}  // namespace hvd::autotune
