// Config: every runtime knob of the engine, read once at init from an EnvLookup (the process
// environment, or a per-rank map in tests). The HOROVOD_* variables are declared as hvd::Param in
// config.cc, each with its default and doc; values are parsed strictly, so a bad value fails
// init with an InvalidArgument naming the variable and the value.
//
// Knobs of features this build does not have (GPU/NCCL, MPI, ...) are accepted and validated;
// when one is set, rank 0 names it in a warning at init. The timeline's and the autotuner's knobs
// are declared with them (timeline/timeline.cc, autotune/autotune_options.cc) and read by the API
// at init.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "common/params.h"
#include "common/placement.h"

namespace hvd::engine {

// Which implementation runs the collectives of device (GPU) tensors: HOROVOD_GPU_OPERATIONS and
// the per-op HOROVOD_GPU_ALLREDUCE, _ALLGATHER, _BROADCAST, _ALLTOALL, _REDUCESCATTER.
//   kAuto  none set: NCCL when every rank of the set can use it, else host-staged
//   kNccl  NCCL (init fails when NCCL cannot be loaded)
//   kHost  staged through host memory and Horovod's own shm/tcp collectives (value HOST, or MPI:
//          Horovod's "through the CPU data plane"; this build has no CUDA-aware MPI path)
enum class GpuOperations : uint8_t { kAuto, kNccl, kHost };
const char* gpuOperationsName(GpuOperations value);  // "auto", "NCCL", "HOST"

// The Placement base is the topology the launcher gave (or mpirun/srun variables mapped to it):
// rank and size always; localRank, localSize, crossRank and crossSize are -1 when it gave none,
// and the Runtime then derives them from the hostnames published at rendezvous.
struct Config : Placement {
  Config() : Placement{.rank = 0, .size = 1, .localRank = -1, .localSize = -1, .crossRank = -1, .crossSize = -1} {}

  // ---- Topology --------------------------------------------------------------------------
  std::string hostname;  // HOROVOD_HOSTNAME, else gethostname()
  // Where rank/size came from: "horovod", "openmpi", "pmi" (MPICH's Hydra), "slurm" (srun) or
  // "default" (single rank).
  std::string launchedBy = "default";
  // Slurm step (srun without MPI): for the rendezvous host and port (api/launch_bootstrap.h).
  int64_t slurmJobId = -1, slurmStepId = -1, slurmNodeId = -1, slurmNumNodes = -1;
  std::string slurmNodeList;

  // ---- Rendezvous -------------------------------------------------------------------------
  std::string rendezvousAddr;  // HOROVOD_GLOO_RENDEZVOUS_ADDR ("" = none)
  int rendezvousPort = -1;     // HOROVOD_GLOO_RENDEZVOUS_PORT
  std::string rendezvousDir;   // HOROVOD_RENDEZVOUS_DIR (FileStore), ours
  std::string secret;          // HOROVOD_SECRET_KEY as given (hex text from horovodrun)
  // HOROVOD_CONTROLLER=mpi: rendezvous through MPI even when not launched by mpirun. The
  // negotiation itself always runs over the engine's own shm/tcp channel.
  bool controllerMpi = false;
  bool mpiThreadsDisable = false;  // HOROVOD_MPI_THREADS_DISABLE
  // HOROVOD_CPU_OPERATIONS=mpi: host-memory collectives run through MPI (backends/mpi/mpi_backend.h)
  // instead of the shm/tcp transports; needs a job that MPI started (checked at init).
  bool cpuOperationsMpi = false;
  // Fortran handle of the MPI communicator the job's ranks form (-1: MPI_COMM_WORLD), set by the
  // MPI bootstrap; the MPI data plane builds its communicators from it.
  int64_t mpiComm = -1;
  // HOROVOD_ADASUM_MPI_CHUNK_SIZE: the largest message of the MPI data plane's Adasum exchanges.
  int64_t adasumMpiChunkBytes = int64_t(1) << 30;

  // ---- Engine -----------------------------------------------------------------------------
  int64_t fusionThreshold = 128 << 20;  // bytes; 0 = no fusion (rounded at init, see roundFusionThreshold)
  int64_t cacheCapacity = 1024;         // response-cache entries per process set; 0 = off
  int64_t allreduceCrossoverBytes = 0;  // HOROVOD_ALLREDUCE_CROSSOVER_BYTES; 0 = the table's own limits
  int64_t burstQuietUs = 2;             // HOROVOD_BURST_QUIET_US: request batching window; 0 = off
  int64_t callerProgressUs = 200;       // HOROVOD_CALLER_PROGRESS_US: waiters may drive; 0 = off
  int64_t callerSpinUs = 1000;          // HOROVOD_CALLER_SPIN_US: a driving waiter polls this long
  bool dynamicProcessSets = false;
  bool disableGroupFusion = false;
  std::chrono::milliseconds timeout{30000};  // HOROVOD_GLOO_TIMEOUT_SECONDS: rendezvous + data plane
  std::string interface;                     // HOROVOD_GLOO_IFACE
  std::string transport = "auto";            // HOROVOD_TRANSPORT: auto|tcp|shm|shm+tcp|local
  std::string threadAffinity;                // HOROVOD_THREAD_AFFINITY (comma list of core ids)
  int64_t numNcclStreams = 1;                // HOROVOD_NUM_NCCL_STREAMS (backends/cuda/nccl_backend.h)
  bool elastic = false;                      // HOROVOD_ELASTIC
  // Elastic jobs under horovodrun (elastic_join.h): the worker's id in the elastic rendezvous, and
  // how long init() waits for the driver to form its next round.
  std::string elasticWorkerId;                          // HOROVOD_ELASTIC_WORKER_ID ("" = static job)
  std::chrono::milliseconds elasticTimeout{600000};     // HOROVOD_ELASTIC_TIMEOUT (s)
  // Filled by joinElasticRound(): the round this Runtime belongs to (-1 = not elastic) and the
  // host updates the driver had announced before it formed.
  int64_t elasticRound = -1;
  int64_t elasticUpdatesSeen = 0;

  // ---- GPU collectives (backends/cuda) ----------------------------------------------------------
  // Every GPU collective of a process set runs through one implementation, so the variables
  // resolve to one value: explicit values that disagree fail init (a per-op variable alone
  // chooses for every op). gpuOperationsSource names the variables that set it ("" = none).
  GpuOperations gpuOperations = GpuOperations::kAuto;
  std::string gpuOperationsSource;
  // HOROVOD_GPU_STAGED_CHUNK_BYTES: host-staged collectives move messages larger than this in
  // chunks of it, overlapping the copies with the collective; 0 = one piece.
  int64_t gpuStagedChunkBytes = int64_t(4) << 20;
  // HOROVOD_HIERARCHICAL_ALLREDUCE: the NCCL backend reduces within each host, across hosts, then
  // gathers within each host (backends/cuda/nccl_hierarchy.h) instead of one flat allreduce.
  bool gpuHierarchicalAllreduce = false;
  // HOROVOD_BATCH_D2D_MEMCOPIES: the NCCL backend's fusion copies run as one batched kernel
  // (true) or one cudaMemcpyAsync per tensor.
  bool gpuBatchD2DMemcopies = true;

  // ---- Set explicitly (autotuning leaves these knobs as they are, as Horovod does) ----------
  struct Pinned {
    bool fusionThreshold = false;     // HOROVOD_FUSION_THRESHOLD
    bool cacheCapacity = false;       // HOROVOD_CACHE_CAPACITY (the response cache on/off)
    bool burstQuiet = false;          // HOROVOD_BURST_QUIET_US
    bool callerProgress = false;      // HOROVOD_CALLER_PROGRESS_US
    bool callerSpin = false;          // HOROVOD_CALLER_SPIN_US
    bool allreduceAlgorithm = false;  // HOROVOD_ALLREDUCE_ALGO (pins the crossover and hierarchical)
    bool allreduceCrossover = false;  // HOROVOD_ALLREDUCE_CROSSOVER_BYTES
    bool hierarchical = false;        // HOROVOD_HIERARCHICAL_ALLREDUCE / _ALLGATHER
  };
  Pinned pinned;

  // ---- Stall inspector (rank 0; stall_inspector.h) -------------------------------------------
  bool stallCheck = true;                             // !HOROVOD_STALL_CHECK_DISABLE
  std::chrono::milliseconds stallCheckTime{60000};    // HOROVOD_STALL_CHECK_TIME_SECONDS
  std::chrono::milliseconds stallShutdownTime{0};     // HOROVOD_STALL_SHUTDOWN_TIME_SECONDS; 0 = never
  // Liveness watch (liveness.h): a rank silent this long is lost. 0 = off.
  std::chrono::milliseconds livenessTimeout{1500};    // HOROVOD_LIVENESS_TIMEOUT_SECONDS

  // Reads every engine variable from `env`. Throws InvalidArgument for a bad value, an
  // unsupported HOROVOD_CONTROLLER / HOROVOD_CPU_OPERATIONS, or an inconsistent topology.
  static Config fromEnvironment(const EnvLookup& env = processEnvironment());

  // Horovod's rule: on homogeneous clusters the threshold is rounded up to a multiple of
  // localSize * 8 * 64 bytes; 0 stays 0.
  static int64_t roundFusionThreshold(int64_t threshold, int localSize, bool homogeneous);
};

// Applies HOROVOD_LOG_LEVEL / HOROVOD_LOG_HIDE_TIME from `env` to the process logger
// (unknown level -> warning, as Horovod).
void applyLogSettings(const EnvLookup& env);

}  // namespace hvd::engine
