// TensorQueue: the hand-off from enqueueing threads to the background thread, and the record of
// which names are pending (enqueued and not yet completed) on this rank, for the duplicate check.
//
// push() is called by any thread; drain() and release() by the background thread. close() (at
// shutdown or on a fatal error) makes later pushes throw the closing error and returns what was
// still queued so the runtime can fail it.
#pragma once

#include <atomic>
#include <exception>
#include <memory>
#include <mutex>
#include <unordered_set>
#include <vector>

#include "common/spin_lock.h"
#include "engine/message.h"
#include "engine/response_cache.h"
#include "engine/work.h"
#include "horovod/horovod.h"

namespace hvd::engine {

// One tensor's operation on this rank: its request plus the caller's buffers and handle.
struct Entry {
  Request request;
  void* input = nullptr;   // allreduce/allgather/alltoall/reducescatter input; broadcast: the tensor
  void* output = nullptr;  // allreduce/reducescatter output (may equal input)
  std::shared_ptr<WorkImpl> work;
  int member = 0;     // index in the work's group
  uint32_t sentCacheId = kNoCacheId;  // background thread: sent to the coordinator as this hit
};
using EntryPtr = std::unique_ptr<Entry>;

class TensorQueue {
 public:
  // Adds the entries atomically (a group becomes visible to the background thread at once).
  // Throws InvalidArgument with Horovod's duplicate-name message if any name is pending in its
  // process set (nothing is added then), or the closing error after close().
  void push(std::vector<EntryPtr>& entries);
  void push(EntryPtr& entry);
  // Moves every queued entry to `out` (appending), in enqueue order.
  void drain(std::vector<EntryPtr>& out);
  bool empty() const;
  // The name completed: it may be enqueued again.
  void release(int32_t processSet, const std::string& name);
  // The same, and `entry` (the completed one, its work already taken out) is kept for reuse.
  void release(EntryPtr entry);
  // A cleared entry, reusing one released earlier when there is one (its name and shape keep
  // their allocations), so the steady state allocates no entries. Any thread.
  EntryPtr acquire();
  // Entries pushed so far (monotonic). Lock-free: the background thread polls it while it
  // gathers a burst of enqueues into one message.
  uint64_t pushes() const { return pushes_.load(std::memory_order_acquire); }
  // Rejects later pushes with `error`; returns the entries still queued.
  std::vector<EntryPtr> close(std::exception_ptr error);
  bool closed() const;
  // Throws the closing error if closed.
  void throwIfClosed() const;

 private:
  mutable SpinLock mu_;  // short sections, hit by two threads per operation (see spin_lock.h)
  std::vector<EntryPtr> queue_;
  // Views of the pending entries' own names: an entry is released here before it is destroyed.
  std::unordered_set<NameKeyRef, NameKeyHash, NameKeyEq> pending_;
  std::exception_ptr closedWith_;
  std::vector<EntryPtr> free_;  // released entries for acquire(), bounded
  std::atomic<uint64_t> pushes_{0};
};

}  // namespace hvd::engine
