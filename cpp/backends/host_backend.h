// HostBackend: the shared base of the collective backends that work in host memory (the CPU
// one over Horovod's own algorithms, the MPI one; a device backend such as CUDA reuses the same
// pieces). It holds what they all do alike, so a backend is only its collectives:
//
//  * dispatch: run() switches on the response's kind and calls the backend's allreduce,
//    allgather, broadcast, alltoall, reducescatter or barrier directly (CRTP: no virtual call
//    beyond CollectiveBackend::run itself);
//  * events: started()/ended() around each collective and notifyIf() for fusion copies, named
//    with the backend's name; ended() also counts the collective by (backend, algorithm)
//    (engine/collective_counters.h), so counters and events always agree;
//  * what the Runtime lends (HostResources: fusion buffer, output pool), and the layout of fused
//    responses in the fusion buffer (engine/fused_layout.h), which every backend packs alike.
//
// A backend derives as `class X : public HostBackend<X>`, befriends HostBackend<X>, and defines
//   void allreduce(const Response&, ProcessSet&, const std::vector<Entry*>&);
//   ... allgather, broadcast, alltoall, reducescatter (same signature) ...
//   void barrier(const Response&, ProcessSet&);
// each of which calls ended() exactly once, after its collective ran, naming the algorithm.
//
// Threads: the engine's (backend.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/check.h"
#include "engine/backend.h"
#include "engine/collective_counters.h"
#include "engine/host_resources.h"
#include "engine/observer.h"
#include "engine/process_set_table.h"
#include "engine/tensor_queue.h"
#include "horovod/errors.h"

namespace hvd::backends {

using engine::BackendContext;
using engine::EngineEventKind;
using engine::Entry;
using engine::Kind;
using engine::ProcessSet;
using engine::Response;

// buf[0..count) *= factor (nothing when factor is 1 or count is 0).
void scale(void* buf, size_t count, DataType dtype, double factor);
inline uint8_t* bytesOf(void* p) { return static_cast<uint8_t*>(p); }

// The part of HostBackend that does not depend on the backend's type.
class HostBackendBase : public engine::CollectiveBackend {
 public:
  const char* name() const final { return name_; }
  // The six data kinds: allreduce, allgather, broadcast, alltoall, reducescatter, barrier. A
  // backend lacking one overrides this (BackendTable then fails such responses by name before
  // run(); the backend still defines the method, throwing).
  bool supports(Kind kind) const override;

 protected:
  // `name`: a static string (counters and events keep the pointer). `completion`: see
  // engine::Completion (a device backend may defer it).
  HostBackendBase(const char* name, const BackendContext& context,
                  engine::Completion completion = engine::Completion::kInRun);

  bool watching(EngineEventKind kind) const { return observers_.wants(kind); }
  // Publishes `kind` for response `r` unconditionally; timeNs 0 = now.
  void notify(EngineEventKind kind, const Response& r, int64_t bytes, const char* algorithm, int64_t timeNs = 0) const;
  // notify() when someone watches `kind` (the arguments are evaluated either way: keep them cheap).
  void notifyIf(EngineEventKind kind, const Response& r, int64_t bytes, const char* algorithm) const {
    if (watching(kind)) [[unlikely]]
      notify(kind, r, bytes, algorithm);
  }
  // kCollectiveStart, when watched. `algorithm` may be null when it is known only once it ran.
  void started(const Response& r, int64_t bytes, const char* algorithm) const {
    notifyIf(EngineEventKind::kCollectiveStart, r, bytes, algorithm);
  }
  // The collective of `r` ran `algorithm` (a static string): counted, and kCollectiveEnd when
  // watched. Exactly once per collective.
  void ended(const Response& r, int64_t bytes, const char* algorithm) {
    if (algorithm != lastAlgorithm_) [[unlikely]] {
      HVD_CHECK(algorithm != nullptr) << name_ << " backend: a collective ended without naming its algorithm";
      lastCounter_ = &counters_.counter(name_, algorithm);
      lastAlgorithm_ = algorithm;
    }
    engine::CollectiveCounters::increment(*lastCounter_);
    notifyIf(EngineEventKind::kCollectiveEnd, r, bytes, algorithm);
  }

  // A fused response's copy-in: packs `entries` into the fusion buffer (`total` bytes, laid out
  // as engine/fused_layout.h says), scaled by the response's prescale factor, between the
  // kFusionCopyIn events. Returns the buffer (valid until the fusion buffer's next reserve).
  uint8_t* packFused(const Response& r, const std::vector<Entry*>& entries, size_t total, DataType dtype);
  // Its copy-out from `buf` into the entries' outputs, between the kFusionCopyOut events.
  void unpackFused(const Response& r, const std::vector<Entry*>& entries, const uint8_t* buf, size_t total);

  engine::HostResources& host_;
  const engine::ObserverHub& observers_;

 private:
  const char* const name_;
  engine::CollectiveCounters& counters_;
  // The counter of the last algorithm ended(): a training loop's collectives repeat it.
  const char* lastAlgorithm_ = nullptr;
  engine::CollectiveCounters::Counter* lastCounter_ = nullptr;
};

template <class Backend>
class HostBackend : public HostBackendBase {
 public:
  void run(const Response& r, ProcessSet& set, const std::vector<Entry*>& entries) final {
    HVD_CHECK(set.myIndex >= 0) << "executing a response of process set " << set.id << " on a non-member";
    Backend& self = static_cast<Backend&>(*this);
    switch (r.params.kind) {
      case Kind::kAllreduce: self.allreduce(r, set, entries); return;
      case Kind::kAllgather: self.allgather(r, set, entries); return;
      case Kind::kBroadcast: self.broadcast(r, set, entries); return;
      case Kind::kAlltoall: self.alltoall(r, set, entries); return;
      case Kind::kReducescatter: self.reducescatter(r, set, entries); return;
      case Kind::kBarrier: self.barrier(r, set); return;
      default: break;
    }
    throw Error(std::string("The ") + name() + " collective backend has no data operation for response kind " +
                std::string(engine::kindName(r.params.kind)));
  }

 protected:
  using HostBackendBase::HostBackendBase;
};

}  // namespace hvd::backends
