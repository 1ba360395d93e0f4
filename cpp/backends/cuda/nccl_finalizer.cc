#include "backends/cuda/nccl_finalizer.h"

#include <sched.h>

#include <algorithm>
#include <chrono>

#include "common/logging.h"
#include "horovod/errors.h"

namespace hvd::cuda {
namespace {

// Waiting for a batch: yield this many rounds (a small collective finishes within them), then
// sleep, longer the longer it takes, up to kMaxSleep (the latency added to a long collective).
constexpr int kYieldRounds = 64;
constexpr auto kMaxSleep = std::chrono::microseconds(1000);
// How often asynchronous NCCL errors are looked for while work is pending.
constexpr auto kErrorPoll = std::chrono::milliseconds(2);
// After NCCL reports an asynchronous error, how long the pending works wait for the Runtime's own
// verdict (abort() with e.g. the lost rank named, which its liveness watch finds within ~1.5 s)
// before they fail with NCCL's error.
constexpr auto kAsyncErrorGrace = std::chrono::milliseconds(2500);

void completeAll(std::vector<PendingBatch>& batches, const std::exception_ptr& error) {
  for (auto& b : batches) {
    for (auto& m : b.members) m.work->completeMember(error);
  }
}

}  // namespace

NcclFinalizer::NcclFinalizer(const CudaApi& api, int device, std::vector<ncclComm_t> comms, std::function<void()> wake)
    : api_(api), device_(device), wake_(std::move(wake)), comms_(std::move(comms)), thread_([this] { loop(); }) {}

NcclFinalizer::~NcclFinalizer() { stop(); }

void NcclFinalizer::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::unique_ptr<Event> NcclFinalizer::takeEvent() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!freeEvents_.empty()) {
      std::unique_ptr<Event> e = std::move(freeEvents_.back());
      freeEvents_.pop_back();
      return e;
    }
  }
  return std::make_unique<Event>(api_, device_);
}

void NcclFinalizer::submit(PendingBatch batch) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    pending_.push_back(std::move(batch));
  }
  cv_.notify_one();
}

std::exception_ptr NcclFinalizer::failure() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failure_;
}

bool NcclFinalizer::commAborted() const {
  std::lock_guard<std::mutex> lock(mu_);
  return commAborted_;
}

void NcclFinalizer::addComms(const std::vector<ncclComm_t>& comms) {
  std::lock_guard<std::mutex> lock(commMu_);
  comms_.insert(comms_.end(), comms.begin(), comms.end());
}

void NcclFinalizer::abortComm() {
  std::lock_guard<std::mutex> lock(commMu_);
  if (commAborted_) return;
  for (ncclComm_t comm : comms_) {
    const ncclResult_t status = api_.nccl->commAbort(comm);
    if (status != ncclSuccess) {
      HVD_LOG(Warning) << "ncclCommAbort on GPU " << device_ << ": " << api_.nccl->getErrorString(status);
    }
  }
  commAborted_ = true;
}

void NcclFinalizer::abort(std::exception_ptr error) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!failure_) failure_ = error;
  abortComm();
  failAll(lock, error);
  lock.unlock();
  wake_();
}

void NcclFinalizer::failAll(std::unique_lock<std::mutex>& lock, std::exception_ptr error) {
  std::vector<PendingBatch> failing(std::make_move_iterator(pending_.begin()), std::make_move_iterator(pending_.end()));
  pending_.clear();
  lock.unlock();
  completeAll(failing, error);
  lock.lock();
  // The device may still touch the failed batches' scratch until their streams drain: it goes
  // with the backend (which synchronizes its streams first), not now.
  for (auto& b : failing) {
    for (auto& k : b.keepAlive) graveyard_.push_back(std::move(k));
  }
}

bool NcclFinalizer::completeReady(std::unique_lock<std::mutex>& lock) {
  std::vector<PendingBatch> done;
  std::vector<std::exception_ptr> errors;
  for (auto it = pending_.begin(); it != pending_.end();) {
    std::exception_ptr error;
    bool ready = true;
    if (it->event) {
      try {
        ready = it->event->query();
      } catch (...) {
        error = std::current_exception();
      }
    }
    if (!ready) {
      ++it;
      continue;
    }
    done.push_back(std::move(*it));
    errors.push_back(error);
    if (error && !failure_) failure_ = error;
    it = pending_.erase(it);
  }
  if (done.empty()) return false;
  lock.unlock();
  for (size_t i = 0; i < done.size(); ++i) {
    for (auto& m : done[i].members) m.work->completeMember(errors[i]);
  }
  wake_();
  lock.lock();
  for (auto& b : done) {
    if (b.event) freeEvents_.push_back(std::move(b.event));
  }
  return true;
}

void NcclFinalizer::pollAsyncError(std::unique_lock<std::mutex>& lock) {
  ncclResult_t status = ncclSuccess;
  ncclComm_t failed = nullptr;
  {
    std::lock_guard<std::mutex> commLock(commMu_);
    if (commAborted_) return;
    for (ncclComm_t comm : comms_) {
      const ncclResult_t call = api_.nccl->commGetAsyncError(comm, &status);
      if (call != ncclSuccess) status = call;
      failed = comm;
      if (status != ncclSuccess && status != ncclInProgress) break;
    }
  }
  if (status == ncclSuccess || status == ncclInProgress) return;
  const auto now = std::chrono::steady_clock::now();
  if (!asyncError_) {
    asyncError_ = ncclError(api_, status, "NCCL (asynchronous error)", device_, failed);
    asyncErrorAt_ = now;
    HVD_LOG(Warning) << "NCCL reported an asynchronous error on GPU " << device_
                     << "; its pending operations fail unless Horovod finds the cause first";
    return;
  }
  if (now - asyncErrorAt_ < kAsyncErrorGrace) return;
  if (!failure_) failure_ = asyncError_;
  failAll(lock, asyncError_);
}

void NcclFinalizer::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  int idleRounds = 0;
  auto nextErrorPoll = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point drainDeadline{};
  while (true) {
    if (pending_.empty()) {
      if (stopping_) return;
      cv_.wait(lock, [&] { return stopping_ || !pending_.empty(); });
      idleRounds = 0;
      continue;
    }
    if (completeReady(lock)) {
      idleRounds = 0;
      continue;
    }
    const auto now = std::chrono::steady_clock::now();
    if (now >= nextErrorPoll) {
      pollAsyncError(lock);
      nextErrorPoll = now + kErrorPoll;
      if (pending_.empty()) continue;
    }
    if (stopping_) {
      if (drainDeadline == std::chrono::steady_clock::time_point{}) drainDeadline = now + drainTimeout_;
      if (now >= drainDeadline) {
        const std::string message = "The NCCL backend on GPU " + std::to_string(device_) +
                                    " was shut down with device work still running after " +
                                    std::to_string(drainTimeout_.count()) + " ms; aborting its communicator";
        HVD_LOG(Error) << message;
        abortComm();
        failAll(lock, std::make_exception_ptr(Timeout(message)));
        continue;
      }
    }
    lock.unlock();
    if (idleRounds < kYieldRounds) {
      ++idleRounds;
      sched_yield();
    } else {
      const auto sleep = std::min<std::chrono::microseconds>(
          kMaxSleep, std::chrono::microseconds(20) * (idleRounds - kYieldRounds + 1));
      ++idleRounds;
      std::this_thread::sleep_for(sleep);
    }
    lock.lock();
  }
}

}  // namespace hvd::cuda
