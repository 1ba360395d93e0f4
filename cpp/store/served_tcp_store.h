// ServedTcpStore: a TcpStore whose server runs in this process. Used where no launcher runs the
// rendezvous service (plain mpirun / srun): one rank hosts the TcpStoreServer, every rank (that
// one included) talks to it through a TcpStore, and the server lives as long as the host rank's
// store does.
#pragma once

#include <memory>
#include <string>

#include "store/tcp_store.h"
#include "store/tcp_store_server.h"

namespace hvd {

class ServedTcpStore : public Store {
 public:
  // Takes over a running server and connects to it at host:port.
  ServedTcpStore(std::unique_ptr<TcpStoreServer> server, const std::string& host, std::string secret,
                 Deadline connectDeadline)
      : server_(std::move(server)), client_(host, server_->port(), std::move(secret), connectDeadline) {}

  void set(const std::string& key, const Bytes& value, Deadline deadline) override {
    client_.set(key, value, deadline);
  }
  Bytes get(const std::string& key, Deadline deadline) override { return client_.get(key, deadline); }
  int64_t add(const std::string& key, int64_t delta, Deadline deadline) override {
    return client_.add(key, delta, deadline);
  }
  void wait(const std::vector<std::string>& keys, Deadline deadline) override { client_.wait(keys, deadline); }

 private:
  std::unique_ptr<TcpStoreServer> server_;  // declared first: destroyed after the client
  TcpStore client_;
};

}  // namespace hvd
