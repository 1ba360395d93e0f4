// StallInspector: the coordinator's (rank 0's) watch over tensors that some ranks submitted and
// others did not. The Runtime of rank 0 owns one and calls scan() from its engine thread every
// scanInterval() (also while otherwise idle), with the coordinator's pending tensors; scan()
// returns what to do, and the Runtime does it (log, fail tensors, end the job).
//
// What it finds:
//  * Stalls: a tensor pending for HOROVOD_STALL_CHECK_TIME_SECONDS gives a warning in Horovod's
//    wording (the missing ranks, each with the tensors it has not submitted), followed by one
//    line per stalled tensor with the ranks that did submit it; repeated every check period
//    while the stall lasts. Past HOROVOD_STALL_SHUTDOWN_TIME_SECONDS (when > 0) it asks for a
//    shutdown carrying that report.
//  * Divergence: the same user-given name pending as different operations (the adapters name a
//    collective "<op>.<name>": 'allreduce.g' and 'allgather.g' are two keys to the coordinator)
//    or in different process sets, each submitted by a disjoint group of ranks, the groups
//    together covering every member that each is missing. Every rank then waits for an operation
//    that the others will not submit: a deadlock, unless a rank still submits the other variant
//    too (legal with asynchronous operations issued in different orders). So a divergence must
//    be seen by two consecutive scans, on the same submissions, before those tensors are failed
//    with a mismatch error naming who asked for what. This runs even with the stall check
//    disabled: it is a mismatch, not a stall.
//
// Ages are counted from the first scan that saw a submission (PendingTensor::instance tells
// successive submissions of a name apart), so a report comes between the check time and one
// scan interval later. Not thread-safe: the engine thread of rank 0 only.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <set>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "engine/observer.h"

namespace hvd::engine {

struct StallOptions {
  bool enabled = true;                          // warnings and shutdown (not the divergence check)
  std::chrono::milliseconds checkTime{60000};   // warn after this
  std::chrono::milliseconds shutdownTime{0};    // shut down after this; 0 = never
};

class StallInspector {
 public:
  explicit StallInspector(StallOptions options);

  // How often the Runtime should call scan(): a quarter of the check time, within [10 ms, 1 s].
  std::chrono::milliseconds scanInterval() const { return interval_; }

  struct Failed {
    int32_t processSet = 0;
    std::string name;
  };
  struct Verdict {
    std::string warning;      // log as a warning when not empty
    std::vector<Failed> diverged;  // fail each with its mismatch message (same index)
    std::vector<std::string> divergence;
    std::string shutdown;     // not empty: end the job with this message
  };
  // `pending`: the coordinator's pending tensors now (Coordinator::pendingTensors).
  Verdict scan(std::span<const PendingTensor> pending, int64_t nowNs);

  // The name without the adapter's op prefix ("allreduce.g" for an ALLREDUCE -> "g").
  static std::string_view baseName(std::string_view name, Kind op);

 private:
  using Key = std::tuple<int32_t, std::string, bool, uint64_t>;  // set, name, cached, instance
  std::string report(std::span<const PendingTensor> pending, const std::vector<size_t>& stalled,
                     const std::vector<int64_t>& ages) const;
  void findDivergence(std::span<const PendingTensor> pending, Verdict& verdict);

  StallOptions options_;
  std::chrono::milliseconds interval_;
  std::map<Key, int64_t> since_;          // first scan that saw each pending submission
  std::set<std::string> divergedBefore_;  // divergences seen by the previous scan (signatures)
  int64_t lastWarningNs_ = 0;
  bool warnedShutdownIgnored_ = false;
};

}  // namespace hvd::engine
