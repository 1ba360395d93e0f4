#include "store/tcp_store.h"

#include <poll.h>

#include <algorithm>
#include <thread>

#include "common/logging.h"
#include "horovod/errors.h"
#include "store/store_protocol.h"
#include "store/store_util.h"

namespace hvd {
namespace {

using store_wire::Op;
using store_wire::Status;

// How long after the request's own deadline the client still waits for the server's answer
// (the server enforces the deadline and answers kTimeout; this only covers a stuck server).
constexpr auto kAnswerGrace = std::chrono::seconds(10);
// Bound for opening an extra pooled connection when the call itself has no deadline.
constexpr auto kReconnectBound = std::chrono::seconds(30);
// After a connection broke, how long a call keeps trying to reach the server again (within its
// own deadline): long enough for a reset connection or a short outage, short enough that a
// launcher that is gone is an error in seconds, not at the end of a long get/wait.
constexpr auto kReconnectWindow = std::chrono::seconds(3);
// Requests sent again on fresh connections before giving up (each one needs a new break).
constexpr int kMaxResends = 3;
// Pauses between connection attempts that the server dropped as busy (PeerBusy), doubling.
constexpr auto kBusyBackoffFirst = std::chrono::milliseconds(5);
constexpr auto kBusyBackoffMax = std::chrono::milliseconds(200);

// True when an idle pooled connection is known broken: an idle authenticated connection never
// has anything to read, so readable means EOF, a reset or a stray byte, all unusable.
bool looksBroken(int fd) {
  pollfd p{fd, POLLIN, 0};
  int rc = ::poll(&p, 1, 0);
  return rc != 0;
}

uint64_t timeoutMs(Deadline deadline) {
  return deadline.isNever() ? store_wire::kNoTimeout : static_cast<uint64_t>(deadline.remaining().count());
}

}  // namespace

TcpStore::TcpStore(std::string host, uint16_t port, std::string secret, Deadline connectDeadline)
    : host_(std::move(host)), port_(port), secret_(std::move(secret)) {
  Socket first = connect(connectDeadline);
  localIp_ = localIp(first.fd());
  idle_.push_back(std::move(first));
}

TcpStore::~TcpStore() = default;

std::string TcpStore::serverAddress() const { return joinHostPort(host_, port_); }

Socket TcpStore::connect(Deadline deadline) {
  std::string where = serverAddress();
  auto backoff = kBusyBackoffFirst;
  for (int busy = 0;; ++busy) {
    Socket s;
    try {
      s = connectTcp(host_, port_, deadline, /*retry=*/true);
    } catch (const Error& e) {
      throw StoreError("could not connect to rendezvous server at " + where + ": " + e.what());
    }
    setNoDelay(s.fd());
    try {
      authenticateAsClient(s.fd(), secret_, store_wire::kClientIdentity, store_wire::kServerIdentity, deadline);
      return s;
    } catch (const PeerBusy& e) {
      // Dropped unchecked under a flood: try again, with a growing pause, within the deadline.
      if (!deadline.isNever() && deadline.remaining() <= backoff) {
        throw StoreError("could not connect to rendezvous server at " + where + ": it dropped " +
                         std::to_string(busy + 1) + " connection attempt(s) before authenticating: " + e.what());
      }
      HVD_LOG(Debug) << "rendezvous server at " << where << " busy; connecting again: " << e.what();
      std::this_thread::sleep_for(backoff);
      backoff = std::min(2 * backoff, kBusyBackoffMax);
    } catch (const AuthenticationRefused& e) {
      throw StoreSecretRefused("rendezvous server at " + where +
                               " refused authentication (the job secret does not match the launcher's): " + e.what());
    } catch (const Error& e) {
      throw StoreError("could not connect to rendezvous server at " + where + ": authentication failed: " + e.what());
    }
  }
}

Socket TcpStore::takeConnection(Deadline connectBy) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    while (!idle_.empty()) {
      Socket s = std::move(idle_.back());
      idle_.pop_back();
      if (!looksBroken(s.fd())) return s;
      HVD_LOG(Debug) << "rendezvous connection to " << serverAddress() << " was closed while idle; reconnecting";
    }
  }
  return connect(connectBy);
}

std::vector<uint8_t> TcpStore::roundTrip(const std::function<std::vector<uint8_t>()>& encode, Deadline deadline,
                                         const std::string& what, bool idempotent) {
  Deadline connectBy = deadline.isNever() ? Deadline::after(kReconnectBound) : deadline;
  for (int resends = 0;; ++resends) {
    Socket s;
    try {
      s = takeConnection(connectBy);
    } catch (const StoreError& e) {
      if (resends == 0) throw;
      throw StoreError("lost connection to rendezvous server at " + serverAddress() + " during " + what +
                       " and could not reconnect within " + std::to_string(kReconnectWindow.count()) +
                       " s: " + e.what());
    }
    Deadline answerBy = deadline.isNever() ? deadline : Deadline::after(deadline.remaining() + kAnswerGrace);
    const std::vector<uint8_t> request = encode();  // again on each send: timeouts shrink
    std::vector<uint8_t> body;
    try {
      sendAll(s.fd(), request.data(), request.size(), answerBy);
      uint8_t header[store_wire::kHeaderBytes];
      recvAll(s.fd(), header, sizeof(header), answerBy);
      uint32_t length = store_wire::frameLength(header);
      if (length == 0 || length > store_wire::kMaxFrameBytes) {
        throw StoreError("bad response frame of " + std::to_string(length) + " bytes");
      }
      body.resize(length);
      recvAll(s.fd(), body.data(), body.size(), answerBy);
    } catch (const Timeout&) {
      throw Timeout("Timed out in " + what + ": rendezvous server at " + serverAddress() + " did not answer");
    } catch (const StoreError& e) {
      throw StoreError("rendezvous server at " + serverAddress() + " during " + what + ": " + e.what());
    } catch (const Error& e) {
      // The connection broke after the request may have reached the server.
      std::string lost =
          "lost connection to rendezvous server at " + serverAddress() + " during " + what + ": " + e.what();
      if (!idempotent) {
        throw StoreError(lost +
                         " (not sent again: add() is not idempotent, and whether the server applied it "
                         "is unknown)");
      }
      if (resends >= kMaxResends || deadline.expired()) throw StoreError(lost);
      HVD_LOG(Debug) << lost << "; reconnecting and sending it again";
      connectBy = Deadline::after(kReconnectWindow);
      if (!deadline.isNever() && deadline.remaining() < kReconnectWindow) connectBy = deadline;
      continue;
    }
    std::lock_guard<std::mutex> lock(mu_);
    idle_.push_back(std::move(s));
    return body;
  }
}

void TcpStore::set(const std::string& key, const Bytes& value, Deadline deadline) {
  auto encode = [&] {
    store_wire::Writer w;
    w.body().u8(static_cast<uint8_t>(Op::kSet)).str32(key).str32(value.data(), value.size());
    return w.finish();
  };
  auto body = roundTrip(encode, deadline, "set('" + key + "')", /*idempotent=*/true);
  store_wire::checkResponse(body, "set", serverAddress());
}

Bytes TcpStore::get(const std::string& key, Deadline deadline) {
  auto encode = [&] {
    store_wire::Writer w;
    w.body().u8(static_cast<uint8_t>(Op::kGet)).u64(timeoutMs(deadline)).str32(key);
    return w.finish();
  };
  auto body = roundTrip(encode, deadline, "get('" + key + "')", /*idempotent=*/true);
  auto r = store_wire::checkResponse(body, "get", serverAddress());
  return store_wire::readGetValue(r, serverAddress());
}

int64_t TcpStore::add(const std::string& key, int64_t delta, Deadline deadline) {
  auto encode = [&] {
    store_wire::Writer w;
    w.body().u8(static_cast<uint8_t>(Op::kAdd)).str32(key).i64(delta);
    return w.finish();
  };
  auto body = roundTrip(encode, deadline, "add('" + key + "')", /*idempotent=*/false);
  auto r = store_wire::checkResponse(body, "add", serverAddress());
  return store_wire::readAddValue(r, serverAddress());
}

void TcpStore::wait(const std::vector<std::string>& keys, Deadline deadline) {
  auto encode = [&] {
    store_wire::Writer w;
    w.body().u8(static_cast<uint8_t>(Op::kWait)).u64(timeoutMs(deadline));
    w.body().u32(static_cast<uint32_t>(keys.size()));
    for (const auto& k : keys) w.body().str32(k);
    return w.finish();
  };
  auto body = roundTrip(encode, deadline, "wait(" + store_detail::quoteKeys(keys) + ")", /*idempotent=*/true);
  store_wire::checkResponse(body, "wait", serverAddress());
}

}  // namespace hvd
