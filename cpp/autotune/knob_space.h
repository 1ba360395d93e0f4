// KnobSpace: which engine knobs (engine/knobs.h) the autotuner may change in this job, and the
// map between knob values and coordinates in [0,1] (one per free knob) that the optimiser works
// on. Knobs that the user set explicitly, or that cannot matter here, stay at their initial
// values ("pinned").
//
// Scales: byte sizes are searched on a log2 scale, microsecond waits on a log scale that
// includes 0, on/off knobs as a coordinate below or above one half. Values are rounded as they
// would be applied, so toCoords(toKnobs(x)) is the point that is really measured (snap()).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/knobs.h"

namespace hvd::autotune {

enum class KnobId {
  kFusionThreshold,
  kBurstQuietUs,
  kCallerProgressUs,
  kCallerSpinUs,
  kAllreduceCrossover,
  kCacheEnabled,
  kHierarchical,
};
constexpr int kNumKnobs = 7;

// The CSV column of a knob ("fusion_threshold_bytes", ...), and whether it is an on/off knob.
const char* knobColumn(KnobId id);
bool knobIsSwitch(KnobId id);
// The knob's value in `k` as CSV text ("1048576", "1" / "0").
std::string knobText(KnobId id, const engine::Knobs& k);

// What decides the free knobs.
struct KnobSpaceInputs {
  engine::Knobs initial;  // the values in force when tuning starts
  // Set explicitly by the user (engine::Config::Pinned, flattened here to keep this layer's
  // inputs plain): HOROVOD_FUSION_THRESHOLD, _CACHE_CAPACITY, _BURST_QUIET_US,
  // _CALLER_PROGRESS_US, _CALLER_SPIN_US, _ALLREDUCE_ALGO, _ALLREDUCE_CROSSOVER_BYTES,
  // _HIERARCHICAL_*.
  bool pinFusion = false, pinCache = false, pinBurst = false, pinProgress = false, pinSpin = false,
       pinAlgorithm = false, pinCrossover = false, pinHierarchical = false;
  bool cacheAvailable = true;  // the cache has a capacity (HOROVOD_CACHE_CAPACITY > 0)
  int hosts = 1;               // hosts in the job: the hierarchical switch needs several
  int64_t fusionUnit = 1;      // thresholds are multiples of this (Horovod's rounding)
};

class KnobSpace {
 public:
  explicit KnobSpace(const KnobSpaceInputs& inputs);
  // A space over exactly `free` (tests, the benchmark's grid over the same knobs).
  KnobSpace(const KnobSpaceInputs& inputs, std::vector<KnobId> free);

  const std::vector<KnobId>& free() const { return free_; }
  size_t dims() const { return free_.size(); }
  const engine::Knobs& initial() const { return initial_; }

  engine::Knobs toKnobs(const std::vector<double>& coords) const;
  std::vector<double> toCoords(const engine::Knobs& knobs) const;
  // Rounds coords to the point whose knobs would really be applied.
  void snap(std::vector<double>& coords) const;
  // Every combination of `points` values per free knob (2 for switches), each knob's values
  // evenly spaced over its coordinate range: the exhaustive grid the benchmark compares with.
  std::vector<engine::Knobs> grid(int points) const;

 private:
  engine::Knobs initial_;
  int64_t fusionUnit_ = 1;
  std::vector<KnobId> free_;
};

}  // namespace hvd::autotune
