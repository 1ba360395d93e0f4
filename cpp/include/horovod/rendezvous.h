// The job's rendezvous service, for programs that start Horovod's workers themselves instead of
// through horovodrun (horovod.ray starts actors, horovod.spark starts Spark tasks). It is the
// store server horovodrun runs (HMAC-SHA256 handshake with the job secret, the bounds on
// unauthenticated connections, the wire format), so workers reach it exactly as they reach
// horovodrun's: HOROVOD_GLOO_RENDEZVOUS_ADDR / _PORT and HOROVOD_SECRET_KEY.
//
// Values are byte strings (std::string, any bytes). Every class here is thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "horovod/errors.h"
#include "horovod/types.h"

namespace hvd {

class Store;

// A worker's place in an elastic round (what its hvd.init() returns as rank, size, ...).
using ElasticSlot = Placement;

// A RendezvousClient's secret does not match the server's (the server closed the connection
// during the handshake). Its message names the server.
class RendezvousRefused : public StoreError {
  using StoreError::StoreError;
};

// Serves one job's store on bindHost:port from a background thread until shutdown() or
// destruction. Refused connections are logged as warnings (at most 5 per 10 s, then a summary).
class RendezvousServer {
 public:
  // port 0: any free port; bindHost "" or "0.0.0.0": every interface. Throws StoreError naming
  // the address when it cannot listen (e.g. the port is in use).
  RendezvousServer(const std::string& bindHost, uint16_t port, const std::string& secret);
  ~RendezvousServer();
  RendezvousServer(const RendezvousServer&) = delete;
  RendezvousServer& operator=(const RendezvousServer&) = delete;

  uint16_t port() const;  // still valid after shutdown()
  // Connections refused for failing the handshake (wrong secret, too slow, flood) so far.
  int64_t refusedConnections() const;
  // Stops serving and closes every connection (parked get/wait requests end). Idempotent. The
  // store operations below throw StoreError afterwards.
  void shutdown();

  // The served store, from this process (the driver's side of the elastic rendezvous). None of
  // these block on other parties: set and add apply at once, tryGet does not wait for the key.
  void set(const std::string& key, const std::string& value);
  // Adds delta to the decimal counter at key (absent = 0) and returns the new value; add(key, 0)
  // reads a counter. Throws StoreError when the key holds something else.
  int64_t add(const std::string& key, int64_t delta);
  // The value of key, or nullopt when it is not set.
  std::optional<std::string> tryGet(const std::string& key);

  // The driver's side of the elastic rendezvous on this store: ElasticRounds
  // (horovod/elastic_rounds.h).

 private:
  // The served store as the core's Store (for ElasticRounds, horovod/elastic_rounds.h); valid
  // until shutdown(), StoreError afterwards. The server must outlive it.
  friend std::shared_ptr<Store> servedStore(RendezvousServer& server);

  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// One process's connection to a RendezvousServer (or horovodrun's), for code that is not an
// engine (a Spark task telling the driver its host). Reconnects as the engine's store does.
class RendezvousClient {
 public:
  // Connects (retrying while the server is not up yet) and authenticates within connectTimeout.
  // Throws RendezvousRefused when the server refuses the secret, StoreError when it cannot be
  // reached in time.
  RendezvousClient(const std::string& host, uint16_t port, const std::string& secret,
                   std::chrono::milliseconds connectTimeout);
  ~RendezvousClient();
  RendezvousClient(const RendezvousClient&) = delete;
  RendezvousClient& operator=(const RendezvousClient&) = delete;

  // No deadline: they return once the server answered (StoreError when it is gone).
  void set(const std::string& key, const std::string& value);
  int64_t add(const std::string& key, int64_t delta);
  // The value of key, waiting up to `timeout` for some party to set it; nullopt after that.
  std::optional<std::string> get(const std::string& key, std::chrono::milliseconds timeout);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace hvd
