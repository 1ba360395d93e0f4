// Executor: the CPU collective backend (engine/backend.h, registered as "cpu"): runs one agreed
// response on host memory through its process set's Communicator (the shm/tcp algorithms of
// collectives/).
//
// Copies are kept to the minimum: a single allreduce is reduced in place in the caller's output
// buffer (one input->output copy when not in place); fused responses go through the persistent
// fusion buffer (copy in, one collective, copy out). Only allgather/alltoall outputs are
// allocated per operation (their size is known only after negotiation).
//
// Engine thread only (whoever runs the engine: runtime.h). Transport/collective failures propagate as thrown hvd::Errors.
#pragma once

#include <atomic>
#include <memory>
#include <vector>

#include "collectives/collectives.h"
#include "engine/backend.h"
#include "engine/fused_layout.h"
#include "engine/fusion.h"
#include "engine/host_resources.h"
#include "engine/message.h"
#include "engine/observer.h"
#include "engine/process_set_table.h"
#include "engine/tensor_queue.h"

namespace hvd::engine {

class Executor : public CollectiveBackend {
 public:
  // `host`: the Runtime's fusion buffer, output pool and counters (host_resources.h);
  // `observers`: where fusion-copy and collective events go (observer.h). Both outlive this
  // executor.
  Executor(HostResources& host, const ObserverHub& observers) : host_(host), observers_(observers) {}

  const char* name() const override { return "cpu"; }
  // Any data kind: allreduce, allgather, broadcast, alltoall, reducescatter, barrier.
  bool supports(Kind kind) const override;
  void run(const Response& response, ProcessSet& set, const std::vector<Entry*>& entries) override;

 private:
  bool watching(EngineEventKind kind) const { return observers_.wants(kind); }
  // Publishes `kind` for response `r`; timeNs 0 = now.
  void notify(EngineEventKind kind, const Response& r, int64_t bytes, const char* algorithm, int64_t timeNs = 0) const;
  // notify() when someone watches `kind` (the arguments are evaluated either way: keep them cheap).
  void notifyIf(EngineEventKind kind, const Response& r, int64_t bytes, const char* algorithm) const {
    if (watching(kind)) [[unlikely]] notify(kind, r, bytes, algorithm);
  }
  // After an allreduce of `bytes` ran on `comm`: its start (when `startNs` is set: for paths that
  // decide only as they run whether they apply) and end events, naming the algorithm.
  void allreduceRan(const Response& r, Communicator& comm, size_t bytes, int64_t startNs,
                    const char* algorithm = nullptr) const;
  void allreduce(const Response& r, Communicator& comm, const std::vector<Entry*>& entries);
  void allgather(const Response& r, Communicator& comm, const std::vector<Entry*>& entries);
  void broadcast(const Response& r, ProcessSet& set, const std::vector<Entry*>& entries);
  void alltoall(const Response& r, Communicator& comm, const std::vector<Entry*>& entries);
  void reducescatter(const Response& r, Communicator& comm, const std::vector<Entry*>& entries);

  HostResources& host_;
  const ObserverHub& observers_;
  std::vector<collectives::Piece> pieces_;  // a fused allreduce's tensors (scratch)
};

}  // namespace hvd::engine
