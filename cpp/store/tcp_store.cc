#include "store/tcp_store.h"

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
  Socket s;
  try {
    s = connectTcp(host_, port_, deadline, /*retry=*/true);
  } catch (const Error& e) {
    throw StoreError("could not connect to rendezvous server at " + where + ": " + e.what());
  }
  setNoDelay(s.fd());
  try {
    authenticateAsClient(s.fd(), secret_, store_wire::kClientIdentity, store_wire::kServerIdentity, deadline);
  } catch (const AuthenticationRefused& e) {
    throw StoreError("rendezvous server at " + where +
                     " refused authentication (the job secret does not match the launcher's): " + e.what());
  } catch (const Error& e) {
    throw StoreError("could not connect to rendezvous server at " + where + ": authentication failed: " + e.what());
  }
  return s;
}

std::vector<uint8_t> TcpStore::roundTrip(const std::vector<uint8_t>& request, Deadline deadline,
                                         const std::string& what) {
  Socket s;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!idle_.empty()) {
      s = std::move(idle_.back());
      idle_.pop_back();
    }
  }
  if (!s.valid()) s = connect(deadline.isNever() ? Deadline::after(kReconnectBound) : deadline);

  Deadline answerBy = deadline.isNever() ? deadline : Deadline::after(deadline.remaining() + kAnswerGrace);
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
  } catch (const Error& e) {
    throw StoreError("lost connection to rendezvous server at " + serverAddress() + " during " + what + ": " +
                     e.what());
  }
  std::lock_guard<std::mutex> lock(mu_);
  idle_.push_back(std::move(s));
  return body;
}

namespace {

// Interprets a non-OK response; returns a reader positioned after the status when OK.
ByteReader checkStatus(const std::vector<uint8_t>& body, const std::string& op, const std::string& where) {
  ByteReader r = store_wire::reader(body.data(), body.size());
  try {
    auto status = static_cast<Status>(r.u8());
    if (status == Status::kOk) return r;
    if (status == Status::kTimeout) {
      std::vector<std::string> missing;
      for (uint32_t n = r.u32(); n > 0; --n) missing.push_back(r.str32());
      throw Timeout(store_detail::timeoutMessage(op, missing, "rendezvous server at " + where));
    }
    if (status == Status::kError) throw StoreError("rendezvous server at " + where + ": " + r.str32());
  } catch (const DecodeError&) {
    throw StoreError("malformed " + op + " response from rendezvous server at " + where);
  }
  throw StoreError("rendezvous server at " + where + " sent an unknown status");
}

}  // namespace

void TcpStore::set(const std::string& key, const Bytes& value, Deadline deadline) {
  store_wire::Writer w;
  w.body().u8(static_cast<uint8_t>(Op::kSet)).str32(key).str32(value.data(), value.size());
  auto body = roundTrip(w.finish(), deadline, "set('" + key + "')");
  checkStatus(body, "set", serverAddress());
}

Bytes TcpStore::get(const std::string& key, Deadline deadline) {
  store_wire::Writer w;
  w.body().u8(static_cast<uint8_t>(Op::kGet)).u64(timeoutMs(deadline)).str32(key);
  auto body = roundTrip(w.finish(), deadline, "get('" + key + "')");
  auto r = checkStatus(body, "get", serverAddress());
  try {
    return r.bytes32();
  } catch (const DecodeError&) {
    throw StoreError("malformed get response from rendezvous server at " + serverAddress());
  }
}

int64_t TcpStore::add(const std::string& key, int64_t delta, Deadline deadline) {
  store_wire::Writer w;
  w.body().u8(static_cast<uint8_t>(Op::kAdd)).str32(key).i64(delta);
  auto body = roundTrip(w.finish(), deadline, "add('" + key + "')");
  auto r = checkStatus(body, "add", serverAddress());
  try {
    return r.i64();
  } catch (const DecodeError&) {
    throw StoreError("malformed add response from rendezvous server at " + serverAddress());
  }
}

void TcpStore::wait(const std::vector<std::string>& keys, Deadline deadline) {
  store_wire::Writer w;
  w.body().u8(static_cast<uint8_t>(Op::kWait)).u64(timeoutMs(deadline));
  w.body().u32(static_cast<uint32_t>(keys.size()));
  for (const auto& k : keys) w.body().str32(k);
  auto body = roundTrip(w.finish(), deadline, "wait(" + store_detail::quoteKeys(keys) + ")");
  checkStatus(body, "wait", serverAddress());
}

}  // namespace hvd
