// MpiBackend: the MPI data plane (HOROVOD_CPU_OPERATIONS=mpi), registered as "mpi": runs
// host-memory collectives with MPI's own (MPI_Allreduce, MPI_Allgatherv, MPI_Bcast,
// MPI_Alltoallv, MPI_Reduce_scatter, MPI_Barrier; Adasum over MPI_Sendrecv) through the MPI plugin's table
// (mpi/plugin_api.h).
//
// Choice: the factory ranks above the CPU backend and accepts every process set of host memory
// when the job's Config asks for the data plane (Config::cpuOperationsMpi, checked against the
// launch at init by api/launch_bootstrap), else it declines and the CPU backend runs. Each
// backend owns its process set's communicator, created from the job's communicator
// (Config::mpiComm) over the set's ranks (MPI_Comm_create_group, collective over the members,
// when the set's first response runs) and freed when the set is removed or the Runtime shuts
// down; so Horovod's traffic never shares a communicator with the application's (mpi4py on
// MPI_COMM_WORLD).
//
// Semantics match the CPU backend's: average is a sum then a postscale of 1/size; prescale and
// postscale are applied by the core's kernels; float16, bfloat16 and bool are reduced by the
// core's kernel inside user-defined MPI operations (MPI-3 has no such reductions); fused responses
// stage through the fusion buffer (one MPI call per response). Horovod rank r is rank r of the
// job's communicator (the MPI bootstrap numbers ranks so; init checks it otherwise).
//
// Knobs: none apply (MPI chooses its own algorithms; fusion and the engine's waits are the
// engine's), which applyKnobs states.
//
// Threads: the engine's (one call at a time; MPI runs at MPI_THREAD_SERIALIZED at least, checked at
// init).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backends/host_backend.h"
#include "mpi/plugin_api.h"

namespace hvd::backends {

class MpiBackend : public HostBackend<MpiBackend> {
 public:
  // Creates the set's communicator (collective over its members). Throws Error when MPI fails.
  MpiBackend(const HvdMpiPlugin& plugin, const BackendContext& context);
  ~MpiBackend() override;
  // MPI picks its algorithms itself: the knobs (crossover, hierarchical) have no hold on it.
  void applyKnobs(const engine::Knobs&) override {}

 private:
  friend class HostBackend<MpiBackend>;
  void allreduce(const Response& r, ProcessSet& set, const std::vector<Entry*>& entries);
  // Adasum (collectives/adasum.h) over MPI_Sendrecv on the set's communicator, in messages of at
  // most HOROVOD_ADASUM_MPI_CHUNK_SIZE bytes.
  void adasum(const Response& r, ProcessSet& set, const std::vector<Entry*>& entries);
  void allgather(const Response& r, ProcessSet& set, const std::vector<Entry*>& entries);
  void broadcast(const Response& r, ProcessSet& set, const std::vector<Entry*>& entries);
  void alltoall(const Response& r, ProcessSet& set, const std::vector<Entry*>& entries);
  void reducescatter(const Response& r, ProcessSet& set, const std::vector<Entry*>& entries);
  void barrier(const Response& r, ProcessSet& set);
  // Throws Error naming the set, `what` and MPI's message when rc != 0.
  void check(int rc, const std::string& what) const;

  const HvdMpiPlugin& mpi_;
  const int32_t setId_;
  int64_t comm_ = 0;
  const int64_t adasumChunkBytes_;
  mutable char err_[1024] = {0};
};

}  // namespace hvd::backends
