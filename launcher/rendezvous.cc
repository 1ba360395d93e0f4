#include "rendezvous.h"

#include "common/params.h"
#include "options.h"
#include "store/tcp_store_server.h"

namespace hvd::launcher {
namespace {

const Param<int64_t> kRendezvousPort(
    "HOROVOD_GLOO_RENDEZVOUS_PORT", 0,
    "horovodrun: fixed port for the rendezvous server it starts (0 or unset: any free port)");

}  // namespace

Rendezvous::Rendezvous(const std::string& bindHost, const std::string& secret) {
  int64_t port = 0;
  try {
    port = kRendezvousPort.get();
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
  if (port < 0) port = 0;  // Horovod's "unset" is -1
  if (port > 65535) {
    throw UsageError("HOROVOD_GLOO_RENDEZVOUS_PORT=" + std::to_string(port) + " is not a valid port");
  }
  try {
    server_ = std::make_unique<TcpStoreServer>(bindHost, static_cast<uint16_t>(port), secret);
  } catch (const Error& e) {
    throw UsageError("cannot start the rendezvous server on " + bindHost + ":" + std::to_string(port) + ": " +
                     e.what());
  }
}

Rendezvous::~Rendezvous() = default;

uint16_t Rendezvous::port() const { return server_->port(); }

}  // namespace hvd::launcher
