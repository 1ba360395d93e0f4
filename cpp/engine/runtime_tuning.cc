// Runtime: knobs changed while the job runs (knobs.h) and the tuner that decides them (tuner.h).
#include <algorithm>

#include "collectives/algorithms.h"
#include "common/logging.h"
#include "engine/runtime.h"

namespace hvd::engine {

void Runtime::initKnobs() {
  // After the fusion options are agreed (rank 0's threshold) and before the engine's thread starts.
  Knobs k;
  k.fusionThreshold = fusion_.threshold;
  k.burstQuietUs = config_.burstQuietUs;
  k.callerProgressUs = config_.callerProgressUs;
  k.callerSpinUs = config_.callerSpinUs;
  k.allreduceCrossoverBytes = config_.allreduceCrossoverBytes > 0
                                  ? config_.allreduceCrossoverBytes
                                  : static_cast<int64_t>(collectives::defaultAllreduceCrossover());
  k.cacheEnabled = config_.cacheCapacity > 0;
  k.hierarchical = true;
  burstQuietUs_.store(k.burstQuietUs);
  callerProgressUs_.store(k.callerProgressUs);
  callerSpinUs_.store(k.callerSpinUs);
  {
    std::lock_guard<std::mutex> lock(knobsMu_);
    knobs_ = k;
  }
  backends_.applyKnobs(k);  // before any backend exists: they are built with these
}

Knobs Runtime::knobs() const {
  std::lock_guard<std::mutex> lock(knobsMu_);
  return knobs_;
}

void Runtime::applyKnobs(const Knobs& wanted) {
  Knobs k = wanted;
  // Whether callers may drive is decided per operation at enqueue (newWork): never switch it.
  const int64_t progress = callerProgressUs_.load(std::memory_order_relaxed);
  k.callerProgressUs = progress == 0 ? 0 : std::max<int64_t>(1, k.callerProgressUs);
  k.burstQuietUs = std::clamp<int64_t>(k.burstQuietUs, 0, 1000);
  k.callerSpinUs = std::max<int64_t>(0, k.callerSpinUs);
  k.fusionThreshold = std::max<int64_t>(0, k.fusionThreshold);
  // What cached steps derive (responsesForHits) and what this rank fuses follows the new
  // threshold from this list on, on every rank alike.
  fusion_.threshold = k.fusionThreshold;
  derivedHits_.clear();
  burstQuietUs_.store(k.burstQuietUs, std::memory_order_relaxed);
  callerProgressUs_.store(k.callerProgressUs, std::memory_order_relaxed);
  callerSpinUs_.store(k.callerSpinUs, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(knobsMu_);
    knobs_ = k;
  }
  backends_.applyKnobs(k);
  HVD_LOG(Debug) << "Rank " << topology_.rank << ": knobs applied at response list " << lastSeq_ + 1
                 << ": fusion threshold " << k.fusionThreshold << " B, burst quiet " << k.burstQuietUs
                 << " us, caller progress " << k.callerProgressUs << " us, caller spin " << k.callerSpinUs
                 << " us, allreduce crossover " << k.allreduceCrossoverBytes << " B, cache "
                 << (k.cacheEnabled ? "on" : "off") << ", hierarchical " << (k.hierarchical ? "on" : "off");
  if (observers_.wants(EngineEventKind::kKnobsApplied)) [[unlikely]] {
    EngineEvent e;
    e.kind = EngineEventKind::kKnobsApplied;
    e.knobs = &k;
    e.score = tunerDecision_.score;
    e.decision = tunerDecision_.kind;
    observers_.publish(e);
  }
  tunerDecision_ = {};
}

void Runtime::setTuner(std::shared_ptr<Tuner> tuner) {
  if (!initialized_ || topology_.rank != 0) {
    throw InvalidArgument("Runtime::setTuner: only rank 0's initialized runtime decides knob changes (rank " +
                          std::to_string(topology_.rank) + ")");
  }
  std::lock_guard<std::mutex> lock(tunerMu_);
  if (tuner_) observers_.remove(tuner_);
  tuner_ = std::move(tuner);
  if (tuner_) observers_.add(tuner_);
  hasTuner_.store(tuner_ != nullptr, std::memory_order_relaxed);
}

void Runtime::pollTuner() {
  std::shared_ptr<Tuner> tuner;
  {
    std::lock_guard<std::mutex> lock(tunerMu_);
    tuner = tuner_;
  }
  if (!tuner) return;
  bool failed = false;
  try {
    if (std::optional<Knobs> change = tuner->poll()) {
      tunerDecision_ = tuner->lastDecision();
      coordinator_->retune(*change);
    }
  } catch (const std::exception& e) {
    // A tuner is advice: the job goes on with the knobs it has.
    HVD_LOG(Error) << "Knob tuner failed, stopping it: " << e.what();
    failed = true;
  }
  if (failed || tuner->done()) {
    std::lock_guard<std::mutex> lock(tunerMu_);
    if (tuner_ == tuner) {
      observers_.remove(tuner_);
      tuner_.reset();
      hasTuner_.store(false, std::memory_order_relaxed);
    }
  }
}

}  // namespace hvd::engine
