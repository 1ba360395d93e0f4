// The MPI library of this process, reached through a plugin loaded at run time (plugin_api.h).
//
// Nothing here is touched unless a job asks for MPI (launched by mpirun/mpiexec, an mpi4py
// communicator given to init, or HOROVOD_CONTROLLER=mpi): a build with no MPI, or a machine
// without one, never loads a libmpi. MPI is process-wide (one MPI_Init per process), so the
// loaded plugin and what init found are process-wide state too; functions are thread-safe.
#pragma once

#include <string>
#include <vector>

#include "mpi/plugin_api.h"

namespace hvd::mpi {

// The flavors whose plugins were built with this core ("openmpi", "mpich"), in preference order.
std::vector<std::string> builtFlavors();

// What mpiState() reports once MPI has been initialized through a plugin.
struct MpiState {
  bool enabled = false;          // a plugin is loaded and MPI initialized
  std::string flavor;            // the plugin's flavor
  std::string plugin;            // path of the plugin library
  std::string libraryVersion;    // MPI_Get_library_version (first line)
  bool threadsMultiple = false;  // MPI_THREAD_MULTIPLE in force
  int threadLevel = 0;           // in force: 0..3 = SINGLE, FUNNELED, SERIALIZED, MULTIPLE
  bool initializedHere = false;  // Horovod called MPI_Init (and finalizes at exit)
};
MpiState mpiState();

// Loads the plugin matching this process (see chooseFlavor) and initializes MPI through it, once
// per process; later calls return the same plugin. `threadsDisable`: MPI_THREAD_SINGLE instead of
// MPI_THREAD_MULTIPLE (HOROVOD_MPI_THREADS_DISABLE); with `dataPlane` (HOROVOD_CPU_OPERATIONS=mpi)
// threadsDisable asks for MPI_THREAD_SERIALIZED instead. Throws hvd::Error naming the cause and the
// fix: no plugin built, the plugin's libmpi missing or stale (another plugin ABI), MPI_Init failing.
const HvdMpiPlugin& initMpi(bool threadsDisable, bool dataPlane = false);

// The plugin initMpi() loaded, or nullptr before.
const HvdMpiPlugin* loadedPlugin();

// "MPI_THREAD_SERIALIZED" for 2, and so on.
const char* threadLevelName(int level);

// Which plugin fits: the MPI already loaded into the process (mpi4py imported first), else the
// launcher's environment (OMPI_* -> openmpi, PMI_*/MPI_LOCALRANKID (Hydra) -> mpich), else "" (try
// each built flavor in order). Exposed for tests.
std::string chooseFlavor();

}  // namespace hvd::mpi
