// NcclFinalizer: the NCCL backend's completion thread (deferred completion, engine/backend.h).
// The engine's thread enqueues a response's device work, records a completion event after it and
// submits the event with the works it took; this thread completes those works once their event is
// done (without a host sync on any framework thread), with the event's error if the work failed.
// While it waits it also polls the communicator for asynchronous NCCL errors
// (ncclCommGetAsyncError). A peer gone mid-collective is usually named by the Runtime first (its
// liveness watch), which then calls abort() with that error; if no abort() comes within a grace of
// a few seconds, every pending work fails with NCCL's error (PeerLost for a remote/system error:
// HorovodInternalError in Python), and the backend's next run() rethrows it so that the Runtime
// fails too. Either way nothing waits forever.
//
// abort(error) (engine thread; the Runtime failed) aborts the communicator (ncclCommAbort: kernels
// waiting for a lost peer return) and fails every pending work with `error` at once.
//
// Threads: submit(), takeEvent(), abort(), failure() from the engine's thread; the rest is the
// finalizer's own.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "backends/cuda/device_util.h"
#include "engine/work.h"

namespace hvd::cuda {

// A work member whose completion the backend took over.
struct DeferredMember {
  std::shared_ptr<engine::WorkImpl> work;
  int member = 0;
};

// One response's device work: done when `event` is.
struct PendingBatch {
  std::unique_ptr<Event> event;  // recorded after the work; null: nothing to wait for
  std::vector<DeferredMember> members;
  std::vector<std::shared_ptr<void>> keepAlive;  // scratch the device still reads or writes
};

class NcclFinalizer {
 public:
  // `comms` (the backend's communicators: the set's, and the hierarchy's when it has one) stay
  // valid until abort() or the destructor. `wake`: the engine's wake-up for waiting
  // callers (BackendContext::wakeEngine).
  NcclFinalizer(const CudaApi& api, int device, std::vector<ncclComm_t> comms, std::function<void()> wake);
  // stop(), then frees the scratch of failed batches (the backend has synchronized its streams).
  ~NcclFinalizer();
  // Waits up to the drain timeout (the job's timeout) for the pending work, then aborts the
  // communicator and fails what is left with a Timeout; ends the thread. Does not destroy the
  // communicator. Idempotent.
  void stop();
  void setDrainTimeout(std::chrono::milliseconds timeout) { drainTimeout_ = timeout; }

  // Adds communicators built later (they stay valid as `comms` do; aborted with them).
  void addComms(const std::vector<ncclComm_t>& comms);

  // An event for the next batch (reused from completed batches).
  std::unique_ptr<Event> takeEvent();
  void submit(PendingBatch batch);
  // The first asynchronous error found (null if none): run() rethrows it.
  std::exception_ptr failure() const;
  // Aborts the communicators and fails every pending work with `error`. Idempotent.
  void abort(std::exception_ptr error);
  // Whether abort() (or the destructor's timeout) aborted the communicators: they must not be
  // used or destroyed then.
  bool commAborted() const;

 private:
  void loop();
  // Completes the batches whose events are done; returns whether any were.
  bool completeReady(std::unique_lock<std::mutex>& lock);
  void failAll(std::unique_lock<std::mutex>& lock, std::exception_ptr error);
  void pollAsyncError(std::unique_lock<std::mutex>& lock);
  void abortComm();

  const CudaApi& api_;
  const int device_;
  std::function<void()> wake_;
  std::chrono::milliseconds drainTimeout_{30000};

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<PendingBatch> pending_;
  std::vector<std::unique_ptr<Event>> freeEvents_;
  std::exception_ptr failure_;
  std::exception_ptr asyncError_;  // NCCL's, waiting kAsyncErrorGrace for abort() (nccl_finalizer.cc)
  std::chrono::steady_clock::time_point asyncErrorAt_;
  bool stopping_ = false;
  std::vector<std::shared_ptr<void>> graveyard_;  // scratch of failed batches

  std::mutex commMu_;  // held while this thread or abort() calls into the communicators
  std::vector<ncclComm_t> comms_;
  bool commAborted_ = false;  // written with mu_ and commMu_ held

  std::thread thread_;
};

}  // namespace hvd::cuda
