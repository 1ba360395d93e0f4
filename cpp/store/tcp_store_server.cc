// TcpStoreServer: one poll() thread serves every connection. Each connection first runs the
// server side of the handshake (common/hmac.h) as a small state machine; until it verifies,
// nothing the peer sends is interpreted. Blocking get/wait requests park the connection until
// a set/add makes their keys present or their timeout passes.
//
// Under a flood of connections (a hostile or broken local process, or a port scan), each round of
// the loop serves authenticated clients first, then the handshakes in progress, and only then
// accepts a bounded batch of new connections; shutdown is checked every round. Unauthenticated
// connections are bounded in number, time and buffered bytes; one dropped to make room is told
// so (auth::busyAnswer()), and its client connects again instead of reporting a wrong secret.
#include "store/tcp_store_server.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <list>
#include <thread>
#include <unordered_map>

#include "common/check.h"
#include "common/hmac.h"
#include "common/logging.h"
#include "common/socket.h"
#include "store/store.h"
#include "store/store_protocol.h"
#include "store/store_util.h"

namespace hvd {
namespace {

using Clock = std::chrono::steady_clock;
using store_wire::Op;
using store_wire::Status;

// An unauthenticated connection must finish the handshake within this time. A real client
// answers the challenge in one round trip; the bound only has to cover a loaded machine.
constexpr auto kHandshakeTimeout = std::chrono::seconds(5);
// At most this many connections may be in the handshake at once: an unauthenticated flood holds
// a bounded number of descriptors, and the oldest pending one is dropped to admit a new one (a
// real client finishes within a round trip, so it is rarely the oldest).
constexpr size_t kMaxPendingHandshakes = 256;
// At most this many connections are accepted per poll round, so that a connection flood cannot
// keep the thread from serving the clients it has, nor from noticing shutdown.
constexpr int kAcceptBatch = 64;
// An unauthenticated peer may send at most one complete proof before it is answered.
constexpr size_t kMaxProofBytes = 2 + auth::kMaxIdentityBytes + auth::kNonceBytes + 32;
// Refusal warnings: at most kRefusalLogBurst per kRefusalLogWindow, then one summary line.
constexpr int kRefusalLogBurst = 5;
constexpr auto kRefusalLogWindow = std::chrono::seconds(10);
constexpr size_t kReadChunk = 64 * 1024;
// At most this many bytes are read from one connection per round (the rest waits in the kernel
// for the next round), so one fast sender cannot starve the others or grow the buffer beyond its
// largest frame plus this.
constexpr size_t kReadPerRound = 16 * kReadChunk;

struct Conn {
  Conn(Socket s, const std::string& secret)
      : sock(std::move(s)),
        peer(peerAddress(sock.fd())),
        handshake(secret, store_wire::kServerIdentity),
        handshakeDeadline(Clock::now() + kHandshakeTimeout) {}

  Socket sock;
  std::string peer;
  auth::ServerHandshake handshake;
  bool authenticated = false;
  Clock::time_point handshakeDeadline;
  bool dead = false;
  bool closeAfterFlush = false;

  std::vector<uint8_t> in;
  size_t inStart = 0;
  std::vector<uint8_t> out;
  size_t outStart = 0;

  // The parked get/wait, if any (a client has at most one request in flight).
  bool waiting = false;
  Op waitOp = Op::kGet;
  std::vector<std::string> waitKeys;
  Clock::time_point waitUntil = Clock::time_point::max();
};

}  // namespace

struct TcpStoreServer::Impl {
  Impl(const std::string& bindHost, uint16_t requestedPort, std::string secretIn)
      : secret(std::move(secretIn)), listener(listenTcp(bindHost, requestedPort, SOMAXCONN)) {
    port = localPort(listener.fd());
    wakeFd = Socket(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
    HVD_SYSCHECK(wakeFd.valid(), "eventfd");
    thread = std::thread([this] { run(); });
  }

  ~Impl() {
    stopping = true;
    uint64_t one = 1;
    (void)!::write(wakeFd.fd(), &one, sizeof(one));
    if (thread.joinable()) thread.join();
  }

  void run();
  // run()'s parts: the poll set (wake fd, listener, then one entry per connection in `order`)
  // and its timeout in ms (-1: none); the work on the descriptors poll found ready; the
  // handshakes and parked requests whose deadline passed (refused / answered kTimeout).
  int preparePoll(std::vector<pollfd>& fds, std::vector<Conn*>& order);
  void serveReady(const std::vector<pollfd>& fds, const std::vector<Conn*>& order);
  void expireDeadlines(Clock::time_point now);
  void acceptBatch();
  void readFrom(Conn& c);
  bool process(Conn& c);  // returns true if it consumed a request
  void handle(Conn& c, const uint8_t* body, size_t bytes);
  void park(Conn& c, Op op, std::vector<std::string> keys, uint64_t timeoutMs);
  bool tryComplete(Conn& c);
  void reply(Conn& c, store_wire::Writer& w);
  void replyError(Conn& c, const std::string& message);
  void flush(Conn& c);
  void refuse(Conn& c, const std::string& why);
  void dropAsBusy(Conn& c, const std::string& why);
  bool closedWhilePending(Conn& c);
  std::vector<std::string> missing(const std::vector<std::string>& keys) const;
  void dropOldestPendingIfFull();
  void logRefusal(const std::string& peer, const std::string& why);
  void flushRefusalSummary(Clock::time_point now);

  std::string secret;
  Socket listener;
  uint16_t port = 0;
  Socket wakeFd;
  std::thread thread;
  std::atomic<bool> stopping{false};
  std::atomic<int64_t> refused{0};

  // Owned by the I/O thread.
  std::unordered_map<std::string, Bytes> data;
  std::list<Conn> conns;
  Clock::time_point logWindowStart{};
  int loggedInWindow = 0;
  int64_t suppressed = 0;  // refusals not logged in the current window
  std::string lastSuppressed;
};

void TcpStoreServer::Impl::run() {
  std::vector<pollfd> fds;
  std::vector<Conn*> order;
  while (!stopping) {
    const int timeoutMs = preparePoll(fds, order);
    int rc = ::poll(fds.data(), fds.size(), timeoutMs);
    if (rc < 0 && errno != EINTR) {
      HVD_LOG(Error) << "Rendezvous server poll failed: " << std::strerror(errno);
      return;
    }
    if (stopping) return;
    if (rc > 0) serveReady(fds, order);
    // Requests that became answerable (keys set by others) and pipelined input.
    bool progress = true;
    while (progress) {
      progress = false;
      for (auto& c : conns) {
        if (!c.dead && process(c)) progress = true;
      }
    }
    auto now = Clock::now();
    flushRefusalSummary(now);
    expireDeadlines(now);
    conns.remove_if([](const Conn& c) { return c.dead; });
  }
}

int TcpStoreServer::Impl::preparePoll(std::vector<pollfd>& fds, std::vector<Conn*>& order) {
  fds.clear();
  order.clear();
  fds.push_back({wakeFd.fd(), POLLIN, 0});
  fds.push_back({listener.fd(), POLLIN, 0});
  auto next = Clock::time_point::max();
  for (auto& c : conns) {
    short events = POLLIN;
    if (c.outStart < c.out.size()) events |= POLLOUT;
    fds.push_back({c.sock.fd(), events, 0});
    order.push_back(&c);
    if (!c.authenticated) next = std::min(next, c.handshakeDeadline);
    if (c.waiting) next = std::min(next, c.waitUntil);
  }
  if (suppressed > 0) next = std::min(next, logWindowStart + kRefusalLogWindow);
  if (next == Clock::time_point::max()) return -1;
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(next - Clock::now()).count() + 1;
  return static_cast<int>(std::clamp<long long>(left, 0, 60000));
}

void TcpStoreServer::Impl::serveReady(const std::vector<pollfd>& fds, const std::vector<Conn*>& order) {
  if (fds[0].revents != 0) {
    uint64_t drained;
    (void)!::read(wakeFd.fd(), &drained, sizeof(drained));
  }
  // Authenticated clients first, then the handshakes in progress, then new connections.
  for (bool authenticatedPass : {true, false}) {
    for (size_t i = 0; i < order.size(); ++i) {
      Conn& c = *order[i];
      if (c.dead || c.authenticated != authenticatedPass) continue;
      short rev = fds[i + 2].revents;
      if (rev & (POLLIN | POLLHUP | POLLERR)) readFrom(c);
      if (!c.dead && (rev & POLLOUT)) flush(c);
    }
  }
  if (fds[1].revents != 0 && !stopping) acceptBatch();
}

void TcpStoreServer::Impl::expireDeadlines(Clock::time_point now) {
  for (auto& c : conns) {
    if (c.dead) continue;
    if (!c.authenticated && now >= c.handshakeDeadline) {
      refuse(c, "did not authenticate within " + std::to_string(kHandshakeTimeout.count()) + " s");
    } else if (c.waiting && now >= c.waitUntil) {
      c.waiting = false;
      store_wire::Writer w;
      auto absent = missing(c.waitKeys);
      w.body().u8(static_cast<uint8_t>(Status::kTimeout)).u32(static_cast<uint32_t>(absent.size()));
      for (const auto& k : absent) w.body().str32(k);
      reply(c, w);
    }
  }
}

bool TcpStoreServer::Impl::closedWhilePending(Conn& c) {
  // A peek, not a read: bytes that arrived (a client's proof) stay for readFrom.
  uint8_t byte;
  ssize_t n = ::recv(c.sock.fd(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n > 0 || (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))) return false;
  HVD_LOG(Debug) << "Rendezvous server: " << c.peer << " disconnected before authenticating";
  c.dead = true;
  c.sock.close();
  return true;
}

void TcpStoreServer::Impl::dropOldestPendingIfFull() {
  size_t pending = 0;
  for (auto& c : conns) {
    if (!c.dead && !c.authenticated) pending++;
  }
  if (pending < kMaxPendingHandshakes) return;
  // conns is in accept order, so the first live pending one is the oldest. Connections whose
  // peer already left (a flood resets its connections) are reaped first, without blaming anyone;
  // then the oldest one that has sent nothing is dropped: a real client answers the challenge
  // within a round trip (its proof may still wait in the kernel: the peek sees it), a flood's
  // idle connections stay silent. Only when none is silent does the oldest one go.
  Conn* oldest = nullptr;
  for (auto& c : conns) {
    if (c.dead || c.authenticated) continue;
    if (closedWhilePending(c)) {
      if (--pending < kMaxPendingHandshakes) return;
      continue;
    }
    if (!oldest) oldest = &c;
    uint8_t byte;
    bool silent = c.in.size() == c.inStart && ::recv(c.sock.fd(), &byte, 1, MSG_PEEK | MSG_DONTWAIT) < 0;
    if (silent) {
      dropAsBusy(c, "dropped before authenticating (it had sent nothing): " + std::to_string(kMaxPendingHandshakes) +
                        " connections were already waiting to authenticate");
      return;
    }
  }
  if (oldest) {
    dropAsBusy(*oldest, "dropped before authenticating: " + std::to_string(kMaxPendingHandshakes) +
                            " connections were already waiting to authenticate");
  }
}

void TcpStoreServer::Impl::logRefusal(const std::string& peer, const std::string& why) {
  auto now = Clock::now();
  flushRefusalSummary(now);
  if (now - logWindowStart >= kRefusalLogWindow) {
    logWindowStart = now;
    loggedInWindow = 0;
  }
  if (loggedInWindow < kRefusalLogBurst) {
    loggedInWindow++;
    HVD_LOG(Warning) << "Rendezvous server refused a connection from " << peer << ": " << why;
    return;
  }
  suppressed++;
  lastSuppressed = peer + ": " + why;
}

void TcpStoreServer::Impl::flushRefusalSummary(Clock::time_point now) {
  if (suppressed == 0 || now - logWindowStart < kRefusalLogWindow) return;
  HVD_LOG(Warning) << "Rendezvous server refused " << suppressed << " more connection(s) in "
                   << kRefusalLogWindow.count() << " s (not logged one by one; the last from " << lastSuppressed << ")";
  suppressed = 0;
  lastSuppressed.clear();
  logWindowStart = now;
  loggedInWindow = 0;
}

void TcpStoreServer::Impl::acceptBatch() {
  for (int accepted = 0; accepted < kAcceptBatch && !stopping; ++accepted) {
    int fd = ::accept4(listener.fd(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        HVD_LOG(Warning) << "Rendezvous server accept failed: " << std::strerror(errno);
      }
      return;
    }
    setNoDelay(fd);
    dropOldestPendingIfFull();
    conns.emplace_back(Socket(fd), secret);
    Conn& c = conns.back();
    c.out = c.handshake.challenge();
    flush(c);
  }
}

void TcpStoreServer::Impl::readFrom(Conn& c) {
  for (size_t readNow = 0; !c.dead;) {
    const size_t buffered = c.in.size() - c.inStart;
    if (!c.authenticated && buffered > kMaxProofBytes) {
      refuse(c, "sent " + std::to_string(buffered) + " bytes before authenticating (a proof is at most " +
                    std::to_string(kMaxProofBytes) + ")");
      return;
    }
    if (readNow >= kReadPerRound) return;  // poll reports the rest next round
    if (c.inStart == c.in.size()) {
      c.in.clear();
      c.inStart = 0;
    }
    size_t old = c.in.size();
    c.in.resize(old + kReadChunk);
    ssize_t n = ::recv(c.sock.fd(), c.in.data() + old, kReadChunk, 0);
    c.in.resize(old + std::max<ssize_t>(n, 0));
    if (n > 0) {
      readNow += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    // EOF or error: a client that disconnects before authenticating counts as refused only if
    // it sent something (plain port probes are logged at debug level).
    if (!c.authenticated && c.in.size() > c.inStart) {
      refuse(c, "closed the connection during authentication");
    } else {
      if (!c.authenticated) {
        HVD_LOG(Debug) << "Rendezvous server: " << c.peer << " disconnected before authenticating";
      }
      c.dead = true;
      c.sock.close();
    }
    return;
  }
}

bool TcpStoreServer::Impl::process(Conn& c) {
  bool consumed = false;
  if (!c.authenticated) {
    size_t avail = c.in.size() - c.inStart;
    if (avail < 2) return false;
    auto need = auth::ServerHandshake::proofBytes(c.in.data() + c.inStart);
    if (!need) {
      refuse(c, "sent a malformed handshake");
      return false;
    }
    if (avail < *need) return false;
    std::vector<uint8_t> answer;
    auto id = c.handshake.verify(c.in.data() + c.inStart, *need, answer);
    if (!id || *id != store_wire::kClientIdentity) {
      refuse(c, "failed to prove the job secret");
      return false;
    }
    c.authenticated = true;
    c.inStart += *need;
    c.out.insert(c.out.end(), answer.begin(), answer.end());
    flush(c);
    consumed = true;
  }
  if (c.waiting && tryComplete(c)) consumed = true;
  while (!c.dead && !c.waiting) {
    size_t avail = c.in.size() - c.inStart;
    if (avail < store_wire::kHeaderBytes) break;
    uint32_t length = store_wire::frameLength(c.in.data() + c.inStart);
    if (length == 0 || length > store_wire::kMaxFrameBytes) {
      HVD_LOG(Warning) << "Rendezvous server: bad frame of " << length << " bytes from " << c.peer << "; closing";
      c.dead = true;
      c.sock.close();
      break;
    }
    if (avail < store_wire::kHeaderBytes + length) {
      c.in.reserve(c.inStart + store_wire::kHeaderBytes + length);
      break;
    }
    const uint8_t* body = c.in.data() + c.inStart + store_wire::kHeaderBytes;
    c.inStart += store_wire::kHeaderBytes + length;
    handle(c, body, length);
    consumed = true;
  }
  if (c.inStart == c.in.size()) {
    c.in.clear();
    c.inStart = 0;
  }
  return consumed;
}

void TcpStoreServer::Impl::handle(Conn& c, const uint8_t* body, size_t bytes) {
  store_wire::Request q;
  try {
    q = store_wire::decodeRequest(body, bytes);
  } catch (const DecodeError& e) {
    return replyError(c, e.what());  // "malformed set request", "unknown request 9"
  }
  store_wire::Writer w;
  switch (q.op) {
    case Op::kSet:
      data[std::move(q.key)] = std::move(q.value);
      w.body().u8(static_cast<uint8_t>(Status::kOk));
      return reply(c, w);
    case Op::kAdd: {
      int64_t value = 0;
      try {
        auto it = data.find(q.key);
        value = store_detail::addToCounter(q.key, it == data.end() ? 0 : store_detail::parseCounter(q.key, it->second),
                                           q.delta);
      } catch (const StoreError& e) {
        return replyError(c, e.what());
      }
      data[q.key] = store_detail::formatCounter(value);
      w.body().u8(static_cast<uint8_t>(Status::kOk)).i64(value);
      return reply(c, w);
    }
    case Op::kGet: return park(c, q.op, {std::move(q.key)}, q.timeoutMs);
    case Op::kWait: return park(c, q.op, std::move(q.keys), q.timeoutMs);
  }
}

void TcpStoreServer::Impl::park(Conn& c, Op op, std::vector<std::string> keys, uint64_t timeoutMs) {
  c.waiting = true;
  c.waitOp = op;
  c.waitKeys = std::move(keys);
  c.waitUntil = timeoutMs == store_wire::kNoTimeout
                    ? Clock::time_point::max()
                    : Clock::now() + std::chrono::milliseconds(std::min<uint64_t>(timeoutMs, 1ull << 40));
  tryComplete(c);
}

bool TcpStoreServer::Impl::tryComplete(Conn& c) {
  if (!missing(c.waitKeys).empty()) return false;
  c.waiting = false;
  store_wire::Writer w;
  w.body().u8(static_cast<uint8_t>(Status::kOk));
  if (c.waitOp == Op::kGet) {
    const Bytes& value = data[c.waitKeys.front()];
    w.body().str32(value.data(), value.size());
  }
  reply(c, w);
  return true;
}

std::vector<std::string> TcpStoreServer::Impl::missing(const std::vector<std::string>& keys) const {
  std::vector<std::string> absent;
  for (const auto& k : keys) {
    if (data.count(k) == 0) absent.push_back(k);
  }
  return absent;
}

void TcpStoreServer::Impl::reply(Conn& c, store_wire::Writer& w) {
  auto& frame = w.finish();
  c.out.insert(c.out.end(), frame.begin(), frame.end());
  flush(c);
}

void TcpStoreServer::Impl::replyError(Conn& c, const std::string& message) {
  store_wire::Writer w;
  w.body().u8(static_cast<uint8_t>(Status::kError)).str32(message);
  reply(c, w);
}

void TcpStoreServer::Impl::flush(Conn& c) {
  while (!c.dead && c.outStart < c.out.size()) {
    ssize_t n = ::send(c.sock.fd(), c.out.data() + c.outStart, c.out.size() - c.outStart, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      c.outStart += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    c.dead = true;  // peer gone; nothing else to do for it
    c.sock.close();
    return;
  }
  c.out.clear();
  c.outStart = 0;
}

void TcpStoreServer::Impl::dropAsBusy(Conn& c, const std::string& why) {
  // The challenge went out at accept (an empty socket buffer takes it), so the client reads an
  // answer next: the busy notice takes its place. Best effort: the peer may be gone already.
  const auto& busy = auth::busyAnswer();
  if (c.outStart == c.out.size()) (void)!::send(c.sock.fd(), busy.data(), busy.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  refuse(c, why);
}

void TcpStoreServer::Impl::refuse(Conn& c, const std::string& why) {
  refused++;
  logRefusal(c.peer, why);
  c.dead = true;
  c.sock.close();
}

TcpStoreServer::TcpStoreServer(const std::string& bindHost, uint16_t port, std::string secret)
    : impl_(std::make_unique<Impl>(bindHost, port, std::move(secret))) {}

TcpStoreServer::~TcpStoreServer() = default;

uint16_t TcpStoreServer::port() const { return impl_->port; }

int64_t TcpStoreServer::refusedConnections() const { return impl_->refused.load(); }

}  // namespace hvd
