// TcpStoreServer: the rendezvous service. horovodrun runs one per job; workers reach it with
// TcpStore (HOROVOD_GLOO_RENDEZVOUS_ADDR / _PORT). Every connection must first prove knowledge
// of the job secret (HMAC-SHA256 challenge/response, both directions); a connection that fails
// is closed and logged with the peer's address, and nothing it sent is applied.
//
// The server runs its own I/O thread (poll-based, no thread per client). Thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace hvd {

class TcpStoreServer {
 public:
  // Listens on bindHost:port (port 0 = any free port; bindHost "" or "0.0.0.0" = all
  // interfaces). Throws hvd::Error (naming the address) if it cannot listen, e.g. port in use.
  TcpStoreServer(const std::string& bindHost, uint16_t port, std::string secret);
  ~TcpStoreServer();  // stops the thread, closes every connection
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  uint16_t port() const;
  // Number of connections refused for failing authentication (for tests and logs).
  int64_t refusedConnections() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace hvd
