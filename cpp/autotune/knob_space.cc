#include "autotune/knob_space.h"

#include <algorithm>
#include <cmath>

#include "horovod/errors.h"

namespace hvd::autotune {
namespace {

// Ranges. Byte sizes: log2 of the value. Waits: value = (max + 1)^c - 1, so c = 0 is 0 us.
constexpr double kFusionLog2Min = 14;     // 16 KiB
constexpr double kFusionLog2Max = 28;     // 256 MiB
constexpr double kCrossoverLog2Min = 10;  // 1 KiB
constexpr double kCrossoverLog2Max = 22;  // 4 MiB
constexpr double kBurstMaxUs = 200;       // the engine's own burst bound
constexpr double kProgressMaxUs = 2000;
constexpr double kSpinMaxUs = 5000;
constexpr int64_t kMaxGridPoints = 100000;

double logScale(double value, double lo, double hi) {
  const double l = std::log2(std::max(value, 1.0));
  return std::clamp((l - lo) / (hi - lo), 0.0, 1.0);
}
double fromLogScale(double c, double lo, double hi) { return std::exp2(lo + std::clamp(c, 0.0, 1.0) * (hi - lo)); }
double waitScale(double us, double max) {
  return std::clamp(std::log1p(std::max(us, 0.0)) / std::log1p(max), 0.0, 1.0);
}
int64_t fromWaitScale(double c, double max) {
  return static_cast<int64_t>(std::llround(std::expm1(std::clamp(c, 0.0, 1.0) * std::log1p(max))));
}

}  // namespace

const char* knobColumn(KnobId id) {
  switch (id) {
    case KnobId::kFusionThreshold: return "fusion_threshold_bytes";
    case KnobId::kBurstQuietUs: return "burst_quiet_us";
    case KnobId::kCallerProgressUs: return "caller_progress_us";
    case KnobId::kCallerSpinUs: return "caller_spin_us";
    case KnobId::kAllreduceCrossover: return "allreduce_crossover_bytes";
    case KnobId::kCacheEnabled: return "cache_enabled";
    case KnobId::kHierarchical: return "hierarchical";
  }
  return "?";
}

bool knobIsSwitch(KnobId id) { return id == KnobId::kCacheEnabled || id == KnobId::kHierarchical; }

std::string knobText(KnobId id, const engine::Knobs& k) {
  switch (id) {
    case KnobId::kFusionThreshold: return std::to_string(k.fusionThreshold);
    case KnobId::kBurstQuietUs: return std::to_string(k.burstQuietUs);
    case KnobId::kCallerProgressUs: return std::to_string(k.callerProgressUs);
    case KnobId::kCallerSpinUs: return std::to_string(k.callerSpinUs);
    case KnobId::kAllreduceCrossover: return std::to_string(k.allreduceCrossoverBytes);
    case KnobId::kCacheEnabled: return k.cacheEnabled ? "1" : "0";
    case KnobId::kHierarchical: return k.hierarchical ? "1" : "0";
  }
  return "";
}

KnobSpace::KnobSpace(const KnobSpaceInputs& in)
    : initial_(in.initial), fusionUnit_(std::max<int64_t>(1, in.fusionUnit)) {
  if (!in.pinFusion) free_.push_back(KnobId::kFusionThreshold);
  if (!in.pinBurst) free_.push_back(KnobId::kBurstQuietUs);
  // Whether callers may drive at all is fixed at start (engine/knobs.h): 0 stays 0.
  if (!in.pinProgress && in.initial.callerProgressUs > 0) free_.push_back(KnobId::kCallerProgressUs);
  if (!in.pinSpin && in.initial.callerProgressUs > 0) free_.push_back(KnobId::kCallerSpinUs);
  if (!in.pinAlgorithm && !in.pinCrossover) free_.push_back(KnobId::kAllreduceCrossover);
  if (!in.pinCache && in.cacheAvailable) free_.push_back(KnobId::kCacheEnabled);
  if (!in.pinHierarchical && !in.pinAlgorithm && in.hosts > 1) free_.push_back(KnobId::kHierarchical);
}

KnobSpace::KnobSpace(const KnobSpaceInputs& in, std::vector<KnobId> free)
    : initial_(in.initial), fusionUnit_(std::max<int64_t>(1, in.fusionUnit)), free_(std::move(free)) {}

engine::Knobs KnobSpace::toKnobs(const std::vector<double>& coords) const {
  if (coords.size() != free_.size()) throw InvalidArgument("KnobSpace::toKnobs: wrong number of coordinates");
  engine::Knobs k = initial_;
  for (size_t i = 0; i < free_.size(); ++i) {
    const double c = coords[i];
    switch (free_[i]) {
      case KnobId::kFusionThreshold: {
        const auto bytes = static_cast<int64_t>(std::llround(fromLogScale(c, kFusionLog2Min, kFusionLog2Max)));
        k.fusionThreshold = (bytes + fusionUnit_ - 1) / fusionUnit_ * fusionUnit_;
        break;
      }
      case KnobId::kBurstQuietUs: k.burstQuietUs = fromWaitScale(c, kBurstMaxUs); break;
      case KnobId::kCallerProgressUs:
        k.callerProgressUs = std::max<int64_t>(1, fromWaitScale(c, kProgressMaxUs));
        break;
      case KnobId::kCallerSpinUs: k.callerSpinUs = fromWaitScale(c, kSpinMaxUs); break;
      case KnobId::kAllreduceCrossover:
        k.allreduceCrossoverBytes =
            static_cast<int64_t>(std::llround(fromLogScale(c, kCrossoverLog2Min, kCrossoverLog2Max)));
        break;
      case KnobId::kCacheEnabled: k.cacheEnabled = c >= 0.5; break;
      case KnobId::kHierarchical: k.hierarchical = c >= 0.5; break;
    }
  }
  return k;
}

std::vector<double> KnobSpace::toCoords(const engine::Knobs& k) const {
  std::vector<double> c(free_.size());
  for (size_t i = 0; i < free_.size(); ++i) {
    switch (free_[i]) {
      case KnobId::kFusionThreshold:
        c[i] = logScale(static_cast<double>(k.fusionThreshold), kFusionLog2Min, kFusionLog2Max);
        break;
      case KnobId::kBurstQuietUs: c[i] = waitScale(static_cast<double>(k.burstQuietUs), kBurstMaxUs); break;
      case KnobId::kCallerProgressUs: c[i] = waitScale(static_cast<double>(k.callerProgressUs), kProgressMaxUs); break;
      case KnobId::kCallerSpinUs: c[i] = waitScale(static_cast<double>(k.callerSpinUs), kSpinMaxUs); break;
      case KnobId::kAllreduceCrossover:
        c[i] = logScale(static_cast<double>(k.allreduceCrossoverBytes), kCrossoverLog2Min, kCrossoverLog2Max);
        break;
      case KnobId::kCacheEnabled: c[i] = k.cacheEnabled ? 1.0 : 0.0; break;
      case KnobId::kHierarchical: c[i] = k.hierarchical ? 1.0 : 0.0; break;
    }
  }
  return c;
}

void KnobSpace::snap(std::vector<double>& coords) const { coords = toCoords(toKnobs(coords)); }

std::vector<engine::Knobs> KnobSpace::grid(int points) const {
  if (points < 2) throw InvalidArgument("KnobSpace::grid: at least 2 points per knob");
  std::vector<engine::Knobs> out;
  std::vector<int> index(free_.size(), 0);
  auto levels = [&](size_t i) { return knobIsSwitch(free_[i]) ? 2 : points; };
  double size = 1;
  for (size_t i = 0; i < free_.size(); ++i) size *= levels(i);
  if (size > kMaxGridPoints) {
    throw InvalidArgument("autotune grid of " + std::to_string(static_cast<int64_t>(size)) +
                          " settings is too large (at most " + std::to_string(kMaxGridPoints) +
                          "): lower HOROVOD_AUTOTUNE_GRID_POINTS or pin knobs");
  }
  while (true) {
    std::vector<double> c(free_.size());
    for (size_t i = 0; i < free_.size(); ++i) c[i] = static_cast<double>(index[i]) / (levels(i) - 1);
    out.push_back(toKnobs(c));
    size_t i = 0;
    while (i < free_.size() && ++index[i] == levels(i)) index[i++] = 0;
    if (i == free_.size()) break;
  }
  return out;
}

}  // namespace hvd::autotune
