#include "engine/work.h"

#include <sched.h>

namespace hvd::engine {
namespace {

// How long a waiter that cannot drive the engine polls before blocking: short enough to be
// invisible next to a real wait, long enough to catch completions of small collectives without
// a futex round trip.
constexpr auto kSpin = std::chrono::microseconds(50);

}  // namespace

WorkImpl::WorkImpl(int members, std::shared_ptr<DriveGate> gate)
    : members_(members), remaining_(members), gate_(std::move(gate)) {}

void WorkImpl::completeMember(std::exception_ptr error) {
  if (error) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!error_ && remaining_.load() > 0) error_ = ErrorInfo::fromException(error);
  }
  int left = remaining_.load(std::memory_order_relaxed);
  do {
    if (left <= 0) return;  // failed as a whole already
  } while (!remaining_.compare_exchange_weak(left, left - 1, std::memory_order_acq_rel));
  if (left == 1) finish();
}

bool WorkImpl::hold() {
  int left = remaining_.load(std::memory_order_relaxed);
  do {
    if (left <= 0) return false;
  } while (!remaining_.compare_exchange_weak(left, left + 1, std::memory_order_acq_rel));
  return true;
}

void WorkImpl::failRemaining(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (remaining_.load() <= 0) return;
    if (!error_) error_ = ErrorInfo::fromException(error);
  }
  if (remaining_.exchange(0) > 0) finish();
}

void WorkImpl::finish() {
  // Pairs with wait(): either the sleeper's check under mu_ sees done_, or we see it counted.
  done_.store(true, std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) > 0) {
    {
      std::lock_guard<std::mutex> lock(mu_);
    }
    cv_.notify_all();
  }
  if (hasCallback_.load(std::memory_order_seq_cst)) runCallback();
}

void WorkImpl::whenComplete(std::function<void()> callback) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    callback_ = std::move(callback);
  }
  // Until it runs, the callback is a waiter that cannot drive: the background thread must not
  // leave this work to callers (DriveGate::blockedWaiter); runCallback() takes that back.
  if (gate_) gate_->blockedWaiter(+1);
  // Pairs with finish(): either it sees the flag and runs the callback, or we see done_.
  hasCallback_.store(true, std::memory_order_seq_cst);
  if (done_.load(std::memory_order_seq_cst)) runCallback();
}

void WorkImpl::runCallback() {
  std::function<void()> callback;
  {
    std::lock_guard<std::mutex> lock(mu_);
    callback = std::move(callback_);
    callback_ = nullptr;
  }
  if (!callback) return;  // the other side took it
  if (gate_) gate_->blockedWaiter(-1);
  callback();
}

bool WorkImpl::driveOrSpin(Deadline deadline) {
  // Drive the engine when it is free (that usually completes the work); otherwise poll, trying
  // the gate again, for kSpin. Returns whether the work completed. A work already completed
  // (the rest of a step's batch, once one wait drove it) returns before reading the clock.
  if (isCompleted()) return true;
  auto spinUntil = std::chrono::steady_clock::now() + kSpin;
  while (!isCompleted()) {
    if (gate_ && gate_->tryDrive(*this, deadline)) {
      if (deadline.expired()) return isCompleted();
      continue;
    }
    auto now = std::chrono::steady_clock::now();
    if (now >= spinUntil || now >= deadline.at()) return false;
    sched_yield();
  }
  return true;
}

bool WorkImpl::block(Deadline deadline) {
  sleepers_.fetch_add(1, std::memory_order_seq_cst);
  if (gate_) gate_->blockedWaiter(+1);
  bool done = true;
  {
    std::unique_lock<std::mutex> lock(mu_);
    auto isDone = [&] { return done_.load(std::memory_order_acquire); };
    if (deadline.isNever()) {
      cv_.wait(lock, isDone);
    } else {
      done = cv_.wait_until(lock, deadline.at(), isDone);
    }
  }
  if (gate_) gate_->blockedWaiter(-1);
  sleepers_.fetch_sub(1, std::memory_order_relaxed);
  return done;
}

void WorkImpl::wait() {
  if (!driveOrSpin(Deadline::never())) block(Deadline::never());
  if (error_) std::rethrow_exception(error_->toException());
}

bool WorkImpl::waitFor(std::chrono::microseconds timeout) {
  const Deadline deadline = Deadline::after(timeout);
  if (!driveOrSpin(deadline) && !block(deadline)) return false;
  if (error_) std::rethrow_exception(error_->toException());
  return true;
}

}  // namespace hvd::engine
