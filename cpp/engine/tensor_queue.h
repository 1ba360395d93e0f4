// TensorQueue: the hand-off from enqueueing threads to the engine's thread, and the record of
// which names are pending (enqueued and not yet completed) on this rank, for the duplicate check.
//
// push() is called by any thread; drain() and release() by the thread running the engine (the
// background thread or a driving caller, see runtime.h). close() (at
// shutdown or on a fatal error) makes later pushes throw the closing error and returns what was
// still queued so the runtime can fail it.
#pragma once

#include <atomic>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/spin_lock.h"
#include "engine/message.h"
#include "engine/response_cache.h"
#include "engine/work.h"
#include "horovod/operation.h"

namespace hvd::engine {

struct Entry;
using EntryPtr = std::unique_ptr<Entry>;

// A (process set, name) enqueued on this rank, interned: every enqueue of the name finds the same
// slot, so after the one hash lookup at enqueue (the duplicate-name check) the engine's thread
// reaches the name's state through the entry without hashing the name again. A slot lives while
// its name is pending, and after that while the name has a cache id (a training step's names
// come back every step); the runtime asks for it to be dropped otherwise.
struct NameSlot {
  NameKey key;
  bool pending = false;  // guarded by the queue's lock
  bool fresh = false;    // guarded by the queue's lock: interned by the push in progress
  // Engine thread only:
  uint32_t cacheId = kNoCacheId;  // the name's id in the cache replica when last seen (a hint)
  EntryPtr entry;                 // the pending entry, once drained (the runtime owns it here)
};

// One tensor's operation on this rank: its request plus the caller's buffers and handle.
struct Entry {
  Request request;
  void* input = nullptr;   // allreduce/allgather/alltoall/reducescatter input; broadcast: the tensor
  void* output = nullptr;  // allreduce/reducescatter output (may equal input)
  void* stream = nullptr;  // accelerators: the stream to order against (Device::stream)
  std::shared_ptr<WorkImpl> work;
  int member = 0;     // index in the work's group
  uint32_t sentCacheId = kNoCacheId;  // engine thread: sent to the coordinator as this hit
  NameSlot* slot = nullptr;           // set by push()
};

class TensorQueue {
 public:
  // Adds the entries atomically (a group becomes visible to the engine's thread at once).
  // Throws InvalidArgument with Horovod's duplicate-name message if any name is pending in its
  // process set (nothing is added then), or the closing error after close().
  void push(std::vector<EntryPtr>& entries);
  void push(EntryPtr& entry);
  // Moves every queued entry to `out` (appending), in enqueue order.
  void drain(std::vector<EntryPtr>& out);
  bool empty() const;
  // `entry` completed (its work already taken out): its name may be enqueued again, and the
  // entry is kept for reuse. The name's slot is dropped unless `keepSlot`.
  void release(EntryPtr entry, bool keepSlot);
  // The slot of a name, or nullptr. Engine thread only (slots are dropped only by it).
  NameSlot* find(int32_t processSet, std::string_view name);
  // Drops the slot of a name that is not pending (its cache id went away).
  void forget(int32_t processSet, std::string_view name);
  // Every slot whose entry the engine's thread holds (after close(): to fail them).
  std::vector<NameSlot*> slotsWithEntries();
  // A cleared entry, reusing one released earlier when there is one (its name and shape keep
  // their allocations), so the steady state allocates no entries. Any thread.
  EntryPtr acquire();
  // Entries pushed so far (monotonic). Lock-free: the engine's thread polls it while it
  // gathers a burst of enqueues into one message.
  uint64_t pushes() const { return pushes_.load(std::memory_order_acquire); }
  // Rejects later pushes with `error`; returns the entries still queued.
  std::vector<EntryPtr> close(std::exception_ptr error);
  bool closed() const;
  // Throws the closing error if closed.
  void throwIfClosed() const;

 private:
  NameSlot* intern(const Request& r);  // under mu_

  mutable SpinLock mu_;  // short sections, hit by two threads per operation (see spin_lock.h)
  std::vector<EntryPtr> queue_;
  // Keys view each slot's own name.
  std::unordered_map<NameKeyRef, std::unique_ptr<NameSlot>, NameKeyHash, NameKeyEq> slots_;
  std::optional<ErrorInfo> closedWith_;  // as data: each thrower raises its own object (engine/work.h)
  std::vector<EntryPtr> free_;  // released entries for acquire(), bounded
  std::atomic<uint64_t> pushes_{0};
};

}  // namespace hvd::engine
