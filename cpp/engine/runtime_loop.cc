// Runtime: the background thread. Negotiation messages go through the transport's mailbox;
// collectives through the collective backends (backend.h). Every wait is bounded.
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <sstream>
#include <thread>

#include "common/cpu_relax.h"
#include "common/logging.h"
#include "engine/runtime.h"
#include "horovod/errors.h"
#include "transport/poll_patience.h"

namespace hvd::engine {
namespace {

// The loop wakes at least this often even when idle, only to notice a stop request that raced
// with its wait; the real wake-ups are messages and enqueue's transport.wake().
constexpr auto kIdleWait = std::chrono::milliseconds(1000);

// Burst gathering (gatherBurst): requests go out once no enqueue came for
// HOROVOD_BURST_QUIET_US (a step's gradients arrive back to back), or after kBurstMax of
// continuous enqueues.
constexpr auto kBurstMax = std::chrono::microseconds(200);

int64_t nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

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

void Runtime::pinThread() {
  if (config_.threadAffinity.empty()) return;
  std::vector<int> cores;
  std::stringstream in(config_.threadAffinity);
  std::string item;
  bool bad = false;
  while (std::getline(in, item, ',')) {
    try {
      size_t used = 0;
      int core = std::stoi(item, &used);
      if (used != item.size() || core < 0) bad = true;
      else cores.push_back(core);
    } catch (const std::exception&) {
      bad = true;
    }
  }
  if (bad) {
    HVD_LOG(Error) << "HOROVOD_THREAD_AFFINITY='" << config_.threadAffinity
                   << "' contains negative or non-numeric core ids; not pinning the background thread.";
    return;
  }
  if (static_cast<int>(cores.size()) < topology_.localSize) {
    HVD_LOG(Error) << "Expected " << topology_.localSize << " core ids but got " << cores.size() << ".";
    return;
  }
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cores[topology_.localRank], &set);
  if (pthread_setaffinity_np(pthread_self(), sizeof(set), &set) != 0) {
    HVD_LOG(Error) << "Could not pin the background thread to core " << cores[topology_.localRank];
  }
}

void Runtime::loop() {
  pinThread();
  ErrorInfo reason;
  reason.kind = ErrorKind::kAborted;
  reason.message = kShutdownMessage;
  std::unique_lock<std::mutex> token(gate_->token());
  try {
    bool takeOver = false;     // the last park passed without a caller driving: the work is ours
    bool callersDrive = false;  // a caller drove during the last park
    while (true) {
      // A caller that drove the engine into its end left that to this thread.
      if (callerFailure_) std::rethrow_exception(callerFailure_);
      if (callerStopped_) break;
      if (!takeOver) {
        // While callers drive, only look: waiting here would hold the token that the next
        // operation's caller needs, and every operation would pay a hand-off between threads.
        const bool ready = awaitWork(callersDrive ? Deadline::after(std::chrono::milliseconds(0)) : idleDeadline());
        if (leaveToCallers() || (callersDrive && !ready && !gate_->hasBlockedWaiters())) {
          // A caller ran the engine meanwhile: callers are active, stay out of their way (new
          // fresh work stays theirs). Nobody did: take the work over now.
          callersDrive = parkForCallers(token);
          takeOver = !callersDrive;
          continue;
        }
      }
      takeOver = false;
      if (step()) break;
    }
  } catch (...) {
    std::exception_ptr error = std::current_exception();
    if (silentPeer_.load()) {
      // The transport may have been aborted for it: name the silent rank, not the abort.
      std::lock_guard<std::mutex> lock(silentMu_);
      error = std::make_exception_ptr(PeerLost(silentRank_, silentMessage_));
    } else {
      error = preferRelayedCause(error);
    }
    reason = ErrorInfo::fromException(error);
    loopFailed_ = true;
    if (reason.kind == ErrorKind::kPeerLost && reason.rank >= 0 && reason.rank != topology_.rank) {
      lostPeer_ = reason.rank;
    }
    bool fromPeer = reason.message.rfind("[from rank ", 0) == 0;
    onFatal(error, !fromPeer);
  }
  const int by = shutdownBy_.load();
  if (by >= 0 && by != topology_.rank && reason.kind == ErrorKind::kAborted && reason.message == kShutdownMessage) {
    // Name the rank that left first: usually the one that finished its loop early.
    reason.message += " Rank " + std::to_string(by) + " shut down first (rank " + std::to_string(by) +
                      " called hvd.shutdown() or exited).";
  }
  gate_->close();
  failAll(reason);
  token.unlock();
  {
    std::lock_guard<std::mutex> lock(exitMu_);
    loopExited_ = true;
  }
  exitCv_.notify_all();
}

bool Runtime::awaitWork(Deadline deadline) {
  idle_.store(true, std::memory_order_relaxed);
  // Pairs with the fence in wakeEngine(): either it sees idle_ and wakes the transport, or we see
  // its entries here.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  bool busy = !queue_.empty() || !outgoing_.empty() || (coordinator_ && coordinator_->hasWork()) ||
              (shutdownRequested_.load() && !shutdownSent_);
  if (!busy) busy = transport_->waitForMessage(deadline);
  idle_.store(false, std::memory_order_relaxed);
  return busy;
}

bool Runtime::leaveToCallers() const {
  // Only fresh local work: the enqueueing thread is likely to wait for it soon and can then run
  // the whole step itself. Messages, coordinator work, shutdown and threads already blocked on
  // earlier operations (nobody would run the engine for them) are not left waiting.
  return callerProgressUs_.load(std::memory_order_relaxed) > 0 && (!queue_.empty() || !outgoing_.empty()) &&
         !(coordinator_ && coordinator_->hasWork()) && !shutdownRequested_.load() &&
         !gate_->hasBlockedWaiters();
}

bool Runtime::parkForCallers(std::unique_lock<std::mutex>& token) {
  {
    std::lock_guard<std::mutex> lock(statsMu_);
    stats_.parks++;
  }
  const uint64_t drivesBefore = drives_;
  const auto window = std::chrono::microseconds(callerProgressUs_.load(std::memory_order_relaxed));
  auto wait = std::max(parkWait_, window);  // nextPark never goes below the window
  token.unlock();
  // A token still held when the park ends belongs to a driving caller (or, briefly, to an
  // enqueue): park again, longer, rather than queue up behind it. An unpark (a caller handing
  // over the engine's end, a waiter that blocks, shutdown) takes the token whatever it costs.
  bool unparked = gate_->park(wait);
  while (!unparked && !token.try_lock()) {
    wait = DriveGate::nextPark(wait, window, true);
    unparked = gate_->park(wait);
  }
  if (!token.owns_lock()) token.lock();
  const bool drove = drives_ != drivesBefore;
  parkWait_ = DriveGate::nextPark(wait, window, drove && !unparked);
  return drove;
}

bool Runtime::drive(const WorkImpl& work, Deadline deadline) {
  if (callerStopped_ || callerFailure_) return false;
  // This thread only waits for its peers now: it polls longer before it sleeps (poll_patience.h).
  PollPatience::Scope patience(std::chrono::microseconds(callerSpinUs_.load(std::memory_order_relaxed)));
  ++drives_;
  {
    std::lock_guard<std::mutex> lock(statsMu_);
    stats_.callerDrives++;
  }
  callerDriving_ = true;
  try {
    while (!work.isCompleted()) {
      awaitWork(deadline.earliest(idleDeadline()));
      if (step()) {
        callerStopped_ = true;
        break;
      }
      if (deadline.expired()) break;
    }
  } catch (...) {
    callerFailure_ = std::current_exception();
  }
  callerDriving_ = false;
  if (callerStopped_ || callerFailure_) {
    gate_->unpark();
    return false;
  }
  return true;
}

Deadline Runtime::idleDeadline() const {
  std::chrono::milliseconds wait = kIdleWait;
  if (stall_) [[unlikely]] wait = std::min(wait, stall_->scanInterval());
  if (observers_.wants(EngineEventKind::kStallTick)) [[unlikely]] {
    wait = std::min<std::chrono::milliseconds>(wait, observers_.tickInterval());
  }
  return Deadline::after(wait);
}

void Runtime::maybeScanStalls() {
  const int64_t now = nowNs();
  if (now < nextStallScanNs_) return;
  nextStallScanNs_ = now + std::chrono::nanoseconds(stall_->scanInterval()).count();
  std::vector<PendingTensor> pending;
  coordinator_->pendingTensors(pending);
  if (pending.empty()) {
    stall_->scan(pending, now);  // forgets what was pending
    return;
  }
  std::sort(pending.begin(), pending.end(), [](const PendingTensor& a, const PendingTensor& b) {
    return a.processSet != b.processSet ? a.processSet < b.processSet : a.name < b.name;
  });
  StallInspector::Verdict verdict = stall_->scan(pending, now);
  if (!verdict.warning.empty()) {
    HVD_LOG(Warning) << verdict.warning;
  }
  for (size_t i = 0; i < verdict.diverged.size(); ++i) {
    if (i == 0) {
      HVD_LOG(Error) << verdict.divergence[i];
    }
    coordinator_->failPending(verdict.diverged[i].processSet, verdict.diverged[i].name, verdict.divergence[i]);
  }
  if (!verdict.shutdown.empty()) throw Aborted(verdict.shutdown);
}

bool Runtime::step() {
  if (silentPeer_.load(std::memory_order_relaxed)) [[unlikely]] {
    std::lock_guard<std::mutex> lock(silentMu_);
    throw PeerLost(silentRank_, silentMessage_);
  }
  if (stall_) [[unlikely]] maybeScanStalls();
  if (observers_.wants(EngineEventKind::kStallTick)) [[unlikely]] maybeStallTick();
  RequestList& mine = outgoing_;  // may hold requests collected at enqueue already
  const uint64_t pushesSeen = queue_.pushes();  // before draining: later pushes show as a change
  collectRequests(mine);
  // A waiting caller that drives has enqueued its burst already (and collected it, see enqueue).
  if (!callerDriving_) gatherBurst(mine, pushesSeen);
  if (coordinator_) {
    // Rank 0: its own requests first, then the others' in rank order (Horovod's ready order).
    if (!mine.empty()) {
      std::lock_guard<std::mutex> lock(statsMu_);
      stats_.lastRequestsSentNs = nowNs();
    }
    mine.lastSeq = lastSeq_;
    coordinator_->ingest(0, mine);
    mine.clear();
    std::vector<std::pair<int, RequestList>> others;
    while (auto message = transport_->poll()) {
      switch (messageType(message->bytes)) {
        case MessageType::kRequests:
          others.emplace_back(message->from, decodeRequestList(message->bytes));
          break;
        case MessageType::kAbort: {
          ErrorInfo info = decodeErrorInfo(message->bytes);
          std::rethrow_exception(info.toException());
        }
        default:
          HVD_LOG(Error) << "Coordinator: unexpected control message from rank " << message->from;
      }
    }
    std::stable_sort(others.begin(), others.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (auto& [from, list] : others) coordinator_->ingest(from, list);
    if (hasTuner_.load(std::memory_order_relaxed)) [[unlikely]] pollTuner();
    ResponseList list = coordinator_->build();
    if (list.items.empty() && list.hits.empty() && !list.shutdown && !list.knobs) return false;
    encode(list, sendBuffer_);
    for (int r = 1; r < topology_.size; ++r) transport_->post(r, sendBuffer_.data(), sendBuffer_.size());
    {
      std::lock_guard<std::mutex> lock(statsMu_);
      stats_.lastListBuiltNs = nowNs();
      stats_.controlMessagesSent += static_cast<uint64_t>(topology_.size - 1);
      stats_.controlBytesSent += sendBuffer_.size() * static_cast<uint64_t>(topology_.size - 1);
    }
    return processList(list);
  }

  postRequests(mine);
  while (auto message = transport_->poll()) {
    switch (messageType(message->bytes)) {
      case MessageType::kResponses: {
        ResponseList list = decodeResponseList(message->bytes);
        if (processList(list)) return true;
        // Requests enqueued while that list ran go out now rather than after the next wait.
        const uint64_t seen = queue_.pushes();
        collectRequests(mine);
        if (!callerDriving_) gatherBurst(mine, seen);
        postRequests(mine);
        break;
      }
      case MessageType::kAbort: {
        ErrorInfo info = decodeErrorInfo(message->bytes);
        std::rethrow_exception(info.toException());
      }
      default:
        HVD_LOG(Error) << "Worker: unexpected control message from rank " << message->from;
    }
  }
  return false;
}

void Runtime::collectRequests(RequestList& out) {
  queue_.drain(drained_);
  uint64_t hits = 0, full = 0;
  for (auto& e : drained_) {
    Request& r = e->request;
    NameSlot* slot = e->slot;
    if (r.params.kind == Kind::kAllreduce || r.params.kind == Kind::kAllgather || r.params.kind == Kind::kAlltoall) {
      ProcessSet* set = sets_.get(r.params.processSet);
      uint32_t id = kNoCacheId;
      if (set != nullptr) {
        // The name's last cache id first (no name lookup), then the replica's index by name.
        const CacheEntry* hinted = slot->cacheId != kNoCacheId ? replica_.get(slot->cacheId) : nullptr;
        if (hinted != nullptr && hinted->matches(r, set->myIndex)) {
          id = slot->cacheId;
        } else {
          id = replica_.lookup(r, set->myIndex);
          if (id != kNoCacheId) slot->cacheId = id;
        }
      }
      if (id != kNoCacheId) {
        out.hits.push_back(id);
        e->sentCacheId = id;
        byCacheId_[id] = e.get();
        ++hits;
        if (observers_.wants(EngineEventKind::kCacheHit)) [[unlikely]] publishEntry(EngineEventKind::kCacheHit, *e, id);
      } else {
        out.requests.push_back(r);
        ++full;
      }
    } else {
      out.requests.push_back(r);
      ++full;
    }
    slot->entry = std::move(e);
  }
  drained_.clear();
  if (shutdownRequested_.load() && !shutdownSent_) {
    out.shutdown = true;
    shutdownSent_ = true;
  }
  if (hits + full > 0) {
    std::lock_guard<std::mutex> lock(statsMu_);
    stats_.hitsSent += hits;
    stats_.fullRequestsSent += full;
  }
}

void Runtime::gatherBurst(RequestList& out, uint64_t pushesSeen) {
  // The per-tensor work (cache lookup, bookkeeping) is done here as the tensors arrive; only the
  // message waits for the burst to end, so that a step's hits travel as one bit vector and the
  // coordinator answers them with one list. A lone operation pays the quiet window.
  if ((out.hits.empty() && out.requests.empty()) || burstQuietUs_.load(std::memory_order_relaxed) <= 0) return;
  const auto quiet = std::chrono::microseconds(burstQuietUs_.load(std::memory_order_relaxed));
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  auto lastArrival = start;
  while (true) {
    const auto now = Clock::now();
    const uint64_t pushes = queue_.pushes();
    if (pushes != pushesSeen) {
      pushesSeen = pushes;
      lastArrival = now;
      collectRequests(out);
    } else if (now - lastArrival >= quiet) {
      return;
    }
    if (now - start >= kBurstMax) return;
    // A busy poll, not sched_yield(): on a loaded machine a yield can hand the CPU away for a
    // whole time slice (milliseconds); this wait is bounded by `quiet` after the last arrival.
    for (int i = 0; i < 16; ++i) cpuRelax();
  }
}

void Runtime::postRequests(RequestList& list) {
  if (list.empty()) return;
  list.lastSeq = lastSeq_;
  encode(list, sendBuffer_);
  list.clear();
  transport_->post(0, sendBuffer_.data(), sendBuffer_.size());
  std::lock_guard<std::mutex> lock(statsMu_);
  stats_.lastRequestsSentNs = nowNs();
  stats_.controlMessagesSent++;
  stats_.controlBytesSent += sendBuffer_.size();
}

bool Runtime::processList(ResponseList& list) {
  // Every rank must execute every list, in order: a gap would desynchronize the data plane.
  if (list.seq != lastSeq_ + 1) {
    throw Error("Horovod control plane out of sync on rank " + std::to_string(topology_.rank) +
                ": expected response list " + std::to_string(lastSeq_ + 1) + ", got " + std::to_string(list.seq));
  }
  {
    std::lock_guard<std::mutex> lock(statsMu_);
    stats_.lastListStartNs = nowNs();
    stats_.responseLists++;
  }
  if (observers_.wants(EngineEventKind::kCycleStart)) [[unlikely]] {
    EngineEvent e;
    e.kind = EngineEventKind::kCycleStart;
    observers_.publish(e);
  }
  if (list.knobs.has_value()) [[unlikely]] applyKnobs(*list.knobs);
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

void Runtime::completeEntry(Entry* entry, std::exception_ptr error) {
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
  work->completeMember(error);
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
    case Kind::kAddProcessSet: {
      std::vector<int> ranks(r.setRanks.begin(), r.setRanks.end());
      sets_.add(r.setId, std::move(ranks));
      if (observers_.wants(EngineEventKind::kProcessSetAdded)) [[unlikely]] {
        publishSetChange(EngineEventKind::kProcessSetAdded, r.setId,
                         std::vector<int>(r.setRanks.begin(), r.setRanks.end()));
      }
      if (Entry* e = pendingEntry(0, "process_set.add")) {
        e->work->setJoinResult(r.setId);
        completeEntry(e, nullptr);
      }
      return;
    }
    case Kind::kRemoveProcessSet: {
      // Operations still pending in the removed set can never run.
      std::vector<Entry*> orphans;
      for (NameSlot* slot : queue_.slotsWithEntries()) {
        if (slot->key.processSet == r.setId) orphans.push_back(slot->entry.get());
      }
      for (Entry* e : orphans) {
        completeEntry(e, std::make_exception_ptr(Error("Process set " + std::to_string(r.setId) +
                                                       " was removed while this operation was pending.")));
      }
      byCacheId_.eraseIf([&](uint32_t, Entry* e) { return e == nullptr || e->request.params.processSet == r.setId; });
      std::vector<int> removedRanks;
      const bool announce = observers_.wants(EngineEventKind::kProcessSetRemoved);
      if (announce) [[unlikely]] {
        if (const ProcessSet* gone = sets_.get(r.setId)) removedRanks = gone->ranks;
      }
      sets_.remove(r.setId);
      backends_.removeSet(r.setId);
      if (announce) [[unlikely]] publishSetChange(EngineEventKind::kProcessSetRemoved, r.setId, removedRanks);
      if (Entry* e = pendingEntry(0, "process_set.remove")) {
        e->work->setJoinResult(1);
        completeEntry(e, nullptr);
      }
      return;
    }
    case Kind::kError:
      for (const auto& t : r.tensors) {
        completeEntry(findEntry(r, t), std::make_exception_ptr(MismatchError(r.error)));
      }
      return;
    default:
      runData(r);
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
  {
    std::lock_guard<std::mutex> lock(statsMu_);
    stats_.responses++;
    stats_.tensors += r.tensors.size();
    if (r.cachedForm) stats_.cachedTensors += r.tensors.size();
    stats_.fusionBufferBytes = host_.fusion.capacity();
    stats_.lastDataStartNs = nowNs();
  }
  std::exception_ptr error;
  try {
    backends_.forResponse(r, *set).run(r, *set, entriesScratch_);
  } catch (...) {
    error = std::current_exception();
    // Transport and collective failures end the runtime; anything else fails this response only
    // (it is deterministic, so every rank fails it alike).
    if (isFatal(error)) throw;
  }
  // Copy: completing an entry may free it.
  std::vector<Entry*> done = entriesScratch_;
  for (Entry* e : done) completeEntry(e, error);
}

void Runtime::onSilentPeer(int rank, const std::string& message) {
  {
    std::lock_guard<std::mutex> lock(silentMu_);
    silentRank_ = rank;
    silentMessage_ = message;
  }
  silentPeer_.store(true);
  transport_->wake();
  gate_->unpark();
  // A step notices at once; an engine stuck in a transfer with the silent rank would only at the
  // transfer's deadline.
  std::unique_lock<std::mutex> exitLock(exitMu_);
  if (!exitCv_.wait_for(exitLock, std::chrono::seconds(1), [&] { return loopExited_; })) {
    transport_->noteCulprit(rank);
    transport_->abort(message);
  }
}

std::exception_ptr Runtime::preferRelayedCause(std::exception_ptr error) {
  ErrorInfo mine = ErrorInfo::fromException(error);
  if (!transport_ || mine.message.rfind("[from rank ", 0) == 0) return error;
  if (mine.kind != ErrorKind::kPeerLost && mine.kind != ErrorKind::kTimeout) return error;
  // This rank may only have seen a messenger: a peer that gave up because a third rank did not
  // answer or died (it aborted, so this rank lost it), or a local wait that timed out behind a
  // silent remote rank. That peer's abort notice names the culprit and is on its way: wait for
  // it a little (a peer's liveness probe takes up to 0.5 s). The transports say when the lost
  // rank aborted: TCP "failed and aborted", shm "failed (aborted its transport".
  const bool lostAMessenger = mine.message.find("failed and aborted") != std::string::npos ||
                              mine.message.find("failed (aborted its transport") != std::string::npos ||
                              (mine.message.rfind("local transport: ", 0) == 0 &&
                               mine.message.find(" aborted (") != std::string::npos);
  // The messenger's notice comes from a rank that saw the culprit itself (over TCP, or over shared
  // memory on the culprit's host: up to 100 ms to notice, then its abort frame): on a loaded
  // machine that takes more than half a second now and then.
  const auto wait = std::chrono::milliseconds(mine.kind == ErrorKind::kTimeout ? 1000 : lostAMessenger ? 1500 : 0);
  Deadline grace = Deadline::after(wait);
  try {
    while (true) {
      std::optional<MailboxMessage> message;
      try {
        message = transport_->poll();
      } catch (const PeerLost& e) {
        // A transport that remembers its first failure repeats it on an empty mailbox (the
        // composite's shared-memory half): that is this rank's own error, keep waiting for mail.
        if (e.rank() != mine.rank) throw;
      }
      if (!message) {
        if (grace.expired()) break;
        bool mail = false;
        try {
          mail = transport_->waitForMessage(grace);
        } catch (const PeerLost& e) {
          if (e.rank() != mine.rank) throw;
          // The transport repeats the loss this rank already knows before any mail came: look
          // again shortly (the notice may be on its way from a third rank).
          std::this_thread::sleep_for(std::chrono::milliseconds(2));
          continue;
        }
        if (!mail) break;
        continue;
      }
      if (messageType(message->bytes) != MessageType::kAbort) continue;  // the engine is ending
      ErrorInfo relayed = decodeErrorInfo(message->bytes);
      const bool fromMessenger = mine.kind == ErrorKind::kTimeout || message->from == mine.rank || lostAMessenger;
      if (fromMessenger && relayed.kind == ErrorKind::kPeerLost && relayed.rank >= 0 && relayed.rank != mine.rank) {
        return relayed.toException();
      }
      // A shutdown every rank was told about (the stall inspector's, a rank that left): the
      // messenger only aborted because it got the notice first, and this rank's copy is here.
      if (lostAMessenger && relayed.kind == ErrorKind::kAborted && relayed.message.rfind("[from rank ", 0) == 0) {
        return relayed.toException();
      }
    }
  } catch (const PeerLost& e) {
    // Reading on, this rank found a lost peer of its own: if it is not the messenger, it is the
    // culprit (e.g. the dead rank's own connection closed). After a timeout that named nobody,
    // any rank found lost is.
    if (e.rank() >= 0 && e.rank() != mine.rank && (lostAMessenger || mine.kind == ErrorKind::kTimeout)) {
      return std::current_exception();
    }
  } catch (const std::exception&) {
    // The transport has failed too: nothing more to read.
  }
  return error;
}

void Runtime::onFatal(std::exception_ptr error, bool notifyPeers) {
  ErrorInfo info = ErrorInfo::fromException(error);
  HVD_LOG(Error) << "Horovod background loop stopped on rank " << topology_.rank << ": " << info.message;
  if (!transport_) return;
  if (notifyPeers) {
    // Tell the others so they fail fast instead of waiting for their own timeouts.
    ErrorInfo relay = info;
    relay.message = "[from rank " + std::to_string(topology_.rank) + "] " + info.message;
    std::vector<uint8_t> bytes;
    encode(relay, bytes);
    for (int r = 0; r < topology_.size; ++r) {
      if (r == topology_.rank) continue;
      try {
        transport_->post(r, bytes.data(), bytes.size());
      } catch (...) {
      }
    }
  }
  // The rank to blame travels with the transport's abort notice too: a peer that only sees this
  // rank's connections close then names the lost rank, not this (live) messenger.
  if (info.kind == ErrorKind::kPeerLost && info.rank >= 0) transport_->noteCulprit(info.rank);
  // Then abort the transport: peers blocked in a data-plane wait involving this rank (over
  // shared memory: in any wait) fail now rather than at their timeout, even if this process
  // stays alive.
  transport_->abort(info.message);
}

void Runtime::failAll(const ErrorInfo& reason) {
  std::vector<EntryPtr> left = queue_.close(reason.toException());
  for (auto& e : left) e->work->failRemaining(reason.toException());
  for (NameSlot* slot : queue_.slotsWithEntries()) {
    slot->entry->work->failRemaining(reason.toException());
    slot->entry.reset();
  }
  byCacheId_.clear();
}

RuntimeStats Runtime::stats() const {
  std::lock_guard<std::mutex> lock(statsMu_);
  RuntimeStats s = stats_;
  s.outputBlocksMapped = host_.outputs->blocksMapped();
  return s;
}

}  // namespace hvd::engine
