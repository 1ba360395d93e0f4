// The job's rendezvous service: the one place the launcher starts the TcpStoreServer that the
// workers reach through HOROVOD_GLOO_RENDEZVOUS_ADDR/_PORT. It lives as long as this object,
// which main keeps for the whole job (the server runs its own I/O thread).
//
// An elastic driver would extend this class (publishing new rank assignments through the same
// store); static jobs only need it to exist.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace hvd {
class TcpStoreServer;
}

namespace hvd::launcher {

class Rendezvous {
 public:
  // bindHost: "127.0.0.1" for all-local jobs, "0.0.0.0" otherwise. The port comes from
  // HOROVOD_GLOO_RENDEZVOUS_PORT in the launcher's environment when set (> 0), else any free
  // port. Throws UsageError "cannot start the rendezvous server on <addr>: <why>" (e.g. the
  // port is in use).
  Rendezvous(const std::string& bindHost, const std::string& secret);
  ~Rendezvous();
  Rendezvous(const Rendezvous&) = delete;
  Rendezvous& operator=(const Rendezvous&) = delete;

  uint16_t port() const;

 private:
  std::unique_ptr<TcpStoreServer> server_;
};

}  // namespace hvd::launcher
