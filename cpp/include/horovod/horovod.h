// Public C++ API of the Horovod core.
//
// A program calls hvd::init() once per process (under horovodrun, or alone as a single rank),
// then issues collectives on host buffers. Every collective has an asynchronous form returning a
// Work handle and a synchronous form that waits on it. All functions are thread-safe; the
// engine's background thread does the negotiation and the communication, or the thread that
// waits for an operation does it itself when the engine is free (HOROVOD_CALLER_PROGRESS_US).
//
// Matching across ranks is by name: two ranks' requests with the same name (in the same process
// set) are the same collective. A name may be reused once the previous operation with that name
// has completed on this rank.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "horovod/errors.h"
#include "horovod/operation.h"
#include "horovod/types.h"

namespace hvd {

// ---- Lifecycle and topology --------------------------------------------------------------------

// Joins the job described by the environment (HOROVOD_RANK, HOROVOD_SIZE, ... and the rendezvous
// address set by horovodrun; a single rank when none is set). Blocks until every rank has
// joined. A second call while initialized does nothing. Throws InvalidArgument for a bad
// HOROVOD_* value, StoreError/Timeout when the rendezvous fails.
void init(const InitOptions& options = {});
// Stops the engine on every rank; pending operations fail with Aborted. init() may follow.
void shutdown();
bool isInitialized();
// Collectives issued before init() throw Error("Horovod has not been initialized; use
// hvd.init()."); after shutdown() (until the next init()) they throw Aborted with Horovod's
// shutdown message. Topology and process-set queries throw InvalidArgument in both cases.

int rank();
int size();
int localRank();
int localSize();
int crossRank();
int crossSize();
bool isHomogeneous();

// ---- Elastic jobs --------------------------------------------------------------------------------

// Under horovodrun's elastic driver: the round this process joined at its last init() (0, 1, ...;
// -1 in a static job), and the host-set changes the driver announced since that round formed
// (`latest`: index of the newest change, 0 if none; `flags`: 1 hosts removed | 2 hosts added).
// The store round trip makes this cheap but not free: call it per commit, not per step.
// InvalidArgument when not initialized.
struct ElasticHostUpdates {
  int64_t round = -1;
  int64_t latest = 0;
  int flags = 0;
};
ElasticHostUpdates elasticHostUpdates();

// ---- MPI (docs/mpi.md) ---------------------------------------------------------------------------

// Whether MPI plugins were built with this core (Open MPI and/or MPICH).
bool mpiBuilt();
// Whether this process initialized MPI or found it initialized, and rendezvoused through it
// (launched by mpirun/mpiexec, init with an MPI communicator, HOROVOD_CONTROLLER=mpi). Stays true
// after shutdown: MPI stays initialized until the process exits.
bool mpiEnabled();
// Whether MPI runs with MPI_THREAD_MULTIPLE; false while MPI is not enabled.
bool mpiThreadsSupported();
// "openmpi" / "mpich" and MPI_Get_library_version's first line, or "" while MPI is not enabled.
std::string mpiDescription();

// ---- GPUs (docs/gpu.md) --------------------------------------------------------------------------

// Whether the CUDA backend was compiled into this core (nvcc was found at build time). It may still
// be unusable on this machine: cudaLibraries() says what loading found.
bool cudaBuilt();
// The NCCL version code (NCCL's NCCL_VERSION_CODE, e.g. 23203 for 2.32.3) of the nccl.h the CUDA
// backend was compiled against, 0 when it was not built.
int ncclBuilt();
// What loading the CUDA runtime, NCCL and Horovod's kernel library found, as (key, value) pairs:
// runtime, nccl, kernels (paths opened), error, nccl_error (why not; "" when loaded), and when
// the runtime loaded runtime_version, driver_version, device_count, nccl_version. Loads them on
// the first call (once per process). Empty when the CUDA backend was not built.
std::vector<std::pair<std::string, std::string>> cudaLibraries();

// ---- Timeline ----------------------------------------------------------------------------------

// A Chrome-trace timeline of the engine's work, written by rank 0 (docs/timeline.md). init()
// starts one when HOROVOD_TIMELINE names a file. startTimeline() starts writing `path` (on rank 0;
// other ranks do nothing), closing a timeline already being written; it returns once the new
// file is open. It requires HOROVOD_TIMELINE to have been set (to a path or DYNAMIC) at init:
// InvalidArgument otherwise, and when not initialized; Error when the file cannot be opened.
void startTimeline(const std::string& path, bool markCycles = false);
// Stops the timeline and completes its file. No timeline running: logs and returns.
// InvalidArgument when not initialized.
void stopTimeline();

// ---- Process sets ------------------------------------------------------------------------------

// Collective over all ranks, issued in the same order everywhere. Returns the new set's id.
int addProcessSet(std::vector<int> ranks);
// Collective. Returns false for the global set or an unknown id.
bool removeProcessSet(int processSetId);
// Sorted global ranks of a set; throws InvalidArgument for an unknown id.
std::vector<int> processSetRanks(int processSetId);
// Ids of the registered sets, ascending (0 first).
std::vector<int> processSetIds();

// ---- Shared buffers ----------------------------------------------------------------------------

// A zero-filled tensor in memory the other ranks on this host can map (an anonymous memfd
// segment owned by this process; nothing is named in /dev/shm), 64-byte (page) aligned, freed
// when the last copy of the returned OwnedTensor (its `storage`) goes. An allreduce whose input
// and output are the same range inside such a buffer, on every rank of a process set that lies
// on one host, runs zero-copy: each rank reduces its slice of all ranks' buffers in place and
// writes the result into every rank's buffer (bitwise identical everywhere). Anything else
// (other ranks using ordinary memory, several hosts, tcp-only transport, Join) takes the normal
// path, so callers never need two code paths. Works before init(); thread-safe.
// Throws std::bad_alloc when memory is exhausted.
OwnedTensor allocateShared(DataType dtype, std::vector<int64_t> shape);

// ---- Introspection (tests, benchmarks) ----------------------------------------------------------

// How many collectives this process's engine ran since its last init(), by the collective
// backend that ran them and the algorithm it used: the names its collective events carry (the
// timeline's "algorithm"). Backends: "cpu" (Horovod's shm/tcp data plane), "mpi"
// (HOROVOD_CPU_OPERATIONS=mpi). Algorithms: the cpu allreduce's table ("shm_inplace",
// "shm_direct", "ring", ...; "local" for a set of one), "allgatherv", "shm_outputs" (allgather
// into shared outputs), "broadcast", "alltoallv", "reducescatter", "barrier"; mpi's
// "mpi_allreduce", "mpi_allgatherv", "mpi_bcast", "mpi_alltoallv", "mpi_reduce_scatter",
// "mpi_barrier". A fused response is one collective. One record per pair that ran at least once,
// in order of first use; empty when the engine is not initialized.
struct CollectiveCount {
  std::string backend;
  std::string algorithm;
  uint64_t count = 0;
};
std::vector<CollectiveCount> engineCounters();

// ---- Collectives (asynchronous) ----------------------------------------------------------------

// out = postscale * OP_ranks(prescale * in). `out` may be `in` (in place). Average divides by
// the set size after the sum.
WorkPtr allreduceAsync(const TensorView& in, const TensorView& out, const Options& options);
// Members are negotiated as one unit and named "<name>_<i>of<n>" (i from 1).
WorkPtr groupedAllreduceAsync(const std::vector<TensorView>& in, const std::vector<TensorView>& out,
                              const Options& options);
// Concatenation along dim 0 in set-rank order; output allocated by the engine (Work::outputs()).
WorkPtr allgatherAsync(const TensorView& in, const Options& options);
WorkPtr groupedAllgatherAsync(const std::vector<TensorView>& in, const Options& options);
// Overwrites `tensor` on every rank but options.root with root's contents.
WorkPtr broadcastAsync(const TensorView& tensor, const Options& options);
// Rows of dim 0 go to set ranks by options.splits; output allocated by the engine.
WorkPtr alltoallAsync(const TensorView& in, const Options& options);
// Reduce, then this rank keeps its block of dim 0 (rank r: d/n+1 rows if r < d%n, else d/n).
// `out` must have that shape. Only kSum and kAverage.
WorkPtr reducescatterAsync(const TensorView& in, const TensorView& out, const Options& options);
WorkPtr groupedReducescatterAsync(const std::vector<TensorView>& in, const std::vector<TensorView>& out,
                                  const Options& options);
WorkPtr barrierAsync(int processSet = 0);
// Declares this rank out of data; completes when every rank has joined (global set only).
WorkPtr joinAsync();

// ---- Collectives (synchronous) -----------------------------------------------------------------

void allreduce(const TensorView& in, const TensorView& out, const Options& options);
OwnedTensor allgather(const TensorView& in, const Options& options);
void broadcast(const TensorView& tensor, const Options& options);
OwnedTensor alltoall(const TensorView& in, const Options& options, std::vector<int32_t>* receivedSplits = nullptr);
void reducescatter(const TensorView& in, const TensorView& out, const Options& options);
void barrier(int processSet = 0);
int join();

}  // namespace hvd
