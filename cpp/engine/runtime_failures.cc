// Runtime: failures and liveness: a silent peer, a fatal error (this rank's or relayed by a
// peer), failing every pending operation, and rank 0's stall scans.
#include <algorithm>

#include "common/logging.h"
#include "engine/runtime.h"
#include "horovod/errors.h"

namespace hvd::engine {

void Runtime::maybeScanStalls() {
  const int64_t now = ObserverHub::nowNs();
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

void Runtime::onSilentPeer(int rank, const std::string& message) {
  {
    std::lock_guard<std::mutex> lock(silentMu_);
    silentRank_ = rank;
    silentMessage_ = message;
  }
  silentPeer_.store(true);
  transport_->wake();
  gate_->unpark();
  // An idle engine notices at its next step (at once: it was woken) and tells its peers itself
  // before it aborts the transport. An engine stuck in a transfer with the silent rank would only
  // at the transfer's deadline: abort the transport under it right away, so that the failure is
  // reported within the liveness timeout (its error still names the silent rank: see loop()).
  std::unique_lock<std::mutex> exitLock(exitMu_);
  if (!exitCv_.wait_for(exitLock, std::chrono::milliseconds(20), [&] { return loopExited_; })) {
    transport_->noteCulprit(rank);
    transport_->abort(message);
  }
}

std::exception_ptr Runtime::preferRelayedCause(std::exception_ptr error) {
  ErrorInfo mine = ErrorInfo::fromException(error);
  if (!transport_ || mine.relayedFrom >= 0) return error;
  if (mine.kind != ErrorKind::kPeerLost && mine.kind != ErrorKind::kTimeout) return error;
  // This rank may only have seen a messenger: a peer that gave up because a third rank did not
  // answer or died (it aborted, so this rank lost it), or a local wait that timed out behind a
  // silent remote rank. That peer's abort notice names the culprit and is on its way: wait for
  // it a little (a peer's liveness probe takes up to 0.5 s). The transports say when the lost
  // rank aborted rather than vanished (PeerLost::peerAborted()).
  const bool lostAMessenger = mine.kind == ErrorKind::kPeerLost && mine.peerAborted;
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
      if (lostAMessenger && relayed.kind == ErrorKind::kAborted && relayed.relayedFrom >= 0) {
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
    relay.relayedFrom = topology_.rank;
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

}  // namespace hvd::engine
