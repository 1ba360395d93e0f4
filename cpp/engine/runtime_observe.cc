// Runtime: its observers (observer.h). The event sites themselves sit in the engine's code,
// each behind one ObserverHub::wants() branch; what they publish is built here, and only then.
#include <algorithm>

#include "engine/runtime.h"

namespace hvd::engine {
namespace {

int64_t inputBytes(const Request& r) {
  if (r.params.kind == Kind::kJoin || r.params.kind == Kind::kAddProcessSet || r.params.kind == Kind::kRemoveProcessSet)
    return 0;
  int64_t elements = 1;
  for (int64_t d : r.shape) elements *= d;
  return elements * static_cast<int64_t>(dataTypeSize(r.params.dtype));
}

}  // namespace

void Runtime::addObserver(std::shared_ptr<EngineObserver> observer) {
  const bool ticks = observer && observer->stallTickInterval().count() > 0;
  observers_.add(std::move(observer));
  if (!ticks) return;
  // The engine's thread may be asleep for up to its idle wait: wake it so that the first tick
  // keeps to the interval. Skipped while init or shutdown hold the lifecycle (nothing to wake,
  // or the loop is ending); the next wake-up then starts the ticks.
  std::unique_lock<std::mutex> lock(lifecycleMu_, std::try_to_lock);
  if (lock.owns_lock() && transport_ && initialized_.load()) transport_->wake();
}

bool Runtime::removeObserver(const std::shared_ptr<EngineObserver>& observer) { return observers_.remove(observer); }

void Runtime::publishEntry(EngineEventKind kind, const Entry& entry, uint32_t cacheId, bool failed) {
  const Request& r = entry.request;
  EngineEvent e;
  e.kind = kind;
  e.processSet = r.params.processSet;
  e.op = r.params.kind;
  e.tensors = TensorNames::one(r.name);
  e.bytes = inputBytes(r);
  e.cacheId = cacheId;
  e.failed = failed;
  observers_.publish(e);
}

void Runtime::publishSetChange(EngineEventKind kind, int32_t setId, const std::vector<int>& ranks) {
  EngineEvent e;
  e.kind = kind;
  e.processSet = setId;
  e.op = kind == EngineEventKind::kProcessSetAdded ? Kind::kAddProcessSet : Kind::kRemoveProcessSet;
  e.ranks = ranks;
  observers_.publish(e);
}

void Runtime::maybeStallTick() {
  const int64_t now = ObserverHub::nowNs();
  if (now < nextStallTickNs_) return;
  const int64_t interval = std::chrono::nanoseconds(observers_.tickInterval()).count();
  nextStallTickNs_ = now + std::max<int64_t>(interval, 1);
  std::vector<PendingTensor> pending;
  if (coordinator_) {
    coordinator_->pendingTensors(pending);
  } else {
    // Only this rank's side is known here: its operations waiting for the coordinator.
    for (NameSlot* slot : queue_.slotsWithEntries()) {
      PendingTensor t;
      t.processSet = slot->key.processSet;
      t.name = slot->key.name;
      t.op = slot->entry->request.params.kind;
      t.cached = slot->entry->sentCacheId != kNoCacheId;
      t.submitted = {topology_.rank};
      pending.push_back(std::move(t));
    }
  }
  std::sort(pending.begin(), pending.end(), [](const PendingTensor& a, const PendingTensor& b) {
    return a.processSet != b.processSet ? a.processSet < b.processSet : a.name < b.name;
  });
  EngineEvent e;
  e.kind = EngineEventKind::kStallTick;
  e.timeNs = now;
  e.pending = pending;
  observers_.publish(e);
}

}  // namespace hvd::engine
