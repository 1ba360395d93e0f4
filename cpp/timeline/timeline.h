// Timeline: an engine observer that writes what rank 0's engine does, per tensor, as a Chrome
// trace (chrome://tracing, https://ui.perfetto.dev). One row per tensor name (the name the
// framework gave, e.g. "allreduce.fc1.weight"); on it:
//   NEGOTIATE_<OP>            first request to the last rank's request (only for tensors
//                             negotiated in full; cached steps skip it), with one instant event per
//                             rank's arrival, named after the rank
//   QUEUE                     ready (negotiated, or rank 0's cache hit) to the start of execution
//   MEMCPY_IN_FUSION_BUFFER   copy into the fusion buffer (fused responses that use it)
//   <OP> (ALLREDUCE, ...)     the data exchange; args: algorithm, bytes, process_set, fused_tensors
//   MEMCPY_OUT_FUSION_BUFFER  copy out of the fusion buffer
// and, with markCycles, a global CYCLE_START instant each time the engine starts a step's work.
//
// Threads: onEvent runs on the engine's thread (it subscribes to no kEnqueue); it only updates a
// small per-tensor table and queues fixed-size records to the TimelineWriter, whose own thread
// formats and writes them. close() may run on any thread, after the Timeline is removed from the
// Runtime (an event in flight then finds the writer closed and is dropped).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/params.h"
#include "engine/observer.h"
#include "timeline/timeline_writer.h"

namespace hvd::timeline {

// HOROVOD_TIMELINE, HOROVOD_TIMELINE_MARK_CYCLES, HOROVOD_TIMELINE_MAX_BYTES.
struct TimelineSettings {
  bool enabled = false;    // HOROVOD_TIMELINE set to anything: start_timeline() is allowed
  std::string path;        // the file to start with at init ("" for DYNAMIC)
  bool markCycles = false;
  int64_t maxBytes = 0;
  static TimelineSettings fromEnvironment(const EnvLookup& env);
};

// The args object of an AUTOTUNE event: the knob values, the tuner's decision ("sample",
// "final") and the score of the sample that led to it (bytes per second), when known.
std::string knobsArgs(const engine::Knobs& knobs, double score, const char* decision);

class Timeline : public engine::EngineObserver {
 public:
  // Opens `path` (see TimelineWriter); throws hvd::Error when it cannot.
  Timeline(const std::string& path, bool markCycles, WriterOptions options = {});
  ~Timeline() override;

  void onEvent(const engine::EngineEvent& event) override;
  engine::EventMask interests() const override;

  void close() { writer_.close(); }
  const std::string& path() const { return writer_.path(); }
  uint64_t dropped() const { return writer_.dropped(); }
  uint64_t rotations() const { return writer_.rotations(); }

 private:
  struct Row {
    uint32_t id = 0;
    int64_t negotiateStartNs = -1;
    int64_t queueStartNs = -1;
  };
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  Row& row(std::string_view name);
  // The rows of the response an execution event names (cached between its events).
  const std::vector<Row*>& responseRows(const engine::TensorNames& tensors);
  void closeQueues(const engine::EngineEvent& event);
  void spans(const engine::EngineEvent& event, Activity activity, int64_t startNs);

  const bool markCycles_;
  TimelineWriter writer_;
  std::unordered_map<std::string, Row, Hash, std::equal_to<>> rows_;
  std::vector<Row*> current_;   // responseRows()
  std::string currentFirst_, currentLast_;
  int64_t copyInStartNs_ = -1, collectiveStartNs_ = -1, copyOutStartNs_ = -1;
  std::vector<Record> scratch_;
};

}  // namespace hvd::timeline
