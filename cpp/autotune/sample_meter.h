// SampleMeter: turns the engine's events into throughput samples for the autotuner.
//
// A step is counted by the recurrence of one tensor name, the anchor: the first name the meter
// sees a second time (names used once, such as the initial broadcasts of a training script, never
// become it). Each time the anchor comes back in a new response list a step boundary is placed at
// that list's start, so a sample covers whole steps: from one boundary to the boundary
// `stepsPerSample` steps later, compute phases included. Its score is the collective payload
// bytes of the lists in that window divided by the window's duration (bytes per second). After
// reset() (the knobs changed) the next window opens at the next boundary, so no sample mixes two
// settings.
//
// Feed it in event order from one thread (the engine's, through the autotuner); times are
// steady-clock nanoseconds. Plain logic: tests drive it with made-up times.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

namespace hvd::autotune {

class SampleMeter {
 public:
  explicit SampleMeter(int stepsPerSample);

  // A response list starts at `nowNs`.
  void listStart(int64_t nowNs);
  // A collective of the current list ended, over `tensors`, moving `bytes`. Returns the score of
  // the sample it completed, if it completed one (its list's start closed the window).
  std::optional<double> collective(const std::vector<std::string_view>& tensors, int64_t bytes);
  // Drops the open window; the anchor stays.
  void reset();

  const std::string& anchor() const { return anchor_; }  // "" until a name recurred
  int stepsInWindow() const { return steps_; }
  // The last completed sample: its duration (s) and bytes.
  double lastSeconds() const { return lastSeconds_; }
  int64_t lastBytes() const { return lastBytes_; }

 private:
  int stepsPerSample_;
  std::string anchor_;
  std::unordered_set<std::string> seen_;  // names met so far, until one recurs
  bool open_ = false;
  bool boundaryInList_ = false;  // the anchor was met in the current list already
  int64_t listStartNs_ = 0;
  int64_t windowStartNs_ = 0;
  int64_t windowBytes_ = 0;  // of the window's lists before the current one
  int64_t listBytes_ = 0;    // of the current list
  int steps_ = 0;
  double lastSeconds_ = 0;
  int64_t lastBytes_ = 0;
};

}  // namespace hvd::autotune
