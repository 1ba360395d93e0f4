// WorkImpl: the engine's hvd::Work. Created by the enqueueing thread, completed by the thread
// running the engine (engine/runtime.h); any thread may wait. A grouped call has one WorkImpl
// with one slot per member; it completes when every member has, with the first member failure
// as its error.
//
// Waiting first offers to run the engine itself (DriveGate: when the background thread has left
// the work to its callers, the waiter does the negotiation and the collective on its own thread,
// no hand-off), else spins briefly (most collectives on small tensors finish within
// microseconds) and then blocks on a condition variable, so an idle waiter costs no CPU.
#pragma once

#include <atomic>
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "engine/drive_gate.h"
#include "engine/message.h"
#include "horovod/operation.h"

namespace hvd::engine {

class WorkImpl : public Work {
 public:
  // `gate`: the runtime's engine, which waiters may drive (nullptr: never).
  explicit WorkImpl(int members = 1, std::shared_ptr<DriveGate> gate = nullptr);

  bool isCompleted() const override { return done_.load(std::memory_order_acquire); }
  void wait() override;
  bool waitFor(std::chrono::microseconds timeout) override;
  const std::vector<OwnedTensor>& outputs() const override { return outputs_; }
  const std::vector<int32_t>& receivedSplits() const override { return receivedSplits_; }
  int joinResult() const override { return joinResult_; }
  void whenComplete(std::function<void()> callback) override;

  // ---- Background thread (or the enqueueing thread before the work is queued) -------------
  // Outputs are written before the member completes; members never share a slot.
  OwnedTensor& output(int member) {
    if (outputs_.empty()) outputs_.resize(static_cast<size_t>(members_));
    return outputs_[member];
  }
  void setReceivedSplits(std::vector<int32_t> splits) { receivedSplits_ = std::move(splits); }
  void setJoinResult(int rank) { joinResult_ = rank; }
  // Marks one member done (error = nullptr for success). Completes the work with the last one.
  void completeMember(std::exception_ptr error);
  // Counts one more member to complete, so that the work cannot complete before a matching
  // completeMember(nullptr) (which keeps an error another member reported). False, and nothing
  // held, when the work has completed already.
  bool hold();
  // Fails every member that has not completed yet (shutdown, fatal transport error).
  void failRemaining(std::exception_ptr error);

 private:
  void finish();
  bool driveOrSpin(Deadline deadline);
  // Sleeps on cv_ until completion (true) or the deadline (false).
  bool block(Deadline deadline);
  // Takes the registered callback (under mu_) and runs it; whoever gets it first runs it.
  void runCallback();

  std::atomic<bool> done_{false};
  // Threads blocked (or about to block) on cv_: completion takes mu_ and notifies only then, so
  // completing an operation nobody sleeps on costs no lock and no system call.
  std::atomic<int> sleepers_{0};
  std::mutex mu_;  // guards error_ writes and the cv_ hand-off
  std::condition_variable cv_;
  int members_;
  std::atomic<int> remaining_;
  // The failure as data, converted on the completing thread; each waiter throws an exception
  // object of its own. One exception object shared by two threads would be kept alive by
  // libstdc++'s reference count, which ThreadSanitizer cannot see (it reports the waiter's read
  // and the completer's destruction as a race), and no thread needs another's object.
  std::optional<ErrorInfo> error_;
  std::vector<OwnedTensor> outputs_;
  std::vector<int32_t> receivedSplits_;
  int joinResult_ = -1;
  // whenComplete(): set under mu_, flagged in hasCallback_ (pairs with done_ like sleepers_).
  std::function<void()> callback_;
  std::atomic<bool> hasCallback_{false};
  std::shared_ptr<DriveGate> gate_;
};

}  // namespace hvd::engine
