// Runtime: driving the engine: the background thread, callers that drive it while they wait,
// and one step (collect requests, negotiate, run the lists). Negotiation messages go through the
// transport's mailbox; collectives through the collective backends (backend.h). Every wait is
// bounded.
#include <pthread.h>
#include <sched.h>

#include <algorithm>
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
    // A failure a peer relayed has been sent to every rank already.
    onFatal(error, reason.relayedFrom < 0);
  }
  const int by = shutdownBy_.load();
  if (by >= 0 && by != topology_.rank && reason.kind == ErrorKind::kAborted && reason.message == kShutdownMessage) {
    // Name the rank that left first: usually the one that finished its loop early.
    reason.message += " Rank " + std::to_string(by) + " shut down first (rank " + std::to_string(by) +
                      " called hvd.shutdown() or exited).";
  }
  gate_->close();
  // Device work a backend still completes (deferred completion, backend.h) fails with the same
  // error as everything else; after a clean shutdown it completes as the device finishes it.
  if (loopFailed_) backends_.abort(reason.toException());
  failAll(reason);
  token.unlock();
  {
    std::lock_guard<std::mutex> lock(exitMu_);
    loopExited_ = true;
  }
  exitCv_.notify_all();
}

void Runtime::wakeForCompletion() {
  // Pairs with the fence in awaitWork(): either it sees the work completed, or we see it idle.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (idle_.load(std::memory_order_relaxed)) transport_->wake();
}

bool Runtime::awaitWork(Deadline deadline, const WorkImpl* waitedOn) {
  idle_.store(true, std::memory_order_relaxed);
  // Pairs with the fence in wakeEngine(): either it sees idle_ and wakes the transport, or we see
  // its entries here.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  bool busy = !queue_.empty() || !outgoing_.empty() || (coordinator_ && coordinator_->hasWork()) ||
              (shutdownRequested_.load() && !shutdownSent_) || (waitedOn != nullptr && waitedOn->isCompleted());
  if (!busy) busy = transport_->waitForMessage(deadline);
  idle_.store(false, std::memory_order_relaxed);
  return busy;
}

bool Runtime::leaveToCallers() const {
  // Only fresh local work: the enqueueing thread is likely to wait for it soon and can then run
  // the whole step itself. Messages, coordinator work, shutdown and threads already blocked on
  // earlier operations (nobody would run the engine for them) are not left waiting.
  return callerProgressUs_.load(std::memory_order_relaxed) > 0 && (!queue_.empty() || !outgoing_.empty()) &&
         !(coordinator_ && coordinator_->hasWork()) && !shutdownRequested_.load() && !gate_->hasBlockedWaiters();
}

bool Runtime::parkForCallers(std::unique_lock<std::mutex>& token) {
  bump(stats_.parks);
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
  bump(stats_.callerDrives);
  callerDriving_ = true;
  try {
    while (!work.isCompleted()) {
      awaitWork(deadline.earliest(idleDeadline()), &work);
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
  if (stall_) [[unlikely]]
    wait = std::min(wait, stall_->scanInterval());
  if (observers_.wants(EngineEventKind::kStallTick)) [[unlikely]] {
    wait = std::min<std::chrono::milliseconds>(wait, observers_.tickInterval());
  }
  return Deadline::after(wait);
}

bool Runtime::step() {
  if (silentPeer_.load(std::memory_order_relaxed)) [[unlikely]] {
    std::lock_guard<std::mutex> lock(silentMu_);
    throw PeerLost(silentRank_, silentMessage_);
  }
  if (stall_) [[unlikely]]
    maybeScanStalls();
  if (observers_.wants(EngineEventKind::kStallTick)) [[unlikely]]
    maybeStallTick();
  RequestList& mine = outgoing_;  // may hold requests collected at enqueue already
  const uint64_t pushesSeen = queue_.pushes();  // before draining: later pushes show as a change
  collectRequests(mine);
  // A waiting caller that drives has enqueued its burst already (and collected it, see enqueue).
  if (!callerDriving_) gatherBurst(mine, pushesSeen);
  if (coordinator_) {
    // Rank 0: its own requests first, then the others' in rank order (Horovod's ready order).
    if (!mine.empty()) probe(stats_.lastRequestsSentNs);
    mine.lastSeq = lastSeq_;
    coordinator_->ingest(0, mine);
    mine.clear();
    std::vector<std::pair<int, RequestList>> others;
    while (auto message = transport_->poll()) {
      switch (messageType(message->bytes)) {
        case MessageType::kRequests: others.emplace_back(message->from, decodeRequestList(message->bytes)); break;
        case MessageType::kAbort: {
          ErrorInfo info = decodeErrorInfo(message->bytes);
          std::rethrow_exception(info.toException());
        }
        default: HVD_LOG(Error) << "Coordinator: unexpected control message from rank " << message->from;
      }
    }
    std::stable_sort(others.begin(), others.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (auto& [from, list] : others) coordinator_->ingest(from, list);
    if (hasTuner_.load(std::memory_order_relaxed)) [[unlikely]]
      pollTuner();
    ResponseList list = coordinator_->build();
    if (list.items.empty() && list.hits.empty() && !list.shutdown && !list.knobs) return false;
    encode(list, sendBuffer_);
    for (int r = 1; r < topology_.size; ++r) transport_->post(r, sendBuffer_.data(), sendBuffer_.size());
    probe(stats_.lastListBuiltNs);
    bump(stats_.controlMessagesSent, static_cast<uint64_t>(topology_.size - 1));
    bump(stats_.controlBytesSent, sendBuffer_.size() * static_cast<uint64_t>(topology_.size - 1));
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
      default: HVD_LOG(Error) << "Worker: unexpected control message from rank " << message->from;
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
    if (r.params.kind == Kind::kAllreduce || r.params.kind == Kind::kAdasum || r.params.kind == Kind::kAllgather ||
        r.params.kind == Kind::kAlltoall) {
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
        if (observers_.wants(EngineEventKind::kCacheHit)) [[unlikely]]
          publishEntry(EngineEventKind::kCacheHit, *e, id);
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
  if (hits > 0) bump(stats_.hitsSent, hits);
  if (full > 0) bump(stats_.fullRequestsSent, full);
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
  probe(stats_.lastRequestsSentNs);
  bump(stats_.controlMessagesSent);
  bump(stats_.controlBytesSent, sendBuffer_.size());
}

}  // namespace hvd::engine
