// Autotuner: rank 0's engine::Tuner (engine/tuner.h). It measures each knob setting with a
// SampleMeter over the engine's events, asks a BayesianOptimizer (or walks the exhaustive grid)
// for the next setting, and after the last sample settles on the best one and stops (the
// Runtime then unsubscribes it: the rest of the job pays nothing).
//
// Phases: `warmupSamples` samples at the initial knobs, discarded; then `maxSamples` scored
// samples, the first at the initial knobs, the others where the optimiser suggests; then the
// final choice. Each completed sample is a row of the log (autotune_log.h).
//
// Threads: onEvent() and poll() come from the engine's thread (never concurrently); history()
// and the getters from any thread.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "autotune/autotune_log.h"
#include "autotune/autotune_options.h"
#include "autotune/bayes_opt.h"
#include "autotune/knob_space.h"
#include "autotune/sample_meter.h"
#include "engine/tuner.h"

namespace hvd::autotune {

class Autotuner : public engine::Tuner {
 public:
  // `log`: where rows go (nullptr = nowhere).
  Autotuner(const AutotuneOptions& options, KnobSpace space, std::unique_ptr<AutotuneLog> log = nullptr);

  engine::EventMask interests() const override;
  void onEvent(const engine::EngineEvent& event) override;
  std::optional<engine::Knobs> poll() override;
  bool done() const override;
  Decision lastDecision() const override { return decision_; }

  struct Sample {
    int index = 0;            // within its phase
    std::string phase;        // "warmup", "sample", "final"
    engine::Knobs knobs;
    double score = 0;         // bytes per second
  };
  // Every completed sample so far, and the final row once chosen.
  std::vector<Sample> history() const;
  const KnobSpace& space() const { return space_; }

 private:
  void completed(double score);  // a sample of current_ ended
  void settle();
  void record(Sample sample);

  AutotuneOptions options_;
  KnobSpace space_;
  std::unique_ptr<AutotuneLog> log_;
  SampleMeter meter_;
  BayesianOptimizer optimizer_;
  std::vector<engine::Knobs> grid_;  // the grid strategy's points, in order
  engine::Knobs current_;            // the knobs being measured
  std::optional<engine::Knobs> next_;  // to hand out at the next poll()
  Decision pending_;                   // why next_ (set with it)
  Decision decision_;                  // why the knobs poll() handed out last
  int warmups_ = 0;
  int scored_ = 0;
  bool settled_ = false;  // the final knobs were chosen
  bool done_ = false;     // ... and handed out
  std::vector<std::string_view> names_;  // scratch
  mutable std::mutex historyMu_;
  std::vector<Sample> history_;
};

}  // namespace hvd::autotune
