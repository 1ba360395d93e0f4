// TimelineWriter: the file side of the timeline. The engine's thread hands it fixed-size records
// (push); a thread of its own turns them into Chrome trace-event JSON and writes them, so the
// engine never formats text nor touches the file.
//
// File format (Chrome's "JSON Array Format"): the file starts with "[", then one event per line,
// each followed by ",". Chrome and Perfetto load such a file as it is, closing "]" or not, so a
// file read while the job runs is usable; a reader that wants strict JSON drops an incomplete
// last line and the trailing comma and appends "]" (horovod-timeline does). close() ends the
// array with a last metadata event and "]".
//
// Bounds. The queue holds at most `queueCapacity` records: when it is full (the writer fell
// behind) further records are dropped and counted, and the count is written into the file as a
// TIMELINE_DROPPED instant event. On disk the timeline takes at most `maxBytes`, in three
// segments: the head (the start of the job, at most maxBytes / 4) and two rotating ones (at most
// 3/8 of maxBytes each). The first segment is the head: when the live file (`path`) would grow
// past its share, it is closed ("]") and renamed to `path`.head, which is never replaced. Later,
// when the live file would grow past the rotating share, it is closed and renamed to `path`.1
// (replacing an older one). Each time a fresh `path` begins with the rows' names repeated, so each
// file is a complete trace on its own (one time origin for all): the head shows the warm-up, the
// pair the most recent activity. The writer removes a `path`.head and `path`.1 left by an earlier
// timeline at the same path when it starts. maxBytes = 0: unbounded, a single file.
//
// When the file catches up. The writer sleeps while nothing is queued; the first record after a
// quiet spell wakes it (one notify per burst, not per push). While records keep coming it batches
// them, and it writes the batch once none has arrived for `quietInterval` (the engine went idle:
// the file then shows the op a few ms after it completed), once `flushInterval` passed since the
// batch began (a loop that never pauses), or at half the queue's capacity.
//
// Threads: push/addRow from one producer at a time (the engine's thread); close from any thread,
// once (the destructor calls it too).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "engine/message.h"

namespace hvd::timeline {

// What a record shows; each becomes one trace event on its tensor's row.
enum class Activity : uint8_t {
  kNegotiate,   // span NEGOTIATE_<OP>: first request to the last one (rank 0, not on cache hits)
  kRankReady,   // instant: rank `rank`'s request arrived
  kQueue,       // span QUEUE: ready (negotiated, or this rank's cache hit) to execution start
  kCopyIn,      // span MEMCPY_IN_FUSION_BUFFER
  kCollective,  // span named after the op (ALLREDUCE, ...), args: algorithm, bytes, process set
  kCopyOut,     // span MEMCPY_OUT_FUSION_BUFFER
  kCycleStart,  // instant CYCLE_START (global, no row)
};

struct Record {
  Activity activity = Activity::kQueue;
  engine::Kind op = engine::Kind::kAllreduce;
  uint32_t row = 0;              // the tensor's row (addRow); unused for kCycleStart
  int32_t rank = -1;             // kRankReady
  int32_t processSet = 0;
  uint32_t fused = 1;            // tensors in the response (spans of execution)
  int64_t startNs = 0;           // steady clock
  int64_t endNs = 0;             // spans
  int64_t bytes = 0;             // copies and collectives: the response's bytes
  const char* algorithm = nullptr;  // kCollective: a static string, or null
};

struct WriterOptions {
  int64_t maxBytes = 50'000'000;  // both files together; 0 = unbounded
  size_t queueCapacity = size_t{1} << 16;
  std::chrono::milliseconds flushInterval{200};  // the longest a batch waits while records keep coming
  std::chrono::microseconds quietInterval{2000};  // no record for this long: the batch is written
};

class TimelineWriter {
 public:
  // Opens `path` (truncating it) and writes the header before returning; throws hvd::Error when
  // the file cannot be opened. Starts the writer thread.
  TimelineWriter(std::string path, WriterOptions options);
  ~TimelineWriter();
  TimelineWriter(const TimelineWriter&) = delete;
  TimelineWriter& operator=(const TimelineWriter&) = delete;

  // Names row `row` (rows are numbered 1, 2, ... in the order they are added). Never dropped.
  void addRow(uint32_t row, std::string_view name);
  // Queues records; those that do not fit are dropped (counted). Cheap: one short lock.
  void push(std::span<const Record> records);
  // A global instant event `name` at `timeNs` (steady clock) with `args` (a JSON object), for
  // rare events (autotune's knob changes): formatted by the caller, never dropped.
  void pushInstant(std::string_view name, int64_t timeNs, std::string args);
  // Writes what is queued, ends the file with "]" and stops the thread. Idempotent.
  void close();

  const std::string& path() const { return path_; }
  uint64_t dropped() const { return dropped_.load(std::memory_order_relaxed); }
  uint64_t rotations() const { return rotations_.load(std::memory_order_relaxed); }  // the head's included
  // The segments' shares of maxBytes (0 when unbounded).
  static int64_t headShare(int64_t maxBytes) { return maxBytes / 4; }
  static int64_t rotatingShare(int64_t maxBytes) { return (maxBytes - headShare(maxBytes)) / 2; }

 private:
  void run();
  // Under mu_: blocks until a batch is due (see above) or the writer is closing.
  void waitForBatch(std::unique_lock<std::mutex>& lock);
  bool pendingLocked() const { return !queue_.empty() || !newRows_.empty() || !newInstants_.empty(); }
  // Under mu_: counts an arrival; true when the writer sleeps and must be woken.
  bool arrivedLocked() {
    ++arrivals_;
    if (!writerIdle_) return false;
    writerIdle_ = false;
    return true;
  }
  void writeBatch(const std::vector<Record>& records, const std::vector<std::pair<uint32_t, std::string>>& rows,
                  const std::vector<std::string>& instants, uint64_t droppedNow);
  void openSegment();  // truncates path_, writes the header and every known row's name
  void endSegment();   // writes the closing event and "]", closes the file
  void emit(const std::string& line);  // one event line; rotates first when it would not fit
  void flushText();
  std::string format(const Record& r) const;
  double micros(int64_t steadyNs) const;

  const std::string path_;
  const WriterOptions options_;
  const int64_t originNs_;         // steady-clock time of ts = 0
  const int64_t originEpochUs_;    // the same moment, in microseconds since the Unix epoch

  // Shared with the producer, under mu_.
  std::mutex mu_;
  std::condition_variable wake_;
  std::vector<Record> queue_;
  std::vector<std::pair<uint32_t, std::string>> newRows_;
  std::vector<std::string> newInstants_;  // complete event lines (pushInstant)
  bool closing_ = false;
  bool writerIdle_ = false;    // the writer sleeps until the next record (push notifies)
  uint64_t arrivals_ = 0;      // push/addRow/pushInstant calls: the writer tells a quiet spell by it
  std::atomic<uint64_t> dropped_{0};
  std::atomic<uint64_t> rotations_{0};

  // The writer thread's own state.
  std::FILE* file_ = nullptr;
  int64_t segmentBytes_ = 0;
  int64_t headerBytes_ = 0;
  bool headKept_ = false;                 // the first segment became path_.head
  std::string text_;                      // formatted, not yet written
  std::vector<std::string> rowNames_;     // index = row - 1
  uint64_t droppedReported_ = 0;
  std::thread thread_;
  bool closed_ = false;
  std::mutex closeMu_;
};

// Chrome trace-event text helpers (also for tests).
std::string jsonEscape(std::string_view text);
// The activity's event name: NEGOTIATE_ALLREDUCE, QUEUE, ALLREDUCE, ...
std::string activityName(Activity activity, engine::Kind op);

}  // namespace hvd::timeline
