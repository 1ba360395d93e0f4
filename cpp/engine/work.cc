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
  if (error) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!error_ && remaining_.load() > 0) error_ = error;
  }
  int left = remaining_.load(std::memory_order_relaxed);
  do {
    if (left <= 0) return;  // failed as a whole already
  } while (!remaining_.compare_exchange_weak(left, left - 1, std::memory_order_acq_rel));
  if (left == 1) finish();
}

void WorkImpl::failRemaining(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (remaining_.load() <= 0) return;
    if (!error_) error_ = error;
  }
  if (remaining_.exchange(0) > 0) finish();
}

void WorkImpl::finish() {
  // Pairs with wait(): either the sleeper's check under mu_ sees done_, or we see it counted.
  done_.store(true, std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) > 0) {
    { std::lock_guard<std::mutex> lock(mu_); }
    cv_.notify_all();
  }
  if (callback_) callback_();
}

void WorkImpl::wait() {
  auto spinUntil = std::chrono::steady_clock::now() + kSpin;
  while (!isCompleted() && std::chrono::steady_clock::now() < spinUntil) sched_yield();
  if (!isCompleted()) {
    sleepers_.fetch_add(1, std::memory_order_seq_cst);
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return done_.load(std::memory_order_acquire); });
    }
    sleepers_.fetch_sub(1, std::memory_order_relaxed);
  }
  if (error_) std::rethrow_exception(error_);
}

bool WorkImpl::waitFor(std::chrono::milliseconds timeout) {
  if (!isCompleted()) {
    sleepers_.fetch_add(1, std::memory_order_seq_cst);
    bool done = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      done = cv_.wait_for(lock, timeout, [&] { return done_.load(std::memory_order_acquire); });
    }
    sleepers_.fetch_sub(1, std::memory_order_relaxed);
    if (!done) return false;
  }
  if (error_) std::rethrow_exception(error_);
  return true;
}

}  // namespace hvd::engine
