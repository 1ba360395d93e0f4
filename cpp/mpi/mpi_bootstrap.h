// Rendezvous through MPI: how a job started by mpirun / mpiexec (or given an mpi4py communicator)
// finds its rendezvous store without horovodrun.
//
// Rank 0 of the communicator starts a TcpStoreServer in-process, on a free port, with a fresh
// random secret; it broadcasts "address, port, secret" with MPI_Bcast over the communicator, and
// every rank connects a TcpStore to it. The secret never leaves the MPI job (it travels over MPI,
// not the environment or the command line). From there on the engine runs as under horovodrun:
// its negotiation and data plane use the shm/tcp transports, authenticated with that secret.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "common/placement.h"
#include "mpi/plugin_api.h"
#include "store/store.h"

namespace hvd::mpi {

struct MpiBootstrapOptions {
  int64_t comm = HVD_MPI_WORLD_COMM;  // Fortran handle of the job's communicator
  bool threadsDisable = false;        // HOROVOD_MPI_THREADS_DISABLE
  bool dataPlane = false;             // HOROVOD_CPU_OPERATIONS=mpi (see initMpi)
  // Bounds the rendezvous, including the wait for every rank to call init (a rank that never
  // does is named in the error).
  std::chrono::milliseconds timeout{30000};
  std::string interface;  // HOROVOD_GLOO_IFACE: the address rank 0 publishes when hosts differ
};

// The job as MPI sees it, and the store to rendezvous on.
struct MpiJob : Placement {
  std::string secret;
  std::shared_ptr<Store> store;  // rank 0's also owns the server
};

// Collective over options.comm: every rank of it must call it. Throws hvd::Error naming the cause
// (MPI not loadable, this rank not in the communicator, rank 0's server not starting, the store
// not reachable by the deadline) on every rank that can tell.
MpiJob bootstrapOverMpi(const MpiBootstrapOptions& options);

}  // namespace hvd::mpi
