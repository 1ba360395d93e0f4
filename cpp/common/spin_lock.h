// SpinLock: a mutex for critical sections of a few hundred nanoseconds that two threads hit at
// high rate (the tensor queue: an enqueueing thread pushes while the background thread drains).
//
// Why not std::mutex: when it is contended it puts the loser to sleep in the kernel, and waking a
// sleeping thread costs tens of microseconds on a virtual machine: one such hand-off per
// training step is most of the step's coordination overhead. Here the loser spins (the holder
// leaves within nanoseconds) and only yields the CPU after a while, in case the holder was
// preempted. Satisfies BasicLockable (std::lock_guard works). Never hold it across a blocking call.
#pragma once

#include <sched.h>

#include <atomic>

#include "common/cpu_relax.h"

namespace hvd {

class SpinLock {
 public:
  void lock() {
    for (unsigned spins = 0; locked_.exchange(true, std::memory_order_acquire); ++spins) {
      while (locked_.load(std::memory_order_relaxed)) {
        if (++spins < 256) {
          cpuRelax();
        } else {
          sched_yield();  // the holder is probably not running: let it
        }
      }
    }
  }
  void unlock() { locked_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> locked_{false};
};

}  // namespace hvd
