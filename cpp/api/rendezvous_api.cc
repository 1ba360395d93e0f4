// horovod/rendezvous.h over the store layer: RendezvousServer is a TcpStoreServer plus a
// TcpStore client of it for this process's own store operations (as ServedTcpStore pairs them);
// RendezvousClient is a TcpStore.
#include "horovod/rendezvous.h"

#include <mutex>

#include "common/deadline.h"
#include "store/tcp_store.h"
#include "store/tcp_store_server.h"

namespace hvd {
namespace {

// The server's own client connects over loopback to a server that is already listening.
constexpr std::chrono::seconds kLocalConnectTimeout{30};

Bytes toBytes(const std::string& s) { return Bytes(s.begin(), s.end()); }
std::string toString(const Bytes& b) { return std::string(b.begin(), b.end()); }

}  // namespace

struct RendezvousServer::Impl {
  uint16_t port = 0;
  std::mutex mu;  // serializes the local operations: one connection, never a second one
  std::unique_ptr<TcpStoreServer> server;
  std::unique_ptr<TcpStore> local;
  int64_t refusedAtShutdown = 0;
};

RendezvousServer::RendezvousServer(const std::string& bindHost, uint16_t port, const std::string& secret)
    : impl_(std::make_unique<Impl>()) {
  try {
    impl_->server = std::make_unique<TcpStoreServer>(bindHost, port, secret);
  } catch (const StoreError&) {
    throw;
  } catch (const Error& e) {
    throw StoreError(e.what());
  }
  impl_->port = impl_->server->port();
  impl_->local = std::make_unique<TcpStore>("127.0.0.1", impl_->port, secret, Deadline::after(kLocalConnectTimeout));
}

RendezvousServer::~RendezvousServer() { shutdown(); }

uint16_t RendezvousServer::port() const { return impl_->port; }

int64_t RendezvousServer::refusedConnections() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->server ? impl_->server->refusedConnections() : impl_->refusedAtShutdown;
}

void RendezvousServer::shutdown() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (!impl_->server) return;
  impl_->local.reset();  // before the server: its connection closes first
  impl_->refusedAtShutdown = impl_->server->refusedConnections();
  impl_->server.reset();
}

namespace {
TcpStore& localStore(std::unique_ptr<TcpStore>& local) {
  if (!local) throw StoreError("the rendezvous server was shut down");
  return *local;
}

// The server's local client under the server's lock. get() and wait() hold the lock while they
// wait: the elastic driver that uses this store never waits for a key.
class LockedLocalStore : public Store {
 public:
  LockedLocalStore(std::mutex& mu, std::unique_ptr<TcpStore>& local) : mu_(mu), local_(local) {}
  void set(const std::string& key, const Bytes& value, Deadline deadline) override {
    std::lock_guard<std::mutex> lock(mu_);
    localStore(local_).set(key, value, deadline);
  }
  Bytes get(const std::string& key, Deadline deadline) override {
    std::lock_guard<std::mutex> lock(mu_);
    return localStore(local_).get(key, deadline);
  }
  int64_t add(const std::string& key, int64_t delta, Deadline deadline) override {
    std::lock_guard<std::mutex> lock(mu_);
    return localStore(local_).add(key, delta, deadline);
  }
  void wait(const std::vector<std::string>& keys, Deadline deadline) override {
    std::lock_guard<std::mutex> lock(mu_);
    localStore(local_).wait(keys, deadline);
  }

 private:
  std::mutex& mu_;
  std::unique_ptr<TcpStore>& local_;
};
}  // namespace

std::shared_ptr<Store> servedStore(RendezvousServer& server) {
  return std::make_shared<LockedLocalStore>(server.impl_->mu, server.impl_->local);
}

void RendezvousServer::set(const std::string& key, const std::string& value) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  localStore(impl_->local).set(key, toBytes(value), Deadline::never());
}

int64_t RendezvousServer::add(const std::string& key, int64_t delta) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return localStore(impl_->local).add(key, delta, Deadline::never());
}

std::optional<std::string> RendezvousServer::tryGet(const std::string& key) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  try {
    return toString(localStore(impl_->local).get(key, Deadline::after(std::chrono::milliseconds(0))));
  } catch (const Timeout&) {
    return std::nullopt;
  }
}

struct RendezvousClient::Impl {
  std::unique_ptr<TcpStore> store;
};

RendezvousClient::RendezvousClient(const std::string& host, uint16_t port, const std::string& secret,
                                   std::chrono::milliseconds connectTimeout)
    : impl_(std::make_unique<Impl>()) {
  try {
    impl_->store = std::make_unique<TcpStore>(host, port, secret, Deadline::after(connectTimeout));
  } catch (const StoreSecretRefused& e) {
    throw RendezvousRefused(e.what());
  }
}

RendezvousClient::~RendezvousClient() = default;

void RendezvousClient::set(const std::string& key, const std::string& value) {
  impl_->store->set(key, toBytes(value), Deadline::never());
}

int64_t RendezvousClient::add(const std::string& key, int64_t delta) {
  return impl_->store->add(key, delta, Deadline::never());
}

std::optional<std::string> RendezvousClient::get(const std::string& key, std::chrono::milliseconds timeout) {
  try {
    return toString(impl_->store->get(key, Deadline::after(timeout)));
  } catch (const Timeout&) {
    return std::nullopt;
  }
}

}  // namespace hvd
