// The MPI queries of horovod.h, over the process-wide MPI state of mpi/mpi_library.h.
#include "horovod/horovod.h"
#include "mpi/mpi_library.h"

namespace hvd {

bool mpiBuilt() { return !mpi::builtFlavors().empty(); }

bool mpiEnabled() { return mpi::mpiState().enabled; }

bool mpiThreadsSupported() {
  const mpi::MpiState state = mpi::mpiState();
  return state.enabled && state.threadsMultiple;
}

std::string mpiDescription() {
  const mpi::MpiState state = mpi::mpiState();
  if (!state.enabled) return "";
  return state.flavor + ": " + state.libraryVersion;
}

}  // namespace hvd
