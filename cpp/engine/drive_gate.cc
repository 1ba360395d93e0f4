#include "engine/drive_gate.h"

#include "engine/runtime.h"

namespace hvd::engine {

bool DriveGate::tryDrive(const WorkImpl& work, Deadline deadline) {
  std::unique_lock<std::mutex> lock(token_, std::try_to_lock);
  if (!lock.owns_lock() || runtime_ == nullptr) return false;
  return runtime_->drive(work, deadline);
}

bool DriveGate::park(std::chrono::microseconds timeout) {
  std::unique_lock<std::mutex> lock(parkMu_);
  const bool woken = parkCv_.wait_for(lock, timeout, [&] { return unparked_; });
  unparked_ = false;
  return woken;
}

void DriveGate::unpark() {
  {
    std::lock_guard<std::mutex> lock(parkMu_);
    unparked_ = true;
  }
  parkCv_.notify_one();
}

}  // namespace hvd::engine
