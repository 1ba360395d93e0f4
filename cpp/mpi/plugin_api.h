// The C interface between the core and an MPI plugin (libhorovod_mpi_<flavor>.so).
//
// Open MPI and MPICH differ in ABI (MPI_Comm is a pointer in one and an int in the other), so
// the core is never compiled against an mpi.h. Each MPI found at build time gets its own small
// plugin, compiled with that MPI's headers and linked to its libmpi; the core dlopen()s the one
// matching the job (mpi_library.h) and calls it only through this table. Communicators cross
// this boundary as Fortran handles (MPI_Comm_c2f; mpi4py's Comm.py2f()), which are plain ints in
// every MPI; kWorldComm stands for MPI_COMM_WORLD.
//
// Every function returns 0 on success; otherwise a non-zero value and a message in err
// (NUL-terminated, at most errLen bytes). Calls come from the thread that runs hvd.init(), one at
// a time.
#pragma once

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define HVD_MPI_PLUGIN_ABI 1
#define HVD_MPI_WORLD_COMM (-1)

typedef struct HvdMpiPlugin {
  int abi;              // HVD_MPI_PLUGIN_ABI of the plugin's build
  const char* flavor;   // "openmpi" or "mpich": the headers it was compiled with
  // MPI_Get_library_version of the libmpi actually loaded.
  int (*libraryVersion)(char* out, int outLen);
  // Initializes MPI unless already initialized (by mpi4py, say): MPI_THREAD_MULTIPLE, or
  // MPI_THREAD_SINGLE when threadsDisable. *provided gets the thread level in force (as 0..3 =
  // SINGLE, FUNNELED, SERIALIZED, MULTIPLE); *initializedHere whether this call initialized MPI
  // (the plugin then finalizes it at process exit).
  int (*init)(int threadsDisable, int* provided, int* initializedHere, char* err, int errLen);
  // Rank and size of this process in `comm`. Fails when comm is MPI_COMM_NULL or invalid.
  int (*rankSize)(int64_t comm, int* rank, int* size, char* err, int errLen);
  // Node-local and cross-node placement within `comm` (MPI_COMM_TYPE_SHARED split, then a split
  // by local rank). Collective over comm.
  int (*placement)(int64_t comm, int* localRank, int* localSize, int* crossRank, int* crossSize, char* err,
                   int errLen);
  // MPI_Bcast of `bytes` bytes from `root` over comm. Collective over comm.
  int (*broadcast)(int64_t comm, void* data, int bytes, int root, char* err, int errLen);
} HvdMpiPlugin;

// The one symbol a plugin exports.
const HvdMpiPlugin* hvd_mpi_plugin(void);

#ifdef __cplusplus
}
#endif
