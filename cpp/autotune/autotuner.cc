#include "autotune/autotuner.h"

#include <sstream>

#include "common/logging.h"

namespace hvd::autotune {
namespace {

BayesOptOptions bayesOptions(const AutotuneOptions& o) {
  BayesOptOptions b;
  b.noise = o.noise;
  b.seed = o.seed;
  // A quarter of the budget spread at random (at least 2, at most 5), the rest guided.
  b.initialRandom = std::clamp(o.maxSamples / 4, 2, 5);
  return b;
}

std::string describe(const KnobSpace& space, const engine::Knobs& k) {
  std::ostringstream out;
  for (int i = 0; i < kNumKnobs; ++i) {
    if (i > 0) out << ", ";
    out << knobColumn(static_cast<KnobId>(i)) << '=' << knobText(static_cast<KnobId>(i), k);
  }
  (void)space;
  return out.str();
}

}  // namespace

Autotuner::Autotuner(const AutotuneOptions& options, KnobSpace space, std::unique_ptr<AutotuneLog> log)
    : options_(options),
      space_(std::move(space)),
      log_(std::move(log)),
      meter_(options.stepsPerSample),
      optimizer_(space_.dims(), bayesOptions(options), [this](std::vector<double>& c) { space_.snap(c); }),
      current_(space_.initial()) {
  if (options_.strategy == "grid") {
    grid_ = space_.grid(options_.gridPoints);
    options_.maxSamples = static_cast<int>(grid_.size()) + 1;  // the initial knobs, then every grid point
  }
  if (space_.dims() == 0) {
    HVD_LOG(Warning) << "Autotune: every knob is pinned (set explicitly) or fixed in this job; nothing to tune";
  }
}

engine::EventMask Autotuner::interests() const {
  return engine::eventBit(engine::EngineEventKind::kCycleStart) |
         engine::eventBit(engine::EngineEventKind::kCollectiveEnd);
}

void Autotuner::onEvent(const engine::EngineEvent& e) {
  if (settled_) return;
  if (e.kind == engine::EngineEventKind::kCycleStart) {
    meter_.listStart(e.timeNs);
    return;
  }
  if (e.kind != engine::EngineEventKind::kCollectiveEnd || next_.has_value()) return;  // a change is on its way
  names_.clear();
  for (size_t i = 0; i < e.tensors.size(); ++i) names_.push_back(e.tensors[i]);
  if (auto score = meter_.collective(names_, e.bytes)) completed(*score);
}

void Autotuner::completed(double score) {
  if (warmups_ < options_.warmupSamples) {
    record({warmups_++, "warmup", current_, score});
    return;
  }
  record({scored_++, "sample", current_, score});
  optimizer_.add(space_.toCoords(current_), score);
  if (scored_ >= options_.maxSamples || space_.dims() == 0) {
    settle();
    return;
  }
  engine::Knobs next;
  if (!grid_.empty()) {
    next = grid_[static_cast<size_t>(scored_ - 1)];
  } else {
    next = space_.toKnobs(optimizer_.suggest());
  }
  // The same setting again: keep measuring it (the meter's windows follow on each other).
  if (!(next == current_)) {
    next_ = next;
    pending_ = {score, "sample"};
  }
}

void Autotuner::settle() {
  engine::Knobs best = current_;
  double bestScore = 0;
  int bestIndex = 0;
  if (optimizer_.size() > 0) {
    // The grid is an exhaustive reference: its best is the best measured score. The Bayesian
    // choice is the model's best measured point (robust to one lucky sample).
    size_t i = 0;
    if (!grid_.empty()) {
      for (size_t j = 1; j < optimizer_.size(); ++j) {
        if (optimizer_.scores()[j] > optimizer_.scores()[i]) i = j;
      }
    } else {
      i = optimizer_.bestIndex();
    }
    best = space_.toKnobs(optimizer_.points()[i]);
    bestScore = optimizer_.scores()[i];
    bestIndex = static_cast<int>(i);
  }
  settled_ = true;
  next_ = best;
  pending_ = {bestScore, "final"};
  record({bestIndex, "final", best, bestScore});
  HVD_LOG(Info) << "Autotune: settled after " << scored_ << " samples on sample " << bestIndex << " ("
                << bestScore / 1e6 << " MB/s): " << describe(space_, best);
}

std::optional<engine::Knobs> Autotuner::poll() {
  if (!next_.has_value()) return std::nullopt;
  std::optional<engine::Knobs> out = std::move(next_);
  next_.reset();
  decision_ = pending_;
  current_ = *out;
  meter_.reset();
  if (settled_) done_ = true;
  return out;
}

bool Autotuner::done() const { return done_; }

void Autotuner::record(Sample sample) {
  if (log_) log_->row(sample.index, sample.phase.c_str(), sample.knobs, sample.score);
  std::lock_guard<std::mutex> lock(historyMu_);
  history_.push_back(std::move(sample));
}

std::vector<Autotuner::Sample> Autotuner::history() const {
  std::lock_guard<std::mutex> lock(historyMu_);
  return history_;
}

}  // namespace hvd::autotune
