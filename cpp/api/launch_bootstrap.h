// How a job that horovodrun did not start finds its rendezvous store.
//
//   - an mpi4py communicator given to init, HOROVOD_CONTROLLER=mpi, or a launch by mpirun /
//     mpiexec (Open MPI's OMPI_COMM_WORLD_*, MPICH Hydra's PMI_RANK + MPI_LOCALRANKID) with no
//     rendezvous configured: through MPI (mpi/mpi_bootstrap.h). Rank, size, local and cross
//     placement then come from the communicator, replacing what the environment said;
//   - srun without MPI (SLURM_PROCID, ...): a store hosted by the first task of the step's first
//     node on a port derived from the job and step ids (slurmRendezvous below);
//   - otherwise nullptr: the Runtime's own choice (horovodrun's server, HOROVOD_RENDEZVOUS_DIR, a
//     single rank's memory store).
// Called by init() on the thread that runs it, before the Runtime is built.
#pragma once

#include <memory>
#include <string>

#include "engine/config.h"
#include "horovod/types.h"
#include "store/store.h"

namespace hvd::api {

std::shared_ptr<Store> bootstrapWithoutLauncher(engine::Config& config, const InitOptions& options);

// The first host of a Slurm hostlist ("node[03-05,9],gpu1" -> "node03"); "" for an empty list.
std::string firstSlurmHost(const std::string& hostlist);

// The srun rendezvous port for a job and step: 20000 + (job * 64 + step) mod 12000, below Linux's
// ephemeral range (32768-60999) so that no outgoing connection holds it by chance.
int slurmRendezvousPort(int64_t jobId, int64_t stepId);

}  // namespace hvd::api
