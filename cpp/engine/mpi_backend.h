// The MPI data plane (HOROVOD_CPU_OPERATIONS=mpi): a collective backend (engine/backend.h,
// registered as "mpi") that runs host-memory collectives with MPI's own (MPI_Allreduce,
// MPI_Allgatherv, MPI_Bcast, MPI_Alltoallv, MPI_Reduce_scatter, MPI_Barrier) through the MPI
// plugin's table (mpi/plugin_api.h).
//
// Choice: the factory ranks above the CPU backend and accepts every process set of host memory
// while the data plane is selected (selectMpiDataPlane, at init), else it declines and the shm/tcp
// backend runs. Each process set gets its own communicator, created from the job's communicator
// over the set's ranks (MPI_Comm_create_group, collective over the members, when the set's first
// response runs) and freed when the set is removed or the Runtime shuts down; so Horovod's traffic
// never shares a communicator with the application's (mpi4py on MPI_COMM_WORLD).
//
// Semantics match the CPU backend's: average is a sum then a postscale of 1/size; prescale and
// postscale are applied by the core's kernels; float16, bfloat16 and bool are reduced by the
// core's kernel inside user-defined MPI operations (MPI-3 has no such reductions); fused responses
// stage through the fusion buffer (one MPI call per response). Horovod rank r is rank r of the job's
// communicator (the MPI bootstrap numbers ranks so; init checks it otherwise).
//
// Threads: the engine's (one call at a time; MPI runs at MPI_THREAD_SERIALIZED at least, checked at
// init).
#pragma once

#include <cstdint>

namespace hvd::engine {

// Process-wide (MPI is): whether the backends built from now on use MPI, over the communicator with
// Fortran handle `jobComm` (-1 = MPI_COMM_WORLD). Called by init before the Runtime starts; MPI
// must be initialized through mpi::initMpi when `on`.
void selectMpiDataPlane(bool on, int64_t jobComm);
bool mpiDataPlaneSelected();

}  // namespace hvd::engine
