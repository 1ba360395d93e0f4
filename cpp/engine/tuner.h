// Tuner: the seam through which something on rank 0 (the autotuner, a test) changes the engine's
// knobs (engine/knobs.h) while the job runs.
#pragma once

#include <optional>

#include "engine/knobs.h"
#include "engine/observer.h"

namespace hvd::engine {

// Decides knob changes on rank 0. It is an observer too (it measures what the knobs do through
// the engine's events): Runtime::setTuner subscribes it and calls poll() on the engine's thread
// (the one delivering its events, never concurrently with them) before each response list is
// built. Knobs returned by poll() go out with the next list and apply on every rank before that
// list's responses. done() == true after a poll() makes the Runtime drop the tuner and
// unsubscribe it (nothing more is measured or paid for). Like onEvent(), poll() must be quick and
// must not block on the Runtime's operations.
class Tuner : public EngineObserver {
 public:
  virtual std::optional<Knobs> poll() = 0;
  virtual bool done() const = 0;
  // Why the last poll() returned knobs, for observers of kKnobsApplied (the timeline): the score
  // of the sample that led to them (bytes reduced per second; < 0: none) and what they are
  // ("sample": the next setting to measure; "final": the choice). Optional.
  struct Decision {
    double score = -1;
    const char* kind = nullptr;  // a static string, or null
  };
  virtual Decision lastDecision() const { return {}; }
};

}  // namespace hvd::engine
