// CpuBackend: Horovod's own host-memory data plane (registered as "cpu", the default for host
// memory): runs one agreed response through the Communicator it owns for its process set, over
// the job's transport (the shm/tcp algorithms of collectives/).
//
// Copies are kept to the minimum: a single allreduce is reduced in place in the caller's output
// buffer (one input->output copy when not in place); fused responses go through the persistent
// fusion buffer (copy in, one collective, copy out), or over the tensors where they lie when the
// algorithm can. Only allgather/alltoall outputs are allocated per operation (their size is known
// only after negotiation).
//
// Knobs: the allreduce crossover and the hierarchical switch reach its Communicator (the
// algorithm choice); the others are the engine's.
//
// Engine thread only. Transport/collective failures propagate as thrown hvd::Errors.
#pragma once

#include <vector>

#include "backends/host_backend.h"
#include "collectives/collectives.h"
#include "collectives/communicator.h"

namespace hvd::backends {

class CpuBackend : public HostBackend<CpuBackend> {
 public:
  // Builds the communicator over context.set's members (no communication: shared spaces and
  // placement are agreed on first use) with the knobs in context.knobs.
  explicit CpuBackend(const BackendContext& context);
  void applyKnobs(const engine::Knobs& knobs) override;

 private:
  friend class HostBackend<CpuBackend>;
  void allreduce(const Response& r, ProcessSet& set, const std::vector<Entry*>& entries);
  // Adasum over the communicator's point-to-point exchange (collectives/adasum.h).
  void adasum(const Response& r, ProcessSet& set, const std::vector<Entry*>& entries);
  void allgather(const Response& r, ProcessSet& set, const std::vector<Entry*>& entries);
  void broadcast(const Response& r, ProcessSet& set, const std::vector<Entry*>& entries);
  void alltoall(const Response& r, ProcessSet& set, const std::vector<Entry*>& entries);
  void reducescatter(const Response& r, ProcessSet& set, const std::vector<Entry*>& entries);
  void barrier(const Response& r, ProcessSet& set);

  Communicator comm_;
  std::vector<collectives::Piece> pieces_;  // a fused allreduce's tensors (scratch)
  // Whether the first run over the members' shared outputs was logged (Debug).
  bool loggedSharedInPlace_ = false;
  bool loggedSharedAllgather_ = false;
};

}  // namespace hvd::backends
