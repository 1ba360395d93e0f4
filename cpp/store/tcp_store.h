// TcpStore: a Store backed by a TcpStoreServer (horovodrun's rendezvous service).
//
// Connections authenticate with the job secret (common/hmac.h) before any request. The client
// keeps a small pool of connections so that concurrent calls from several threads (e.g. a
// blocking get on one thread while another sets the key) each get their own; get and wait
// block on the server, not by polling.
//
// Reconnection: a connection that breaks (reset by the network, closed while idle) is replaced
// by a new, re-authenticated one and the request sent again, within the call's deadline and at
// most 3 s of trying to reach the server again (a launcher that is gone is a StoreError within
// seconds, not at the end of a long wait). set, get and wait are sent again because repeating
// them means the same. add is not idempotent: it is sent again only when the break was seen
// before sending (an idle pooled connection found closed); a break after it was sent is a
// StoreError saying that whether the server applied it is unknown.
//
// Errors: StoreError "could not connect to rendezvous server at HOST:PORT: ..." when the
// server cannot be reached by the connect deadline, "rendezvous server at HOST:PORT refused
// authentication ..." (a StoreSecretRefused) when the secret is wrong; hvd::Timeout naming the
// keys for get/wait.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "common/socket.h"
#include "horovod/errors.h"
#include "store/store.h"

namespace hvd {

// The server closed the connection during the handshake: the secret does not match the server's.
class StoreSecretRefused : public StoreError {
  using StoreError::StoreError;
};

class TcpStore : public Store {
 public:
  // Connects (retrying while the server is not up yet) and authenticates by connectDeadline.
  TcpStore(std::string host, uint16_t port, std::string secret, Deadline connectDeadline);
  ~TcpStore() override;

  void set(const std::string& key, const Bytes& value, Deadline deadline) override;
  Bytes get(const std::string& key, Deadline deadline) override;
  int64_t add(const std::string& key, int64_t delta, Deadline deadline) override;
  void wait(const std::vector<std::string>& keys, Deadline deadline) override;

  // "host:port" of the server.
  std::string serverAddress() const;
  // The local IP this host uses to reach the server (a good address to publish to peers).
  std::string localIpTowardsServer() const { return localIp_; }

 private:
  Socket connect(Deadline deadline);
  // An idle pooled connection that is still open, else a new one (connected by connectBy).
  Socket takeConnection(Deadline connectBy);
  // Sends one request frame and returns the response body (status byte first). `idempotent`:
  // the request may be sent again on a new connection when the old one breaks.
  // `encode` builds the request frame (called again for each send).
  std::vector<uint8_t> roundTrip(const std::function<std::vector<uint8_t>()>& encode, Deadline deadline,
                                 const std::string& what, bool idempotent);

  std::string host_;
  uint16_t port_;
  std::string secret_;
  std::string localIp_;
  std::mutex mu_;
  std::vector<Socket> idle_;  // authenticated connections not in use
};

}  // namespace hvd
