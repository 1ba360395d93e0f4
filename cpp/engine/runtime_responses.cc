// Runtime: executing the coordinator's response lists, in the order it emitted them: cached
// responses expanded, process-set changes and errors applied, data responses run by their
// collective backend (backend.h), and the entries completed.
#include "engine/runtime.h"
#include "horovod/errors.h"

namespace hvd::engine {
namespace {

// Transport and collective failures end the runtime; other errors fail one response.
bool isFatal(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const PeerLost&) {
    return true;
  } catch (const Timeout&) {
    return true;
  } catch (const Aborted&) {
    return true;
  } catch (const StoreError&) {
    return true;
  } catch (...) {
    return false;
  }
}

}  // namespace

bool Runtime::processList(ResponseList& list) {
  // Every rank must execute every list, in order: a gap would desynchronize the data plane.
  if (list.seq != lastSeq_ + 1) {
    throw Error("Horovod control plane out of sync on rank " + std::to_string(topology_.rank) +
                ": expected response list " + std::to_string(lastSeq_ + 1) + ", got " + std::to_string(list.seq));
  }
  probe(stats_.lastListStartNs);
  bump(stats_.responseLists);
  if (observers_.wants(EngineEventKind::kCycleStart)) [[unlikely]] {
    EngineEvent e;
    e.kind = EngineEventKind::kCycleStart;
    observers_.publish(e);
  }
  if (list.knobs.has_value()) [[unlikely]]
    applyKnobs(*list.knobs);
  // Cache hits first (the coordinator put them first), derived locally: the same responses on
  // every rank. Evictions come last in `items`, so every hit id is still in the replica here.
  if (!list.hits.empty()) {
    // Hits bring no cache inserts, and evictions come after them: the replica entries these
    // responses point into stay put while they run (processing does not modify them).
    for (Response& response : responsesForHits(list.hits)) processResponse(response);
  }
  for (auto& response : list.items) processResponse(response);
  lastSeq_ = list.seq;
  if (list.shutdown) shutdownBy_ = list.shutdownBy;
  return list.shutdown;
}

std::vector<Response>& Runtime::responsesForHits(const std::vector<uint32_t>& hits) {
  constexpr size_t kMaxDerived = 16;  // distinct hit sets per step (bursts, interleaved ops)
  if (replica_.version() != derivedHitsVersion_) {
    derivedHits_.clear();
    derivedHitsVersion_ = replica_.version();
  }
  for (size_t i = 0; i < derivedHits_.size(); ++i) {
    if (derivedHits_[i].hits == hits) {
      std::rotate(derivedHits_.begin(), derivedHits_.begin() + static_cast<ptrdiff_t>(i),
                  derivedHits_.begin() + static_cast<ptrdiff_t>(i) + 1);
      return derivedHits_.front().responses;
    }
  }
  if (derivedHits_.size() >= kMaxDerived) derivedHits_.pop_back();
  DerivedHits derived;
  derived.hits = hits;
  cachedResponses(hits, replica_, fusion_, derived.responses);
  derivedHits_.insert(derivedHits_.begin(), std::move(derived));
  return derivedHits_.front().responses;
}

void Runtime::expandCached(Response& r) {
  // Cached tensors point into this rank's cache replica (no copies). Responses derived from a
  // list's hits are bound already; ids that arrived in cached form on the wire get bound here.
  for (size_t i = 0; i < r.tensors.size(); ++i) {
    TensorInfo& t = r.tensors[i];
    if (!r.cachedForm || t.ref != nullptr) continue;
    const CacheEntry* entry = replica_.get(t.cacheId);
    if (entry == nullptr) throw Error("Response cache out of sync: unknown cache id " + std::to_string(t.cacheId));
    if (r.cachedForm && i == 0) {
      r.params = entry->params;
    }
    t.ref = &entry->tensor;
  }
}

Entry* Runtime::findEntry(const Response& response, const TensorInfo& tensor) {
  if (tensor.cacheId != kNoCacheId) {
    Entry** slot = byCacheId_.find(tensor.cacheId);
    if (slot != nullptr && *slot != nullptr) return *slot;
  }
  return pendingEntry(response.params.processSet, tensor.data().name);
}

Entry* Runtime::pendingEntry(int32_t processSet, std::string_view name) {
  NameSlot* slot = queue_.find(processSet, name);
  return slot == nullptr ? nullptr : slot->entry.get();
}

void Runtime::completeEntry(Entry* entry, std::exception_ptr error, bool completeWork) {
  if (entry == nullptr) return;
  if (entry->sentCacheId != kNoCacheId) {
    // The node stays (the id comes back next step: no allocation then) unless the id is gone.
    Entry** slot = byCacheId_.find(entry->sentCacheId);
    if (slot != nullptr && *slot == entry) {
      if (replica_.get(entry->sentCacheId) != nullptr) {
        *slot = nullptr;
      } else {
        byCacheId_.erase(entry->sentCacheId);
      }
    }
  }
  NameSlot* slot = entry->slot;
  if (slot == nullptr || slot->entry.get() != entry) return;
  // Before the release: the entry is recycled then (and its waiter may return).
  if (observers_.wants(EngineEventKind::kTensorDone)) [[unlikely]] {
    publishEntry(EngineEventKind::kTensorDone, *entry, kNoCacheId, error != nullptr);
  }
  EntryPtr owned = std::move(slot->entry);
  std::shared_ptr<WorkImpl> work = std::move(owned->work);
  // The name is free again before the caller can observe completion; the entry is reused. The
  // slot stays while the name has a cache id: it comes back next step.
  const bool keepSlot = slot->cacheId != kNoCacheId && replica_.get(slot->cacheId) != nullptr;
  queue_.release(std::move(owned), keepSlot);
  if (completeWork) work->completeMember(error);
}

void Runtime::processResponse(Response& r) {
  switch (r.params.kind) {
    case Kind::kEvict:
      for (const auto& t : r.tensors) {
        if (const CacheEntry* gone = replica_.get(t.cacheId)) queue_.forget(gone->params.processSet, gone->tensor.name);
        replica_.erase(t.cacheId);
        Entry** slot = byCacheId_.find(t.cacheId);
        if (slot != nullptr && *slot == nullptr) byCacheId_.erase(t.cacheId);
      }
      return;
    case Kind::kJoin: {
      if (Entry* e = pendingEntry(0, "join.noname")) {
        e->work->setJoinResult(r.lastJoined);
        completeEntry(e, nullptr);
      }
      return;
    }
    case Kind::kAddProcessSet: addSetFromResponse(r); return;
    case Kind::kRemoveProcessSet: removeSetFromResponse(r); return;
    case Kind::kError:
      for (const auto& t : r.tensors) {
        completeEntry(findEntry(r, t), std::make_exception_ptr(MismatchError(r.error)));
      }
      return;
    default: runData(r);
  }
}

void Runtime::runData(Response& r) {
  expandCached(r);
  for (const auto& t : r.tensors) {
    if (t.cacheInsert) replica_.insert(t.cacheId, CacheEntry::fromResponse(r, t));
  }
  ProcessSet* set = sets_.get(r.params.processSet);
  if (set == nullptr || set->myIndex < 0) return;  // not ours: only the cache bookkeeping above

  entriesScratch_.clear();
  for (const auto& t : r.tensors) {
    Entry* e = findEntry(r, t);
    // Remember the name's cache id: its next enqueue finds it without a name lookup (an entry
    // sent as that id found it that way already).
    if (e != nullptr && t.cacheId != kNoCacheId && e->sentCacheId != t.cacheId) e->slot->cacheId = t.cacheId;
    entriesScratch_.push_back(e);
  }
  bump(stats_.responses);
  bump(stats_.tensors, r.tensors.size());
  if (r.cachedForm) bump(stats_.cachedTensors, r.tensors.size());
  stats_.fusionBufferBytes.store(host_.fusion.capacity(), std::memory_order_relaxed);
  probe(stats_.lastDataStartNs);
  std::exception_ptr error;
  CollectiveBackend* backend = nullptr;
  try {
    // The response names the first requester's device; an accelerator's ordinal is this rank's
    // own (its entries'; a rank without an entry, which joined, uses the response's).
    int32_t device = r.params.device;
    if (device != kCpuDevice) [[unlikely]] {
      for (Entry* e : entriesScratch_) {
        if (e != nullptr) {
          device = e->request.params.device;
          break;
        }
      }
    }
    backend = &backends_.forResponse(r, *set, device);
    if (backend->defersCompletion()) [[unlikely]] {
      for (Entry* e : entriesScratch_) {
        if (e != nullptr && e->work->hold()) heldWorks_.push_back(e->work);
      }
    }
    backend->run(r, *set, entriesScratch_);
  } catch (...) {
    error = std::current_exception();
    // Transport and collective failures end the runtime; anything else fails this response only
    // (it is deterministic, so every rank fails it alike).
    if (isFatal(error)) {
      // The entries stay queued: the loop's failAll() fails their works (after abort()).
      heldWorks_.clear();
      throw;
    }
  }
  // Copy: completing an entry may free it.
  std::vector<Entry*> done = entriesScratch_;
  // A backend with deferred completion took the works of a response it ran (backend.h): only
  // retire the entries.
  const bool completeWorks = error != nullptr || !backend->defersCompletion();
  for (Entry* e : done) completeEntry(e, error, completeWorks);
  // Retired: the backend's completions may finish the works now (or did, and this is the last).
  for (auto& work : heldWorks_) work->completeMember(nullptr);
  heldWorks_.clear();
}

RuntimeStats Runtime::stats() const {
  constexpr auto relaxed = std::memory_order_relaxed;
  RuntimeStats s;
  s.controlMessagesSent = stats_.controlMessagesSent.load(relaxed);
  s.controlBytesSent = stats_.controlBytesSent.load(relaxed);
  s.responseLists = stats_.responseLists.load(relaxed);
  s.responses = stats_.responses.load(relaxed);
  s.tensors = stats_.tensors.load(relaxed);
  s.cachedTensors = stats_.cachedTensors.load(relaxed);
  s.hitsSent = stats_.hitsSent.load(relaxed);
  s.fullRequestsSent = stats_.fullRequestsSent.load(relaxed);
  s.parks = stats_.parks.load(relaxed);
  s.callerDrives = stats_.callerDrives.load(relaxed);
  s.fusionBufferBytes = stats_.fusionBufferBytes.load(relaxed);
  s.outputBlocksMapped = host_.outputs->blocksMapped();
  s.lastRequestsSentNs = stats_.lastRequestsSentNs.load(relaxed);
  s.lastListBuiltNs = stats_.lastListBuiltNs.load(relaxed);
  s.lastListStartNs = stats_.lastListStartNs.load(relaxed);
  s.lastDataStartNs = stats_.lastDataStartNs.load(relaxed);
  return s;
}

}  // namespace hvd::engine
