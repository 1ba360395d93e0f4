// PollPatience: a per-thread floor on how long that thread's transport waits poll before they
// sleep (the shared-memory transport's Waiter reads it; the TCP transport waits in poll(2)
// either way).
//
// The engine raises it on a thread that waits for its own operation while running the engine
// (Runtime::drive). That thread has nothing else to do until its peers answer, and when they
// answer after it fell asleep (a rank that finished its backward pass later) it pays a wake-up:
// a futex wake and, on a VM, the host waking a halted vCPU, tens of microseconds
// (measured with bench/coord_bench --late-rank-us). The background thread keeps the transport's own setting: its
// idle waits span whole forward and backward passes.
#pragma once

#include <algorithm>
#include <chrono>

namespace hvd {

class PollPatience {
 public:
  // This thread's floor (0 = none).
  static std::chrono::microseconds current() { return floor_; }

  // Raises this thread's floor to at least `atLeast` while it lives (scopes nest).
  class Scope {
   public:
    explicit Scope(std::chrono::microseconds atLeast) : saved_(floor_) { floor_ = std::max(floor_, atLeast); }
    ~Scope() { floor_ = saved_; }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    std::chrono::microseconds saved_;
  };

 private:
  static inline thread_local std::chrono::microseconds floor_{0};
};

}  // namespace hvd
