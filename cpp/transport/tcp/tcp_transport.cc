#include "transport/tcp/tcp_transport.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/check.h"
#include "common/logging.h"
#include "common/params.h"
#include "transport/tcp/tcp_mesh.h"

namespace hvd::tcp {
namespace {

using namespace std::chrono_literals;

// Fixed kernel buffers measured ~20% slower than the kernel's autotuning on loopback, and
// autotuning covers the bandwidth-delay product of ordinary links, so 0 (autotune) is the default.
const Param<int64_t> kSocketBufferBytes(
    "HOROVOD_TCP_SOCKET_BUFFER_BYTES", 0,
    "Kernel send/receive buffer size for TCP transport connections (needs root to exceed "
    "net.core.[rw]mem_max); 0 leaves the kernel's autotuning on.");
// After a data connection hangs up while the control connection is still open, how long to
// wait for the peer's goodbye (a clean shutdown) before declaring it lost.
constexpr auto kGoodbyeGrace = 1s;
// How long the destructor tries to deliver queued control messages and the goodbye.
constexpr auto kCloseFlush = 1s;

const bool kRegistered = [] {
  registerTransport("tcp", [](const TransportContext& context) { return std::make_unique<TcpTransport>(context); });
  return true;
}();

std::string errnoText(int err) { return std::string(std::strerror(err)); }

std::string describeRevents(int fd, short revents, bool onData) {
  std::string which = onData ? "data" : "control";
  if (revents & POLLERR) {
    int err = 0;
    socklen_t len = sizeof(err);
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) return "its " + which + " connection failed: " + errnoText(err);
  }
  return "its " + which + " connection closed unexpectedly (the process exited or was killed)";
}

void drainQuietly(int fd) {
  uint8_t scratch[65536];
  for (int i = 0; i < 1024; ++i) {
    ssize_t n = ::recv(fd, scratch, sizeof(scratch), MSG_DONTWAIT);
    if (n <= 0 && !(n < 0 && errno == EINTR)) return;
  }
}

}  // namespace

TcpTransport::TcpTransport(const TransportContext& context)
    : rank_(context.rank),
      size_(context.size),
      timeout_(context.timeout),
      hostOf_(context.hostOf),
      peers_(context.size > 0 ? context.size : 0) {
  (void)kRegistered;
  HVD_CHECK_AS(InvalidArgument, context.size >= 1 && context.rank >= 0 && context.rank < context.size)
      << "bad rank " << context.rank << " for size " << context.size;
  HVD_CHECK_AS(InvalidArgument, context.size == 1 || context.store != nullptr) << "TCP transport needs a store";
  abortFd_ = Socket(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  wakeFd_ = Socket(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  HVD_SYSCHECK(abortFd_.valid() && wakeFd_.valid(), "eventfd");
  for (int r = 0; r < size_; ++r) {
    peers_[r].host = r < static_cast<int>(context.hostOf.size()) ? context.hostOf[r] : "?";
  }
  int64_t bufferBytes = kSocketBufferBytes.get();
  HVD_CHECK_AS(InvalidArgument, bufferBytes >= 0 && bufferBytes <= (int64_t{1} << 30))
      << kSocketBufferBytes.name() << "=" << bufferBytes << " is out of range [0, 1 GiB]";
  MeshLinks links = connectMesh(context, static_cast<int>(bufferBytes));
  listenAddress_ = links.listenAddress;
  refused_ = links.refused;
  for (int r = 0; r < size_; ++r) {
    peers_[r].data = std::move(links.data[r]);
    peers_[r].ctrl = std::move(links.control[r]);
  }
  dataFds_.reserve(2 * size_ + 2);
  dataOwners_.reserve(2 * size_ + 2);
  mailFds_.reserve(2 * size_ + 2);
  mailOwners_.reserve(2 * size_ + 2);
}

TcpTransport::~TcpTransport() {
  bool graceful = !aborted_ && !failed_;
  std::lock_guard<std::mutex> lock(ctrlMu_);
  Deadline flushBy = Deadline::after(kCloseFlush);
  for (int r = 0; r < size_; ++r) {
    Peer& p = peers_[r];
    if (r == rank_ || !p.ctrl.valid()) continue;
    if (graceful && !p.ctrlClosed) {
      // Queued messages first, then the goodbye, so the peer sees both in order.
      appendFrame(p, kFrameGoodbye, nullptr, 0);
      while (p.outStart < p.out.size() && !flushBy.expired()) {
        if (!flushLocked(p).empty()) break;
        if (p.outStart < p.out.size()) pollOne(p.ctrl.fd(), POLLOUT, flushBy);
      }
    }
    // Unread input would make close() send a reset instead of an orderly close.
    drainQuietly(p.ctrl.fd());
    if (p.data.valid()) drainQuietly(p.data.fd());
    ::shutdown(p.ctrl.fd(), SHUT_WR);
    if (p.data.valid()) ::shutdown(p.data.fd(), SHUT_WR);
  }
}

void TcpTransport::checkPeer(int peer, const char* op) const {
  HVD_CHECK_AS(InvalidArgument, peer >= 0 && peer < size_)
      << "tcp " << op << ": peer rank " << peer << " out of range [0, " << size_ << ")";
}

void TcpTransport::throwAborted() {
  std::lock_guard<std::mutex> lock(stateMu_);
  throw Aborted(abortReason_.empty() ? std::string("TCP transport aborted") : abortReason_);
}

void TcpTransport::checkUsable(bool dataPlane) {
  if (aborted_) throwAborted();
  if (failed_) {
    std::lock_guard<std::mutex> lock(stateMu_);
    throw PeerLost(lostRank_, lostMessage_, lostAborted_);
  }
  if (dataPlane && !brokenMessage_.empty()) throw Error(brokenMessage_);
}

std::string TcpTransport::describePeer(int peer) const {
  return "rank " + std::to_string(peer) + " (host " + peers_[peer].host + ")";
}

void TcpTransport::lost(int peer, const std::string& why) {
  Peer& p = peers_[peer];
  if (p.gaveUp) {
    // The peer is alive and gave up itself: name whom it blamed, not the messenger.
    int blamed;
    std::string reason;
    {
      std::lock_guard<std::mutex> lock(ctrlMu_);
      blamed = p.blamed;
      reason = p.gaveUpReason;
    }
    if (blamed == rank_) {
      fail(rank_, "Horovod rank " + std::to_string(rank_) + " (this rank) did not answer its peers in time: " +
                      describePeer(peer) + " gave up waiting for it (" + reason +
                      "). Was this process stopped (SIGSTOP, a debugger) or starved of CPU? See "
                      "HOROVOD_GLOO_TIMEOUT_SECONDS.");
    }
    if (blamed >= 0 && blamed < size_) {
      fail(blamed, "Horovod " + describePeer(blamed) + " did not answer in time: " + describePeer(peer) +
                       " gave up waiting for it (" + reason + ")");
    }
    fail(peer, "Horovod " + describePeer(peer) + " failed and aborted: " + reason, /*peerAborted=*/true);
  }
  fail(peer, "Horovod lost connection to " + describePeer(peer) + ": " + why);
}

void TcpTransport::fail(int culprit, const std::string& message, bool peerAborted) {
  {
    std::lock_guard<std::mutex> lock(stateMu_);
    if (!failed_) {
      lostRank_ = culprit;
      lostAborted_ = peerAborted;
      lostMessage_ = message;
      failed_ = true;
    }
  }
  int none = -1;
  if (culprit != rank_) blameRank_.compare_exchange_strong(none, culprit);
  throw PeerLost(culprit, message, peerAborted);
}

void TcpTransport::noteCulprit(int rank) {
  int none = -1;
  if (rank >= 0 && rank < size_ && rank != rank_) blameRank_.compare_exchange_strong(none, rank);
}

void TcpTransport::abort(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(stateMu_);
    if (aborted_) return;
    abortReason_ = reason;
    aborted_ = true;
  }
  uint64_t one = 1;
  (void)!::write(abortFd_.fd(), &one, sizeof(one));
  // Tell the peers (best effort, never blocking): they name the rank blamed here instead of
  // this one when they see this rank's connections close.
  const int32_t blamed = blameRank_.load();
  std::vector<uint8_t> payload(sizeof(blamed));
  std::memcpy(payload.data(), &blamed, sizeof(blamed));
  payload.insert(payload.end(), reason.begin(), reason.begin() + std::min<size_t>(reason.size(), 4096));
  std::lock_guard<std::mutex> lock(ctrlMu_);
  for (int r = 0; r < size_; ++r) {
    Peer& p = peers_[r];
    if (r == rank_ || p.departed || p.ctrlClosed || !p.ctrl.valid()) continue;
    appendFrame(p, kFrameAbort, payload.data(), payload.size());
    (void)flushLocked(p);
  }
}

bool TcpTransport::awaitAbortNotice(int peer, Deadline until) {
  Peer& p = peers_[peer];
  while (true) {
    {
      std::lock_guard<std::mutex> lock(ctrlMu_);
      if (p.gaveUp || p.departed || p.ctrlClosed) return p.gaveUp;
      (void)readControlLocked(peer);
      if (p.gaveUp || p.ctrlClosed) return p.gaveUp;
    }
    if (until.expired()) return false;
    pollfd fds[2] = {{abortFd_.fd(), POLLIN, 0}, {p.ctrl.fd(), POLLIN | POLLRDHUP, 0}};
    int rc = ::poll(fds, 2, until.pollTimeoutMs());
    if (rc < 0 && errno != EINTR) return false;
    if (fds[0].revents != 0) return false;  // aborted meanwhile
  }
}

std::exception_ptr TcpTransport::culpritBehind(int peer, const std::string& context, std::chrono::milliseconds window) {
  if (aborted_ || peer >= size_ || peer == rank_) return nullptr;
  try {
    checkUsable(false);  // already failed: what this transport found names the culprit
    if (peer >= 0) {
      if (!awaitAbortNotice(peer, Deadline::after(window))) return nullptr;
      int blamed;
      {
        std::lock_guard<std::mutex> lock(ctrlMu_);
        blamed = peers_[peer].blamed;
      }
      if (blamed >= 0 && blamed != peer) lost(peer, "");  // names the rank it blamed
      return nullptr;
    }
    int silent = -1;
    int gaveUp = probePeers({}, silent);
    if (gaveUp >= 0) lost(gaveUp, "");
    if (silent >= 0) {
      fail(silent, "Horovod " + describePeer(silent) + " did not answer in time: " + context +
                       "; it did not answer a liveness probe within " + std::to_string(kProbeWindow.count()) +
                       " ms either (is it stopped, hung, or is its host unreachable? see "
                       "HOROVOD_GLOO_TIMEOUT_SECONDS)");
    }
  } catch (const PeerLost&) {
    return std::current_exception();
  } catch (const Error&) {
    // Aborted meanwhile, or a broken stream: nothing learned.
  }
  return nullptr;
}

int TcpTransport::peerThatGaveUp() {
  std::lock_guard<std::mutex> lock(ctrlMu_);
  int any = -1;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_ || !peers_[r].gaveUp) continue;
    if (peers_[r].blamed >= 0) return r;  // one that knows whom to blame first
    if (any < 0) any = r;
  }
  return any;
}

int TcpTransport::probePeers(const std::vector<int>& preferred, int& silent) {
  silent = -1;
  const Probe probe = sendProbes();
  awaitProbeAnswers(probe);
  int gave = peerThatGaveUp();
  if (gave >= 0) return gave;
  for (int r : preferred) {
    if (r >= 0 && r < size_ && r != rank_ && unanswered(probe, r)) {
      silent = r;
      return -1;
    }
  }
  for (int r = 0; r < size_; ++r) {
    if (r != rank_ && unanswered(probe, r)) {
      silent = r;
      return -1;
    }
  }
  return -1;
}

TcpTransport::Probe TcpTransport::sendProbes() {
  Probe probe{std::vector<uint32_t>(size_, 0), std::vector<char>(size_, 0)};
  std::lock_guard<std::mutex> lock(ctrlMu_);
  for (int r = 0; r < size_; ++r) {
    Peer& p = peers_[r];
    if (r == rank_ || p.departed || p.ctrlClosed || p.gaveUp) continue;
    probe.pongsBefore[r] = p.pongs.load();
    appendFrame(p, kFramePing, nullptr, 0);
    (void)flushLocked(p);
    probe.asked[r] = 1;
  }
  return probe;
}

bool TcpTransport::unanswered(const Probe& probe, int r) const {
  return probe.asked[r] && peers_[r].pongs.load() == probe.pongsBefore[r] && !peers_[r].departed;
}

void TcpTransport::awaitProbeAnswers(const Probe& probe) {
  Deadline window = Deadline::after(kProbeWindow);
  std::vector<pollfd> fds;
  std::vector<int> owners;
  while (peerThatGaveUp() < 0 && !window.expired()) {
    fds.clear();
    owners.clear();
    fds.push_back({abortFd_.fd(), POLLIN, 0});
    owners.push_back(-1);
    {
      std::lock_guard<std::mutex> lock(ctrlMu_);
      for (int r = 0; r < size_; ++r) {
        Peer& p = peers_[r];
        if (!unanswered(probe, r) || p.ctrlClosed) continue;
        short events = POLLIN;
        if (p.outStart < p.out.size()) events |= POLLOUT;
        fds.push_back({p.ctrl.fd(), events, 0});
        owners.push_back(r);
      }
    }
    if (fds.size() == 1) return;  // everyone answered (or closed)
    int rc = ::poll(fds.data(), fds.size(), window.pollTimeoutMs());
    if (rc < 0 && errno != EINTR) return;
    if (rc <= 0) continue;
    if (fds[0].revents != 0) return;  // aborted meanwhile: the caller's error stands
    std::lock_guard<std::mutex> lock(ctrlMu_);
    for (size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      Peer& p = peers_[owners[i]];
      if (fds[i].revents & POLLOUT) (void)flushLocked(p);
      if (fds[i].revents & ~POLLOUT) (void)readControlLocked(owners[i]);
    }
  }
}

void TcpTransport::wake() {
  if (wakePending_.exchange(true)) return;
  uint64_t one = 1;
  (void)!::write(wakeFd_.fd(), &one, sizeof(one));
}

// ---- Data plane ------------------------------------------------------------------------------

void TcpTransport::selfSend(const void* data, size_t bytes) {
  if (selfStart_ == selfData_.size()) {
    selfData_.clear();
    selfStart_ = 0;
  }
  const auto* p = static_cast<const uint8_t*>(data);
  selfData_.insert(selfData_.end(), p, p + bytes);
}

void TcpTransport::selfRecv(void* data, size_t bytes) {
  size_t available = selfData_.size() - selfStart_;
  HVD_CHECK(available >= bytes) << "tcp recv of " << bytes << " bytes from self (rank " << rank_ << "), but only "
                                << available << " bytes were sent to self";
  if (bytes > 0) std::memcpy(data, selfData_.data() + selfStart_, bytes);
  selfStart_ += bytes;
}

void TcpTransport::send(int peer, const void* data, size_t bytes, Deadline deadline) {
  checkPeer(peer, "send");
  checkUsable(true);
  if (peer == rank_) return selfSend(data, bytes);
  Leg leg{peer, true, const_cast<uint8_t*>(static_cast<const uint8_t*>(data)), bytes, bytes};
  transfer(&leg, 1, deadline, "send");
}

void TcpTransport::recv(int peer, void* data, size_t bytes, Deadline deadline) {
  checkPeer(peer, "recv");
  checkUsable(true);
  if (peer == rank_) return selfRecv(data, bytes);
  Leg leg{peer, false, static_cast<uint8_t*>(data), bytes, bytes};
  transfer(&leg, 1, deadline, "recv");
}

void TcpTransport::sendRecv(int to, const void* sendData, size_t sendBytes, int from, void* recvData, size_t recvBytes,
                            Deadline deadline) {
  checkPeer(to, "sendRecv");
  checkPeer(from, "sendRecv");
  checkUsable(true);
  Leg legs[2];
  int count = 0;
  if (to == rank_) {
    selfSend(sendData, sendBytes);
  } else {
    legs[count++] = Leg{to, true, const_cast<uint8_t*>(static_cast<const uint8_t*>(sendData)), sendBytes, sendBytes};
  }
  if (from == rank_) {
    selfRecv(recvData, recvBytes);
  } else {
    legs[count++] = Leg{from, false, static_cast<uint8_t*>(recvData), recvBytes, recvBytes};
  }
  transfer(legs, count, deadline, "sendRecv");
}

void TcpTransport::progress(Leg& leg, const char* op) {
  int fd = peers_[leg.peer].data.fd();
  while (leg.left > 0) {
    ssize_t n = leg.isSend ? ::send(fd, leg.ptr, leg.left, MSG_NOSIGNAL | MSG_DONTWAIT)
                           : ::recv(fd, leg.ptr, leg.left, MSG_DONTWAIT);
    if (n > 0) {
      leg.ptr += n;
      leg.left -= static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    int err = n < 0 ? errno : 0;
    // Closed or failed. Read its control connection first: a goodbye means it shut down.
    {
      std::lock_guard<std::mutex> lock(ctrlMu_);
      readControlLocked(leg.peer);
    }
    std::string progressText = std::to_string(leg.total - leg.left) + " of " + std::to_string(leg.total) + " bytes";
    std::string doing = std::string("in tcp ") + op + (leg.isSend ? " (sent " : " (received ") + progressText + ")";
    if (peers_[leg.peer].departed) lost(leg.peer, "it shut down its transport while this rank was " + doing);
    if (err == 0) lost(leg.peer, "connection closed unexpectedly " + doing + " (the process exited or was killed)");
    lost(leg.peer, "connection failed " + doing + ": " + errnoText(err));
  }
}

void TcpTransport::transfer(Leg* legs, int count, Deadline deadline, const char* op) {
  auto start = Deadline::Clock::now();
  while (true) {
    bool pending = false;
    for (int i = 0; i < count; ++i) {
      if (legs[i].left > 0) progress(legs[i], op);
      pending = pending || legs[i].left > 0;
    }
    if (!pending) return;
    fillTransferPollSet(legs, count);
    int rc = ::poll(dataFds_.data(), dataFds_.size(), deadline.pollTimeoutMs());
    if (rc < 0 && errno == EINTR) continue;
    HVD_SYSCHECK(rc >= 0, "poll");
    if (rc == 0) {
      if (!deadline.expired()) continue;
      failTransferTimeout(legs, count, op, start);
    }
    serveTransferPollSet(legs, count);
  }
}

void TcpTransport::fillTransferPollSet(const Leg* legs, int count) {
  // Wait for our sockets, for abort, and for a hang-up of any other peer.
  dataFds_.clear();
  dataOwners_.clear();
  dataFds_.push_back({abortFd_.fd(), POLLIN, 0});
  dataOwners_.push_back({PollKind::kAbort, -1});
  std::unique_lock<std::mutex> outLock(ctrlMu_, std::defer_lock);
  if (outPending_.load() > 0) (void)outLock.try_lock();
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    Peer& p = peers_[r];
    short events = 0;
    for (int i = 0; i < count; ++i) {
      if (legs[i].peer == r && legs[i].left > 0) events |= legs[i].isSend ? POLLOUT : POLLIN;
    }
    if (events == 0 && !p.departed && !p.dataClosed) events = POLLRDHUP;
    if (events != 0) {
      dataFds_.push_back({p.data.fd(), events, 0});
      dataOwners_.push_back({PollKind::kData, r});
    }
    // POLLIN too: answer liveness probes and learn of a peer's abort while waiting.
    short ctrlEvents = p.ctrlClosed ? 0 : (POLLRDHUP | POLLIN);
    if (outLock.owns_lock() && p.outStart < p.out.size()) ctrlEvents |= POLLOUT;
    if (ctrlEvents != 0) {
      dataFds_.push_back({p.ctrl.fd(), ctrlEvents, 0});
      dataOwners_.push_back({PollKind::kCtrl, r});
    }
  }
}

void TcpTransport::failTransferTimeout(const Leg* legs, int count, const char* op, Deadline::Clock::time_point start) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Deadline::Clock::now() - start).count();
  std::string message =
      "Timed out after " + std::to_string(ms) + " ms in tcp " + op + " on rank " + std::to_string(rank_) + ":";
  for (int i = 0; i < count; ++i) {
    const Leg& leg = legs[i];
    if (leg.left == 0) continue;
    message += std::string(leg.isSend ? " sending to " : " receiving from ") + describePeer(leg.peer) + ", " +
               std::to_string(leg.total - leg.left) + " of " + std::to_string(leg.total) + " bytes done;";
  }
  message.pop_back();
  brokenMessage_ = "TCP transport streams are out of step after an earlier failure: " + message;
  // Name the rank that does not answer, not the one this rank happened to wait for (it may
  // be waiting for the silent one itself).
  std::vector<int> preferred;
  for (int i = 0; i < count; ++i) {
    if (legs[i].left > 0) preferred.push_back(legs[i].peer);
  }
  int silent = -1;
  int gaveUp = probePeers(preferred, silent);
  if (gaveUp >= 0) lost(gaveUp, "");
  if (silent >= 0) {
    fail(silent, "Horovod " + describePeer(silent) + " did not answer in time: " + message +
                     "; it did not answer a liveness probe within " + std::to_string(kProbeWindow.count()) +
                     " ms either (is it stopped, hung, or is its host unreachable? see "
                     "HOROVOD_GLOO_TIMEOUT_SECONDS)");
  }
  throw Timeout(message);
}

void TcpTransport::serveTransferPollSet(const Leg* legs, int count) {
  for (size_t i = 0; i < dataFds_.size(); ++i) {
    short revents = dataFds_[i].revents;
    if (revents == 0) continue;
    const PollOwner& owner = dataOwners_[i];
    if (owner.kind == PollKind::kAbort) throwAborted();
    bool active = false;
    for (int l = 0; l < count; ++l) active = active || (legs[l].peer == owner.peer && legs[l].left > 0);
    if (owner.kind == PollKind::kData) {
      // An active socket's events are handled by progress() (it reads the remaining data first).
      if (!active && (revents & (POLLRDHUP | POLLHUP | POLLERR))) onHangup(owner.peer, true, revents);
    } else {
      if (revents & POLLOUT) flushAllControl();
      if (revents & (POLLRDHUP | POLLHUP | POLLERR)) {
        onHangup(owner.peer, false, revents);
      } else if (revents & POLLIN) {
        std::string why;
        {
          std::lock_guard<std::mutex> lock(ctrlMu_);
          why = readControlLocked(owner.peer);
        }
        if (peers_[owner.peer].gaveUp) lost(owner.peer, why);
        if (!why.empty()) onHangup(owner.peer, false, revents);
      }
    }
  }
}

void TcpTransport::onHangup(int peer, bool onData, short revents) {
  Peer& p = peers_[peer];
  std::string why;
  {
    std::lock_guard<std::mutex> lock(ctrlMu_);
    why = readControlLocked(peer);
  }
  if (p.gaveUp) lost(peer, why);
  Deadline grace = Deadline::after(kGoodbyeGrace);
  while (!p.departed && why.empty() && !p.ctrlClosed && !grace.expired()) {
    // The data connection closed but the control one is open: a clean shutdown's goodbye may
    // still be in flight.
    pollOne(p.ctrl.fd(), POLLIN | POLLRDHUP, grace);
    std::lock_guard<std::mutex> lock(ctrlMu_);
    why = readControlLocked(peer);
  }
  if (p.departed) {
    if (onData) p.dataClosed = true;
    return;
  }
  if (why.empty()) why = describeRevents(onData ? p.data.fd() : p.ctrl.fd(), revents, onData);
  lost(peer, why);
}

}  // namespace hvd::tcp
