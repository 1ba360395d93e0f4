#include "engine/work.h"

#include <sched.h>

namespace hvd::engine {
namespace {

// How long a waiter polls before blocking: short enough to be invisible next to a real wait,
// long enough to catch completions of small collectives without a futex round trip.
constexpr auto kSpin = std::chrono::microseconds(50);

}  // namespace

WorkImpl::WorkImpl(int members) : members_(members), remaining_(members) {}

void WorkImpl::completeMember(std::exception_ptr error) {
  bool last = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (remaining_ <= 0) return;
    if (error && !error_) error_ = error;
    last = --remaining_ == 0;
  }
  if (last) finish();
}

void WorkImpl::failRemaining(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (remaining_ <= 0) return;
    if (!error_) error_ = error;
    remaining_ = 0;
  }
  finish();
}

void WorkImpl::finish() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_.store(true, std::memory_order_release);
  }
  cv_.notify_all();
  if (callback_) callback_();
}

void WorkImpl::wait() {
  auto spinUntil = std::chrono::steady_clock::now() + kSpin;
  while (!isCompleted() && std::chrono::steady_clock::now() < spinUntil) sched_yield();
  if (!isCompleted()) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return done_.load(std::memory_order_acquire); });
  }
  if (error_) std::rethrow_exception(error_);
}

bool WorkImpl::waitFor(std::chrono::milliseconds timeout) {
  if (!isCompleted()) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, timeout, [&] { return done_.load(std::memory_order_acquire); })) return false;
  }
  if (error_) std::rethrow_exception(error_);
  return true;
}

}  // namespace hvd::engine
