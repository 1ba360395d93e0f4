#include "engine/drive_gate.h"

#include "engine/runtime.h"

namespace hvd::engine {

bool DriveGate::tryDrive(const WorkImpl& work, Deadline deadline) {
  std::unique_lock<std::mutex> lock(token_, std::try_to_lock);
  if (!lock.owns_lock() || runtime_ == nullptr) return false;
  return runtime_->drive(work, deadline);
}

}  // namespace hvd::engine
