// TcpTransport's control plane: framed messages on the control connections.
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/check.h"
#include "common/logging.h"
#include "transport/tcp/tcp_transport.h"

namespace hvd::tcp {
namespace {

constexpr size_t kReadChunk = 64 * 1024;
constexpr uint32_t kMaxMessageBytes = control_frame::kMaxPayloadBytes;

void putHeader(uint8_t* header, uint32_t length, uint8_t kind) {
  std::memcpy(header, &length, 4);  // little-endian hosts
  header[4] = kind;
}

}  // namespace

void TcpTransport::appendFrame(Peer& p, uint8_t kind, const void* data, size_t bytes) {
  HVD_CHECK_LE(bytes, size_t{kMaxMessageBytes}) << "mailbox message too large";
  uint8_t header[kFrameHeader];
  putHeader(header, static_cast<uint32_t>(bytes), kind);
  bool wasEmpty = p.outStart == p.out.size();
  size_t sent = 0;
  if (wasEmpty && !p.ctrlClosed) {
    // Nothing queued: hand the frame to the socket directly, keep only what it does not take.
    iovec iov[2] = {{header, kFrameHeader}, {const_cast<void*>(data), bytes}};
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = bytes > 0 ? 2 : 1;
    ssize_t n;
    do {
      n = ::sendmsg(p.ctrl.fd(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    } while (n < 0 && errno == EINTR);
    if (n > 0) sent = static_cast<size_t>(n);
    // Errors surface at the next flush.
  }
  size_t total = kFrameHeader + bytes;
  if (sent == total) return;
  if (wasEmpty) {
    p.out.clear();
    p.outStart = 0;
    outPending_++;
  }
  const auto* payload = static_cast<const uint8_t*>(data);
  if (sent < kFrameHeader) {
    p.out.insert(p.out.end(), header + sent, header + kFrameHeader);
    if (bytes > 0) p.out.insert(p.out.end(), payload, payload + bytes);
  } else {
    p.out.insert(p.out.end(), payload + (sent - kFrameHeader), payload + bytes);
  }
}

std::string TcpTransport::flushLocked(Peer& p) {
  if (p.outStart == p.out.size()) return "";
  while (p.outStart < p.out.size()) {
    ssize_t n = ::send(p.ctrl.fd(), p.out.data() + p.outStart, p.out.size() - p.outStart, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      p.outStart += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return "";
    return std::string("its control connection failed: ") + std::strerror(n < 0 ? errno : EPIPE);
  }
  p.out.clear();
  p.outStart = 0;
  outPending_--;
  return "";
}

void TcpTransport::flushAllControl() {
  std::vector<std::pair<int, std::string>> failures;
  {
    std::lock_guard<std::mutex> lock(ctrlMu_);
    for (int r = 0; r < size_; ++r) {
      if (r == rank_ || peers_[r].outStart == peers_[r].out.size()) continue;
      std::string why = flushLocked(peers_[r]);
      if (!why.empty() && !peers_[r].departed) failures.emplace_back(r, why);
    }
  }
  if (!failures.empty()) lost(failures.front().first, failures.front().second);
}

std::string TcpTransport::readControlLocked(int peer) {
  Peer& p = peers_[peer];
  std::string failure;
  while (!p.ctrlClosed) {
    if (p.inStart == p.in.size()) {
      p.in.clear();
      p.inStart = 0;
    }
    size_t old = p.in.size();
    p.in.resize(old + kReadChunk);
    ssize_t n = ::recv(p.ctrl.fd(), p.in.data() + old, kReadChunk, MSG_DONTWAIT);
    p.in.resize(old + (n > 0 ? static_cast<size_t>(n) : 0));
    if (n > 0) continue;
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (n < 0) failure = std::string("its control connection failed: ") + std::strerror(errno);
    p.ctrlClosed = true;
  }
  // Parse every complete frame (a goodbye may precede the close).
  control_frame::Frame frame;
  while (true) {
    auto parsed = control_frame::parse(p.in.data() + p.inStart, p.in.size() - p.inStart, frame);
    if (parsed == control_frame::Parse::kNeedMore) break;
    if (parsed == control_frame::Parse::kMalformed) {
      p.ctrlClosed = true;
      return "it sent a malformed control frame";
    }
    const uint8_t* body = frame.payload;
    p.pingSentAt = {};  // any frame shows the peer's transport running
    if (frame.kind == kFrameMessage) {
      inbox_.push_back(MailboxMessage{peer, std::vector<uint8_t>(body, body + frame.length)});
    } else if (frame.kind == kFrameGoodbye) {
      p.departed = true;
    } else if (frame.kind == kFrameAbort) {
      auto notice = control_frame::decodeAbort(body, frame.length, size_);
      p.blamed = notice.blamed;
      p.gaveUpReason = std::move(notice.reason);
      p.gaveUp = true;
    } else if (frame.kind == kFramePing) {
      appendFrame(p, kFramePong, nullptr, 0);
      (void)flushLocked(p);
    } else {
      p.pongs++;
    }
    p.inStart += kFrameHeader + frame.length;
  }
  if (p.ctrlClosed && !p.departed) {
    return failure.empty() ? "its control connection closed unexpectedly (the process exited or was killed)" : failure;
  }
  return "";
}

void TcpTransport::post(int peer, const void* data, size_t bytes) {
  checkPeer(peer, "post");
  checkUsable(false);
  if (peer == rank_) {
    {
      std::lock_guard<std::mutex> lock(ctrlMu_);
      const auto* p = static_cast<const uint8_t*>(data);
      inbox_.push_back(MailboxMessage{rank_, std::vector<uint8_t>(p, p + bytes)});
    }
    wake();
    return;
  }
  std::string why;
  {
    std::lock_guard<std::mutex> lock(ctrlMu_);
    Peer& p = peers_[peer];
    if (p.departed || p.ctrlClosed) {
      HVD_LOG(Debug) << "tcp post to rank " << peer << " dropped: it has shut down";
      return;
    }
    appendFrame(p, kFrameMessage, data, bytes);
    why = flushLocked(p);
    if (!why.empty() && p.departed) return;
  }
  if (!why.empty()) lost(peer, why);
}

std::optional<MailboxMessage> TcpTransport::poll() {
  if (aborted_) throwAborted();
  int lostPeer = -1;
  std::string why;
  {
    std::lock_guard<std::mutex> lock(ctrlMu_);
    if (inbox_.empty()) {
      // One non-blocking poll() over the control connections tells which have input.
      mailFds_.clear();
      mailOwners_.clear();
      for (int r = 0; r < size_; ++r) {
        if (r == rank_ || peers_[r].ctrlClosed) continue;
        if (peers_[r].outStart < peers_[r].out.size()) flushLocked(peers_[r]);
        mailFds_.push_back({peers_[r].ctrl.fd(), POLLIN | POLLRDHUP, 0});
        mailOwners_.push_back({PollKind::kCtrl, r});
      }
      int rc = mailFds_.empty() ? 0 : ::poll(mailFds_.data(), mailFds_.size(), 0);
      for (size_t i = 0; rc > 0 && i < mailFds_.size(); ++i) {
        if (mailFds_[i].revents == 0) continue;
        std::string w = readControlLocked(mailOwners_[i].peer);
        if (!w.empty() && lostPeer < 0) {
          lostPeer = mailOwners_[i].peer;
          why = w;
        }
      }
    }
    if (!inbox_.empty()) {
      MailboxMessage message = std::move(inbox_.front());
      inbox_.pop_front();
      return message;
    }
  }
  if (lostPeer >= 0) lost(lostPeer, why);
  checkUsable(false);
  return std::nullopt;
}

void TcpTransport::keepAlive(std::chrono::steady_clock::time_point now) {
  if (now < nextKeepAlive_) return;
  const auto period = std::max<std::chrono::milliseconds>(timeout_ / 4, std::chrono::milliseconds(50));
  nextKeepAlive_ = now + period;
  int silent = -1;
  std::chrono::milliseconds silentFor{0};
  {
    std::lock_guard<std::mutex> lock(ctrlMu_);
    for (int r = 0; r < size_; ++r) {
      Peer& p = peers_[r];
      if (r == rank_ || p.departed || p.ctrlClosed || p.gaveUp) continue;
      if (p.pingSentAt == std::chrono::steady_clock::time_point{}) {
        appendFrame(p, kFramePing, nullptr, 0);
        (void)flushLocked(p);
        p.pingSentAt = now;
        continue;
      }
      auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(now - p.pingSentAt);
      if (waited > timeout_ && silent < 0) {
        silent = r;
        silentFor = waited;
      }
    }
  }
  int gave = peerThatGaveUp();
  if (gave >= 0) lost(gave, "");
  if (silent >= 0) {
    // That peer may only be blocked behind the really silent one (in a shared-memory wait on its
    // host, where it reads no TCP): probe everyone once more, and take the notice of a peer that
    // gives up meanwhile naming whom it blames (a rank is silent to every peer, a messenger
    // only until its own wait ends).
    int probed = -1;
    gave = probePeers({silent}, probed);
    if (gave >= 0) lost(gave, "");
    if (probed < 0) return;  // everyone answered this time: nobody is lost
    if (probed != silent) silentFor = kProbeWindow;
    silent = probed;
  }
  if (silent >= 0) {
    fail(silent, "Horovod " + describePeer(silent) + " did not answer a liveness probe for " +
                     std::to_string(silentFor.count()) + " ms while rank " + std::to_string(rank_) +
                     " waited for messages (is it stopped, hung, or is "
                     "its host unreachable? see HOROVOD_GLOO_TIMEOUT_SECONDS)");
  }
}

bool TcpTransport::waitForMessage(Deadline deadline) {
  if (aborted_) throwAborted();
  {
    std::lock_guard<std::mutex> lock(ctrlMu_);
    if (!inbox_.empty()) return true;
  }
  checkUsable(false);
  while (true) {
    keepAlive(std::chrono::steady_clock::now());
    fillMailPollSet();
    int rc = ::poll(mailFds_.data(), mailFds_.size(), mailWaitMs(deadline));
    if (rc < 0 && errno == EINTR) continue;
    HVD_SYSCHECK(rc >= 0, "poll");
    if (rc == 0) {
      if (deadline.expired()) return false;
      continue;
    }
    MailEvents events = serveMailPollSet();
    if (aborted_) throwAborted();
    try {
      if (events.lostPeer >= 0) lost(events.lostPeer, events.why);
      for (auto [peer, revents] : events.dataHangups) onHangup(peer, true, revents);
    } catch (const PeerLost&) {
      // Deliver what already arrived first; the loss is recorded and reported by the next wait.
      std::lock_guard<std::mutex> lock(ctrlMu_);
      if (!inbox_.empty()) return true;
      throw;
    }
    std::lock_guard<std::mutex> lock(ctrlMu_);
    if (events.woke || !inbox_.empty()) return true;
  }
}

void TcpTransport::fillMailPollSet() {
  mailFds_.clear();
  mailOwners_.clear();
  mailFds_.push_back({abortFd_.fd(), POLLIN, 0});
  mailOwners_.push_back({PollKind::kAbort, -1});
  mailFds_.push_back({wakeFd_.fd(), POLLIN, 0});
  mailOwners_.push_back({PollKind::kWake, -1});
  std::lock_guard<std::mutex> lock(ctrlMu_);
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    Peer& p = peers_[r];
    if (!p.ctrlClosed) {
      short events = POLLIN | POLLRDHUP;
      if (p.outStart < p.out.size()) events |= POLLOUT;
      mailFds_.push_back({p.ctrl.fd(), events, 0});
      mailOwners_.push_back({PollKind::kCtrl, r});
    }
    if (!p.departed && !p.dataClosed) {
      mailFds_.push_back({p.data.fd(), POLLRDHUP, 0});
      mailOwners_.push_back({PollKind::kData, r});
    }
  }
}

int TcpTransport::mailWaitMs(Deadline deadline) const {
  // Wake for the next keep-alive round too (it needs every input read first: done by the caller).
  int waitMs = deadline.pollTimeoutMs();
  auto untilKeepAlive =
      std::chrono::duration_cast<std::chrono::milliseconds>(nextKeepAlive_ - std::chrono::steady_clock::now()).count() +
      1;
  if (waitMs < 0 || untilKeepAlive < waitMs) waitMs = static_cast<int>(std::max<long long>(untilKeepAlive, 0));
  return waitMs;
}

TcpTransport::MailEvents TcpTransport::serveMailPollSet() {
  MailEvents events;
  std::lock_guard<std::mutex> lock(ctrlMu_);
  for (size_t i = 0; i < mailFds_.size(); ++i) {
    short revents = mailFds_[i].revents;
    if (revents == 0) continue;
    const PollOwner& owner = mailOwners_[i];
    switch (owner.kind) {
      case PollKind::kAbort: break;  // handled by the caller, outside the lock
      case PollKind::kWake: {
        uint64_t count;
        (void)!::read(wakeFd_.fd(), &count, sizeof(count));
        // Clear only after draining the eventfd: clearing first lets a concurrent wake()
        // write a count that this read then swallows, leaving the flag set with nothing to
        // read, and every later wake() would be dropped.
        wakePending_ = false;
        events.woke = true;
        break;
      }
      case PollKind::kCtrl: {
        Peer& p = peers_[owner.peer];
        if (revents & POLLOUT) {
          std::string w = flushLocked(p);
          if (!w.empty() && events.lostPeer < 0) events.lostPeer = owner.peer, events.why = w;
        }
        if (revents & (POLLIN | POLLRDHUP | POLLHUP | POLLERR)) {
          std::string w = readControlLocked(owner.peer);
          if (!w.empty() && events.lostPeer < 0) events.lostPeer = owner.peer, events.why = w;
        }
        break;
      }
      case PollKind::kData: events.dataHangups.emplace_back(owner.peer, revents); break;
    }
  }
  return events;
}

}  // namespace hvd::tcp
