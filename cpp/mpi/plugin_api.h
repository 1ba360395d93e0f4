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
// (NUL-terminated, at most errLen bytes). The bootstrap calls come from the thread that runs
// hvd.init(); the data-plane calls (commCreate onwards) from whichever thread runs the engine, one
// at a time (MPI_THREAD_SERIALIZED at least).
//
// Data-plane arguments: `dtype` and `op` are the values of hvd::DataType and hvd::ReduceOp
// (horovod/types.h; op is Sum, Min, Max or Product: average and scaling are the core's). Counts
// are elements for reductions and bytes otherwise; per-rank arrays have one entry per rank of
// the communicator.
#pragma once

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// Bumped whenever the table changes: the core refuses a plugin of another ABI (a stale build).
#define HVD_MPI_PLUGIN_ABI 3
#define HVD_MPI_WORLD_COMM (-1)

// The core's element-wise kernel, dst[i] = dst[i] OP src[i] (dtype, op as above). The plugin
// reduces the types MPI-3 has no reduction for (float16, bfloat16, bool) with it, through
// user-defined MPI operations, so that every backend reduces them alike.
typedef void (*HvdMpiReducer)(void* dst, const void* src, int64_t count, int dtype, int op);

// rendezvousBroadcast's return value when the deadline passed before every rank arrived.
#define HVD_MPI_TIMED_OUT 2

typedef struct HvdMpiPlugin {
  int abi;              // HVD_MPI_PLUGIN_ABI of the plugin's build
  const char* flavor;   // "openmpi" or "mpich": the headers it was compiled with
  // MPI_Get_library_version of the libmpi actually loaded.
  int (*libraryVersion)(char* out, int outLen);
  // Initializes MPI unless already initialized (by mpi4py, say) with the thread level `wanted`
  // (0..3 = SINGLE, FUNNELED, SERIALIZED, MULTIPLE). *provided gets the thread level in force (same
  // scale); *initializedHere whether this call initialized MPI (the plugin then finalizes it at
  // process exit, unless a collective was abandoned: see rendezvousBroadcast).
  int (*init)(int wanted, int* provided, int* initializedHere, char* err, int errLen);
  // Rank and size of this process in `comm`. Fails when comm is MPI_COMM_NULL or invalid.
  int (*rankSize)(int64_t comm, int* rank, int* size, char* err, int errLen);
  // Node-local and cross-node placement within `comm` (MPI_COMM_TYPE_SHARED split, then a split
  // by local rank). Collective over comm.
  int (*placement)(int64_t comm, int* localRank, int* localSize, int* crossRank, int* crossSize, char* err, int errLen);
  // MPI_Bcast of `bytes` bytes from `root` over comm. Collective over comm.
  int (*broadcast)(int64_t comm, void* data, int bytes, int root, char* err, int errLen);
  // The bootstrap's broadcast, bounded: every non-root rank reports to `root` (point to point),
  // then `bytes` are broadcast from root (MPI_Ibcast), each side polling until `timeoutMs` (the
  // others 5 s longer, so that root reports first). On
  // timeout returns HVD_MPI_TIMED_OUT; on root, missing[0..*missingCount) are the ranks that did
  // not report (at most missingCap listed, *missingCount is the full number); on the others
  // *missingCount is -1 (they cannot tell who is missing). The pending requests are abandoned and
  // MPI is then not finalized at exit (it would wait for them).
  int (*rendezvousBroadcast)(int64_t comm, void* data, int bytes, int root, int64_t timeoutMs, int* missing,
                             int missingCap, int* missingCount, char* err, int errLen);

  // ---- data plane ----
  // Installs the core's kernel for the types MPI cannot reduce; before any reduction.
  void (*setReducer)(HvdMpiReducer reducer);
  // Every rank's `value` in comm's rank order (MPI_Allgather). Collective over comm.
  int (*allgatherInt)(int64_t comm, int value, int* out, char* err, int errLen);
  // A new communicator of the processes of `parent` with ranks[0..n) (ascending, in parent's
  // numbering), the new rank order following them: MPI_Comm_create_group, collective over those
  // processes only, `tag` distinguishing concurrent creations. *out is its handle.
  int (*commCreate)(int64_t parent, const int* ranks, int n, int tag, int64_t* out, char* err, int errLen);
  // Frees a communicator from commCreate (MPI_Comm_free); nothing once MPI is finalized.
  int (*commFree)(int64_t comm, char* err, int errLen);
  // MPI_Allreduce of `count` elements; in == NULL reduces out in place.
  int (*allreduce)(int64_t comm, const void* in, void* out, int64_t count, int dtype, int op, char* err, int errLen);
  // MPI_Allgatherv of bytes: this rank's recvBytes[me] bytes from `in` (NULL: already in place in
  // out), rank p's placed after those of the ranks before it in `out`.
  int (*allgatherv)(int64_t comm, const void* in, void* out, const int64_t* recvBytes, char* err, int errLen);
  // MPI_Bcast of `bytes` bytes from root (any size).
  int (*broadcastBytes)(int64_t comm, void* data, int64_t bytes, int root, char* err, int errLen);
  // MPI_Alltoallv of bytes: sendBytes[p] to rank p from `in` (packed in rank order); recvBytes[p]
  // from rank p into `out` (packed in rank order).
  int (*alltoallv)(int64_t comm, const void* in, const int64_t* sendBytes, void* out, const int64_t* recvBytes,
                   char* err, int errLen);
  // MPI_Reduce_scatter: rank p gets counts[p] reduced elements (in holds all of them in rank
  // order); this rank's go to out.
  int (*reducescatter)(int64_t comm, const void* in, void* out, const int64_t* counts, int dtype, int op, char* err,
                       int errLen);
  // MPI_Barrier.
  int (*barrier)(int64_t comm, char* err, int errLen);
  // MPI_Sendrecv of bytes with one peer: sendBytes from `send` to `peer` while recvBytes from
  // `peer` arrive in `recv` (either may be 0), in messages of at most chunkBytes (and INT_MAX)
  // bytes; the peer makes the mirror call. Used by Adasum (collectives/adasum.h).
  int (*sendRecv)(int64_t comm, int peer, const void* send, int64_t sendBytes, void* recv, int64_t recvBytes,
                  int64_t chunkBytes, char* err, int errLen);
} HvdMpiPlugin;

// The one symbol a plugin exports.
const HvdMpiPlugin* hvd_mpi_plugin(void);

#ifdef __cplusplus
}
#endif
