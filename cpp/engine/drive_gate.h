// DriveGate: who runs the engine of one Runtime right now. The background thread normally does;
// a thread that waits for one of the runtime's operations may run it instead while the
// background thread leaves it newly enqueued work (HOROVOD_CALLER_PROGRESS_US), so that during a
// training step each rank keeps one thread busy, not two (MPI's progress model: the waiting call
// makes progress). One token, held by whoever runs the engine; every operation's WorkImpl keeps
// the gate alive, so a wait that outlives its runtime finds the gate closed, never a dangling
// runtime.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>

#include "common/deadline.h"

namespace hvd::engine {

class Runtime;
class WorkImpl;

class DriveGate {
 public:
  explicit DriveGate(Runtime* runtime) : runtime_(runtime) {}

  // If no thread runs the engine now, runs it on this thread until `work` completes, `deadline`
  // passes or the engine stops; returns whether it did (false: the engine is busy elsewhere or
  // stopped, wait for the work the ordinary way).
  bool tryDrive(const WorkImpl& work, Deadline deadline);

  // The token: held by the background thread while it runs the engine, by a driving waiter, and
  // briefly by an enqueueing thread that collects its own request (Runtime::wakeEngine).
  std::mutex& token() { return token_; }
  // Waiters blocked on an operation (they no longer try the token): while there are any, the
  // background thread does not leave work to callers, and a new one ends its park.
  void blockedWaiter(int delta) {
    blocked_.fetch_add(delta, std::memory_order_relaxed);
    if (delta > 0) unpark();
  }
  bool hasBlockedWaiters() const { return blocked_.load(std::memory_order_relaxed) > 0; }

  // The background thread's park, the token released: returns after `timeout` (false) or at
  // unpark() (true; an unpark() while nobody is parked ends the next park at once).
  bool park(std::chrono::microseconds timeout);
  void unpark();

  // How long the background thread's next park for callers lasts, after one of `current`:
  // doubled while callers keep running the engine (`callersDrove`), up to
  // max(window, kLongestPark); else back to `window` (HOROVOD_CALLER_PROGRESS_US). Every end of a
  // park wakes the background thread on a CPU that a driving caller is using: with 200 us parks
  // that cost ~20% of a 1 MiB allreduce on 2 vCPUs (measured). Longer parks
  // delay only work that nobody waits for right after callers drove, by at most twice
  // kLongestPark (one park to notice that nobody drives, one to leave the work to callers).
  static constexpr std::chrono::microseconds kLongestPark{1000};
  static std::chrono::microseconds nextPark(std::chrono::microseconds current, std::chrono::microseconds window,
                                            bool callersDrove) {
    if (!callersDrove) return window;
    return std::min(current * 2, std::max(window, kLongestPark));
  }

  // No thread drives after this (the runtime's loop ended). Call with the token held.
  void close() { runtime_ = nullptr; }
  bool open() const { return runtime_ != nullptr; }  // with the token held

 private:
  std::mutex token_;
  Runtime* runtime_;  // guarded by token_
  std::atomic<int> blocked_{0};
  std::mutex parkMu_;
  std::condition_variable parkCv_;
  bool unparked_ = false;  // guarded by parkMu_
};

}  // namespace hvd::engine
