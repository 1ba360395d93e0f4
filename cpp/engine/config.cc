#include "engine/config.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <functional>
#include <utility>

#include "collectives/algorithms.h"
#include "common/logging.h"
#include "engine/backend.h"
#include "horovod/errors.h"

namespace hvd::engine {
namespace {

// ---- Topology ------------------------------------------------------------------------------
const Param<int64_t> kRank("HOROVOD_RANK", 0, "Global rank of this process (set by horovodrun).");
const Param<int64_t> kSize("HOROVOD_SIZE", 1, "Number of processes in the job (set by horovodrun).");
const Param<int64_t> kLocalRank("HOROVOD_LOCAL_RANK", -1,
                                "Rank among the processes of this host; derived from hostnames when unset.");
const Param<int64_t> kLocalSize("HOROVOD_LOCAL_SIZE", -1,
                                "Number of processes on this host; derived from hostnames when unset.");
const Param<int64_t> kCrossRank("HOROVOD_CROSS_RANK", -1,
                                "Index of this host among hosts with a process of the same local rank.");
const Param<int64_t> kCrossSize("HOROVOD_CROSS_SIZE", -1, "Number of hosts with a process of this local rank.");
const Param<std::string> kHostname("HOROVOD_HOSTNAME", "",
                                   "Host identity used to group ranks by host (default: gethostname()).");
// Under mpirun / srun without horovodrun.
const Param<int64_t> kOmpiRank("OMPI_COMM_WORLD_RANK", -1, "Open MPI: rank (used when HOROVOD_RANK is unset).");
const Param<int64_t> kOmpiSize("OMPI_COMM_WORLD_SIZE", -1, "Open MPI: size (used when HOROVOD_RANK is unset).");
const Param<int64_t> kOmpiLocalRank("OMPI_COMM_WORLD_LOCAL_RANK", -1, "Open MPI: local rank.");
const Param<int64_t> kOmpiLocalSize("OMPI_COMM_WORLD_LOCAL_SIZE", -1, "Open MPI: local size.");
const Param<int64_t> kPmiRank("PMI_RANK", -1, "MPICH/Hydra: rank (used when HOROVOD_RANK is unset).");
const Param<int64_t> kPmiSize("PMI_SIZE", -1, "MPICH/Hydra: size (used when HOROVOD_RANK is unset).");
const Param<int64_t> kHydraLocalRank("MPI_LOCALRANKID", -1, "MPICH/Hydra: local rank (marks a Hydra launch).");
const Param<int64_t> kHydraLocalSize("MPI_LOCALNRANKS", -1, "MPICH/Hydra: local size.");
const Param<int64_t> kSlurmProcId("SLURM_PROCID", -1, "Slurm srun: rank (used when HOROVOD_RANK is unset).");
const Param<int64_t> kSlurmNTasks("SLURM_NTASKS", -1, "Slurm srun: size (used when HOROVOD_RANK is unset).");
const Param<int64_t> kSlurmStepNTasks("SLURM_STEP_NUM_TASKS", -1,
                                      "Slurm srun: tasks of the step (preferred over SLURM_NTASKS).");
const Param<int64_t> kSlurmLocalId("SLURM_LOCALID", -1, "Slurm srun: local rank.");
const Param<int64_t> kSlurmJobId("SLURM_JOB_ID", -1, "Slurm: job id (srun rendezvous port and key).");
const Param<int64_t> kSlurmStepId("SLURM_STEP_ID", -1, "Slurm: step id (srun rendezvous port and key).");
const Param<int64_t> kSlurmNodeId("SLURM_NODEID", -1,
                                  "Slurm: index of this node in the step (node 0 hosts the srun rendezvous).");
const Param<int64_t> kSlurmStepNumNodes("SLURM_STEP_NUM_NODES", -1, "Slurm: nodes of the step.");
const Param<std::string> kSlurmStepNodeList("SLURM_STEP_NODELIST", "",
                                            "Slurm: nodes of the step; the first hosts the srun rendezvous.");
const Param<std::string> kSlurmJobNodeList("SLURM_JOB_NODELIST", "",
                                           "Slurm: nodes of the job (used when SLURM_STEP_NODELIST is unset).");

// ---- Rendezvous ----------------------------------------------------------------------------
const Param<std::string> kRendezvousAddr("HOROVOD_GLOO_RENDEZVOUS_ADDR", "",
                                         "Address of the rendezvous server run by horovodrun.");
const Param<int64_t> kRendezvousPort("HOROVOD_GLOO_RENDEZVOUS_PORT", -1, "Port of the rendezvous server.");
const Param<std::string> kRendezvousDir(
    "HOROVOD_RENDEZVOUS_DIR", "",
    "Shared directory used as rendezvous store (FileStore) when launched by mpirun/srun without "
    "horovodrun and without HOROVOD_GLOO_RENDEZVOUS_ADDR.");
const Param<std::string> kSecret("HOROVOD_SECRET_KEY", "",
                                 "Per-job secret (hex) set by horovodrun; peers and the rendezvous "
                                 "server authenticate with it.");

// ---- Engine --------------------------------------------------------------------------------
const Param<int64_t> kFusionThreshold(
    "HOROVOD_FUSION_THRESHOLD", 134217728,
    "Max bytes fused into one collective (and fusion-buffer size). 0 disables fusion. Rounded up "
    "to a multiple of local_size*8*64 bytes on homogeneous clusters.");
const Param<double> kCycleTime(
    "HOROVOD_CYCLE_TIME", 1.0,
    "Accepted for compatibility (ms) and checked; setting it warns (rank 0) that it has no effect. The "
    "engine is event-driven: the background thread wakes when work is enqueued or a message arrives and "
    "never sleeps a fixed time; its batching window is HOROVOD_BURST_QUIET_US.");
const Param<int64_t> kBurstQuietUs(
    "HOROVOD_BURST_QUIET_US", 2,
    "Microseconds the background thread waits for further enqueues before it sends a burst of requests "
    "to the coordinator as one message (a step's gradients then cost ~1 bit each on the wire); 0 = send "
    "at once. Each wait is a busy poll, bounded by 200 us per burst.");
const Param<int64_t> kCallerProgressUs(
    "HOROVOD_CALLER_PROGRESS_US", 200,
    "Microseconds the background thread leaves newly enqueued work to the application's threads: a "
    "thread that waits for an operation within that window runs the negotiation and the collectives "
    "itself (one busy thread per rank instead of two); after it, the background thread does (while "
    "callers keep driving, its parks grow up to 1 ms). 0 = the background thread always does.");
const Param<int64_t> kCallerSpinUs(
    "HOROVOD_CALLER_SPIN_US", 1000,
    "Microseconds that a thread waiting for its operation polls for its peers before it sleeps, while "
    "it runs the engine itself (see HOROVOD_CALLER_PROGRESS_US): a peer that answers later than that "
    "finds it asleep, and waking it costs tens of microseconds on a VM. At least HOROVOD_SHM_SPIN_US; "
    "the background thread's waits use only that. 0 = the transport's own spin.");
const Param<int64_t> kCacheCapacity("HOROVOD_CACHE_CAPACITY", 1024,
                                    "Response-cache entries per process set; 0 disables caching.");
const Param<bool> kDynamicProcessSets("HOROVOD_DYNAMIC_PROCESS_SETS", false,
                                      "Allow add_process_set/remove_process_set after init.");
const Param<bool> kDisableGroupFusion("HOROVOD_DISABLE_GROUP_FUSION", false,
                                      "Grouped ops fuse only within their own group.");
const Param<int64_t> kTimeoutSeconds("HOROVOD_GLOO_TIMEOUT_SECONDS", 30,
                                     "Rendezvous and data-plane operation timeout (seconds).");
const Param<std::string> kIface("HOROVOD_GLOO_IFACE", "", "Network interface for the TCP transport.");
const Param<std::string> kController(
    "HOROVOD_CONTROLLER", "gloo",
    "gloo (the built-in controller) or mpi: rendezvous through MPI (initializing it if needed) even when "
    "not launched by mpirun. Either way the negotiation runs over the engine's own shm/tcp channel "
    "(docs/mpi.md).");
const Param<std::string> kCpuOperations(
    "HOROVOD_CPU_OPERATIONS", "gloo",
    "CPU data path: gloo (the engine's shm/tcp transports) or mpi (MPI collectives through the MPI plugin; "
    "the job must be started by mpirun/mpiexec, srun --mpi or horovodrun --mpi, or given a communicator). "
    "ccl is not built: setting it fails init (docs/mpi.md).");
const Param<std::string> kTransport("HOROVOD_TRANSPORT", "auto",
                                    "Transport: auto (shm on one host, tcp across hosts, composite when "
                                    "mixed), tcp, shm, shm+tcp, local (threads of one process).");
const Param<int64_t> kNcclStreams(
    "HOROVOD_NUM_NCCL_STREAMS", 1,
    "CUDA streams per GPU and process set that the NCCL backend spreads collectives over, round robin "
    "(more lets independent collectives overlap on the device).");
const Param<std::string> kThreadAffinity(
    "HOROVOD_THREAD_AFFINITY", "",
    "Comma list of core ids, one per local rank; the background thread of local rank i is pinned "
    "to entry i.");
const Param<bool> kElastic("HOROVOD_ELASTIC", false, "Set by elastic launchers.");
const Param<std::string> kElasticWorkerId(
    "HOROVOD_ELASTIC_WORKER_ID", "",
    "Set by horovodrun's elastic driver: this process's id in the elastic rendezvous (each init() asks "
    "the driver for its rank in the next round).");
const Param<double> kElasticTimeout("HOROVOD_ELASTIC_TIMEOUT", 600.0,
                                    "Elastic jobs: seconds to wait for enough slots after a reset (the driver's "
                                    "--elastic-timeout); a worker waits this long, plus a minute, for its next round.");
const Param<std::string> kLogLevel("HOROVOD_LOG_LEVEL", "warning",
                                   "trace, debug, info, warning, error, fatal (unknown -> warning).");
const Param<bool> kLogHideTime("HOROVOD_LOG_HIDE_TIME", false, "Omit the timestamp from log lines.");

// ---- GPU collectives (backends/cuda) ---------------------------------------------------------
const Param<std::string> kGpuOperations(
    "HOROVOD_GPU_OPERATIONS", "",
    "How GPU tensors' collectives run: NCCL, or HOST (staged through host memory and Horovod's shm/tcp "
    "collectives; MPI is accepted with the same meaning). Unset: NCCL when every rank of a process set "
    "can use it (NCCL loads, no two ranks share a GPU), else HOST. Read at init (docs/gpu.md).");
const Param<std::string> kGpuAllreduce("HOROVOD_GPU_ALLREDUCE", "",
                                       "GPU allreduce implementation (NCCL, HOST or MPI); every GPU op follows "
                                       "it, see HOROVOD_GPU_OPERATIONS (docs/gpu.md).");
const Param<std::string> kGpuAllgather("HOROVOD_GPU_ALLGATHER", "",
                                       "GPU allgather implementation, as HOROVOD_GPU_ALLREDUCE.");
const Param<std::string> kGpuBroadcast("HOROVOD_GPU_BROADCAST", "",
                                       "GPU broadcast implementation, as HOROVOD_GPU_ALLREDUCE.");
const Param<std::string> kGpuAlltoall("HOROVOD_GPU_ALLTOALL", "",
                                      "GPU alltoall implementation, as HOROVOD_GPU_ALLREDUCE.");
const Param<std::string> kGpuReducescatter("HOROVOD_GPU_REDUCESCATTER", "",
                                           "GPU reducescatter implementation, as HOROVOD_GPU_ALLREDUCE.");
const Param<int64_t> kGpuStagedChunkBytes(
    "HOROVOD_GPU_STAGED_CHUNK_BYTES", int64_t(4) << 20,
    "Host-staged GPU collectives: messages larger than this move in chunks of it, so the device-host "
    "copies of one chunk overlap the collective on another; 0 = one piece.");

// ---- Stall inspector (rank 0) --------------------------------------------------------------
const Param<bool> kStallCheckDisable(
    "HOROVOD_STALL_CHECK_DISABLE", false,
    "Turn off the stall inspector: no warnings about tensors submitted by only some ranks, and no "
    "stall shutdown (horovodrun --no-stall-check).");
const Param<double> kStallCheckTime(
    "HOROVOD_STALL_CHECK_TIME_SECONDS", 60.0,
    "Seconds a tensor may wait for the remaining ranks before the coordinator (rank 0) warns, naming "
    "the tensor, the ranks that submitted it and the ranks that did not; repeated every such period "
    "while the stall lasts. Fractions are accepted.");
const Param<double> kLivenessTimeout(
    "HOROVOD_LIVENESS_TIMEOUT_SECONDS", 1.5,
    "Seconds without a sign of life from a rank (its watch thread bumps a counter in the rendezvous "
    "store every sixth of this) after which its peers fail with PeerLost naming it: catches paused, "
    "hung and cut-off ranks whose connections stay open. 0 = off.");
const Param<double> kStallShutdownTime(
    "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", 0.0,
    "Seconds after which a stalled tensor shuts the job down: every rank's pending and later "
    "operations fail with the stall report. 0 = never; ignored (with a warning) when less than "
    "HOROVOD_STALL_CHECK_TIME_SECONDS.");

const Param<bool> kHierAllreduce(
    "HOROVOD_HIERARCHICAL_ALLREDUCE", false,
    "GPU tensors on NCCL: reduce-scatter within each host, allreduce across hosts, allgather within each "
    "host, instead of one flat NCCL allreduce (needs the same number of ranks on every host). CPU "
    "placements choose their hierarchical algorithms automatically.");
const Param<bool> kBatchD2D("HOROVOD_BATCH_D2D_MEMCOPIES", true,
                            "GPU fusion copies as one batched kernel launch (0: one cudaMemcpyAsync per tensor).");

// ---- Knobs of features this build does not have ---------------------------------------------
// Accepted so that scripts written for Horovod start, validated so that a malformed value fails
// init, and, when set, named in a warning at init saying why they change nothing here.
const Param<bool> kHierAllgather("HOROVOD_HIERARCHICAL_ALLGATHER", false, "MPI hierarchical allgather.");
const Param<bool> kTorusAllreduce("HOROVOD_TORUS_ALLREDUCE", false, "NCCL torus allreduce.");
const Param<bool> kAsyncCompletion("HOROVOD_ENABLE_ASYNC_COMPLETION", false, "GPU asynchronous completion.");
const Param<int64_t> kAdasumChunk("HOROVOD_ADASUM_MPI_CHUNK_SIZE", int64_t(1) << 30, "MPI Adasum chunk size.");
const Param<bool> kXlaOps("HOROVOD_ENABLE_XLA_OPS", false, "TensorFlow XLA ops.");
const Param<bool> kNvtx("HOROVOD_DISABLE_NVTX_RANGES", false, "NVTX ranges (GPU profiling).");
const Param<bool> kMpiThreadsDisable(
    "HOROVOD_MPI_THREADS_DISABLE", false,
    "When Horovod initializes MPI (plain mpirun, HOROVOD_CONTROLLER=mpi): MPI_THREAD_SINGLE instead of "
    "MPI_THREAD_MULTIPLE; mpi_threads_supported() is then False.");
const Param<bool> kCclCache("HOROVOD_CCL_CACHE", false, "oneCCL cache hint.");

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::tolower(c); });
  return text;
}

std::string defaultHostname() {
  char name[256] = {0};
  if (gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

// A knob of a feature this build lacks: read (so a malformed value fails init) and, when set,
// named in a warning with the reason it changes nothing.
template <typename T>
void inert(const Param<T>& param, const EnvLookup& env, bool warn, const char* why) {
  (void)param.get(env);
  if (!warn || !param.isSet(env)) return;
  HVD_LOG(Warning) << param.name() << " is set but has no effect in this build: " << why << " (docs/env-vars.md).";
}

// `warn`: this process says so (rank 0 only, so a job prints each warning once).
void checkInertKnobs(const EnvLookup& env, bool warn) {
  inert(kHierAllgather, env, warn,
        "the NCCL backend gathers GPU tensors with one NCCL allgather across hosts, and the CPU "
        "collectives choose a hierarchical allgather by placement");
  inert(kTorusAllreduce, env, warn,
        "Horovod's NCCL torus allreduce is not implemented; HOROVOD_HIERARCHICAL_ALLREDUCE=1 gives the "
        "two-level (within hosts, across hosts) NCCL allreduce");
  inert(kAsyncCompletion, env, warn,
        "GPU collectives always complete asynchronously here: a finalizer thread reports completion, no "
        "framework thread waits for the device");
  inert(kNvtx, env, warn, "this build emits no NVTX ranges (the timeline shows each collective's phases)");
  inert(kXlaOps, env, warn, "it concerns TensorFlow's XLA ops, which this build does not provide");
  inert(kCclCache, env, warn, "this build has no oneCCL backend");
  inert(kCycleTime, env, warn,
        "the engine is event-driven and has no cycle to time (its background thread wakes when work is "
        "enqueued or a message arrives); the window in which it batches requests is HOROVOD_BURST_QUIET_US "
        "(microseconds)");
  (void)kLogHideTime.get(env);
}

int toInt(const Param<int64_t>& param, const EnvLookup& env) { return static_cast<int>(param.get(env)); }

// ---- Topology: which launcher started this process -----------------------------------------

void readSlurmStep(Config& c, const EnvLookup& env) {
  c.slurmJobId = kSlurmJobId.get(env);
  c.slurmStepId = kSlurmStepId.get(env);
  c.slurmNodeId = kSlurmNodeId.get(env);
  c.slurmNumNodes = kSlurmStepNumNodes.get(env);
  c.slurmNodeList = kSlurmStepNodeList.isSet(env) ? kSlurmStepNodeList.get(env) : kSlurmJobNodeList.get(env);
}

// A launcher whose variables give rank and size (and maybe the local placement). The first row
// that detects its launch wins; none: a single rank ("default").
struct Launcher {
  const char* name;  // Config::launchedBy
  bool (*detects)(const EnvLookup& env);
  const Param<int64_t>& rank;
  const Param<int64_t>& size;
  const Param<int64_t>* sizeWhenSet;  // preferred over `size` when set; null: none
  const Param<int64_t>* localRank;    // null: derived at rendezvous
  const Param<int64_t>* localSize;
  void (*readMore)(Config& c, const EnvLookup& env);  // null: nothing else
};

const Launcher kLaunchers[] = {
    {"horovod", [](const EnvLookup& env) { return kRank.isSet(env) || kSize.isSet(env); }, kRank, kSize, nullptr,
     nullptr, nullptr, nullptr},
    {"openmpi", [](const EnvLookup& env) { return kOmpiRank.isSet(env); }, kOmpiRank, kOmpiSize, nullptr,
     &kOmpiLocalRank, &kOmpiLocalSize, nullptr},
    // MPICH's Hydra (mpiexec). srun's PMI plugins set PMI_RANK too, but not MPI_LOCALRANKID:
    // those launches are Slurm's, below.
    {"pmi",
     [](const EnvLookup& env) {
       return kPmiRank.isSet(env) && (kHydraLocalRank.isSet(env) || !kSlurmProcId.isSet(env));
     },
     kPmiRank, kPmiSize, nullptr, &kHydraLocalRank, &kHydraLocalSize, nullptr},
    {"slurm", [](const EnvLookup& env) { return kSlurmProcId.isSet(env); }, kSlurmProcId, kSlurmNTasks,
     &kSlurmStepNTasks, &kSlurmLocalId, nullptr, readSlurmStep},
};

// Rank, size and (when the launcher gives them) local rank and size; then horovodrun's explicit
// placement variables override whatever the launcher said.
void readTopology(Config& c, const EnvLookup& env) {
  for (const Launcher& launcher : kLaunchers) {
    if (!launcher.detects(env)) continue;
    c.rank = toInt(launcher.rank, env);
    const bool stepSize = launcher.sizeWhenSet != nullptr && launcher.sizeWhenSet->isSet(env);
    c.size = toInt(stepSize ? *launcher.sizeWhenSet : launcher.size, env);
    if (launcher.localRank != nullptr) c.localRank = toInt(*launcher.localRank, env);
    if (launcher.localSize != nullptr) c.localSize = toInt(*launcher.localSize, env);
    c.launchedBy = launcher.name;
    if (launcher.readMore != nullptr) launcher.readMore(c, env);
    break;
  }
  if (c.size < 1) {
    throw InvalidArgument("Invalid job size " + std::to_string(c.size) +
                          " (HOROVOD_SIZE or the launcher's size variable)");
  }
  if (c.rank < 0 || c.rank >= c.size) {
    throw InvalidArgument("Invalid rank " + std::to_string(c.rank) + " for a job of size " + std::to_string(c.size) +
                          " (HOROVOD_RANK or the launcher's rank variable)");
  }
  const std::pair<const Param<int64_t>&, int Config::*> overrides[] = {
      {kLocalRank, &Config::localRank},
      {kLocalSize, &Config::localSize},
      {kCrossRank, &Config::crossRank},
      {kCrossSize, &Config::crossSize},
  };
  for (const auto& [param, field] : overrides) {
    if (param.isSet(env)) c.*field = toInt(param, env);
  }
  c.hostname = kHostname.isSet(env) ? kHostname.get(env) : defaultHostname();
}

// ---- Every other variable: one row each ------------------------------------------------------

// The checks a row may name. Each throws InvalidArgument naming the variable and the value; it
// sees the Config as read so far (the rows above it).
template <int64_t lo, int64_t hi>
void within(const char* name, const int64_t& value, const Config&) {
  if (value < lo || value > hi) {
    throw InvalidArgument(std::string(name) + "='" + std::to_string(value) + "' must be in [" + std::to_string(lo) +
                          ", " + std::to_string(hi) + "]");
  }
}

void atLeastZero(const char* name, const int64_t& value, const Config&) {
  if (value < 0) throw InvalidArgument(std::string(name) + "='" + std::to_string(value) + "' must be >= 0");
}

void aboveZero(const char* name, const int64_t& value, const Config&) {
  if (value <= 0) throw InvalidArgument(std::string(name) + "='" + std::to_string(value) + "' must be > 0");
}

void aboveZero(const char* name, const double& value, const Config&) {
  if (!(value > 0)) throw InvalidArgument(std::string(name) + "='" + std::to_string(value) + "' must be > 0");
}

// A duration in (possibly fractional) seconds: > 0 (>= 0 with `zeroOk`), at most 1e8.
template <bool zeroOk>
void seconds(const char* name, const double& value, const Config&) {
  if (!(zeroOk ? value >= 0 : value > 0) || value > 1e8) {
    throw InvalidArgument(std::string(name) + "='" + std::to_string(value) + "' must be " + (zeroOk ? ">= 0" : "> 0") +
                          " seconds");
  }
}

void portWhenAddressSet(const char* name, const int64_t& value, const Config& c) {
  const int port = static_cast<int>(value);
  if (!c.rendezvousAddr.empty() && (port <= 0 || port > 65535)) {
    throw InvalidArgument(std::string(name) + "='" + std::to_string(port) +
                          "' is not a valid port (HOROVOD_GLOO_RENDEZVOUS_ADDR is set)");
  }
}

void onlyWhenElastic(const char*, const std::string& value, const Config& c) {
  if (!value.empty() && !c.elastic) {
    throw InvalidArgument(
        "HOROVOD_ELASTIC_WORKER_ID is set but HOROVOD_ELASTIC is not: both come from horovodrun's "
        "elastic driver");
  }
}

void glooOrMpi(const char*, const std::string& value, const Config&) {
  const std::string controller = lower(value);
  if (controller != "gloo" && controller != "mpi") {
    throw InvalidArgument("Unsupported controller type, only MPI and Gloo are supported (HOROVOD_CONTROLLER='" + value +
                          "')");
  }
}

void cpuOperationsBuilt(const char*, const std::string& value, const Config&) {
  const std::string cpuOps = lower(value);
  if (cpuOps == "ccl") {
    throw InvalidArgument("HOROVOD_CPU_OPERATIONS=ccl: this Horovod was not built with oneCCL support; use gloo");
  } else if (cpuOps != "gloo" && cpuOps != "mpi") {
    throw InvalidArgument(
        "Unsupported CPU operation type, only MPI, oneCCL, and Gloo are supported (HOROVOD_CPU_OPERATIONS='" + value +
        "')");
  }
}

GpuOperations parseGpuOperations(const Param<std::string>& param, const std::string& value) {
  const std::string v = lower(value);
  if (v == "nccl") return GpuOperations::kNccl;
  if (v == "host" || v == "mpi") return GpuOperations::kHost;
  throw InvalidArgument(std::string(param.name()) + "='" + value +
                        "' is not a GPU operations implementation: accepted values are NCCL and HOST (MPI is "
                        "accepted as HOST: staged through host memory)");
}

// The GPU variables, resolved to one implementation (Config::gpuOperations): every one that is
// set must name the same implementation (a per-op variable overrides HOROVOD_GPU_OPERATIONS for
// its op, and mixed implementations are not supported). `warn`: this process names them in a
// warning when no backend in this build serves GPU tensors (rank 0).
void readGpuOperations(Config& c, const EnvLookup& env, bool warn) {
  GpuOperations chosen = GpuOperations::kAuto;
  std::string firstFrom, source;
  auto take = [&](const Param<std::string>& param) {
    if (!param.isSet(env) || param.get(env).empty()) return;
    const std::string value = param.get(env);
    const std::string from = std::string(param.name()) + "=" + value;
    const GpuOperations parsed = parseGpuOperations(param, value);
    if (chosen != GpuOperations::kAuto && parsed != chosen) {
      throw InvalidArgument("GPU operations set to different implementations (" + firstFrom + ", " + from +
                            "): this build runs every GPU collective of a process set through one "
                            "implementation; give them one value (e.g. HOROVOD_GPU_OPERATIONS=NCCL or HOST)");
    }
    if (chosen == GpuOperations::kAuto) firstFrom = from;
    chosen = parsed;
    source += (source.empty() ? "" : ", ") + from;
  };
  take(kGpuOperations);
  for (const Param<std::string>* param :
       {&kGpuAllreduce, &kGpuAllgather, &kGpuBroadcast, &kGpuAlltoall, &kGpuReducescatter}) {
    take(*param);
  }
  c.gpuOperations = chosen;
  c.gpuOperationsSource = source;
  if (warn && !source.empty() && !backendServes(DeviceKind::kCuda)) {
    HVD_LOG(Warning) << source << " has no effect in this build: it has no GPU backend (docs/gpu.md).";
  }
}

// How a value lands in the Config when the field's type is not the variable's.
std::chrono::milliseconds roundedMs(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000.0 + 0.5));
}

// One variable: its Param (name, parser, default), the check its value must pass, and where
// the value goes (a field of the same type, or a store function that converts it).
struct Setting {
  template <typename T>
  using Check = void (*)(const char* name, const T& value, const Config& c);
  template <typename T>
  using Store = void (*)(Config& c, const T& value);

  template <typename T, typename Field>
  Setting(const Param<T>& param, Field Config::* field, Check<T> check = nullptr)
      : name(param.name()), read([&param, field, check](Config& c, const EnvLookup& env) {
          const T value = param.get(env);
          if (check != nullptr) check(param.name(), value, c);
          c.*field = static_cast<Field>(value);
        }) {}
  template <typename T>
  Setting(const Param<T>& param, Store<T> store, Check<T> check = nullptr)
      : name(param.name()), read([&param, store, check](Config& c, const EnvLookup& env) {
          const T value = param.get(env);
          if (check != nullptr) check(param.name(), value, c);
          store(c, value);
        }) {}

  const char* name;
  std::function<void(Config& c, const EnvLookup& env)> read;
};

// In the order they are read: a row's check sees the rows above it, and with several bad values
// the first row's error is the one reported.
const std::vector<Setting>& settings() {
  static const std::vector<Setting> table = {
      {kRendezvousAddr, &Config::rendezvousAddr},
      {kRendezvousPort, &Config::rendezvousPort, portWhenAddressSet},
      {kRendezvousDir, &Config::rendezvousDir},
      {kSecret, &Config::secret},
      {kFusionThreshold, &Config::fusionThreshold, atLeastZero},
      {kBurstQuietUs, &Config::burstQuietUs, within<0, 1000>},
      {kCallerProgressUs, &Config::callerProgressUs, within<0, 100000>},
      {kCallerSpinUs, &Config::callerSpinUs, within<0, 1000000>},
      {kCacheCapacity, &Config::cacheCapacity, atLeastZero},
      {kDynamicProcessSets, &Config::dynamicProcessSets},
      {kDisableGroupFusion, &Config::disableGroupFusion},
      {kTimeoutSeconds,
       Setting::Store<int64_t>([](Config& c, const int64_t& s) { c.timeout = std::chrono::seconds(s); }), aboveZero},
      {kIface, &Config::interface},
      {kThreadAffinity, &Config::threadAffinity},
      {kNcclStreams, &Config::numNcclStreams, within<1, 64>},
      {kElastic, &Config::elastic},
      {kElasticWorkerId, &Config::elasticWorkerId, onlyWhenElastic},
      {kElasticTimeout, Setting::Store<double>([](Config& c, const double& s) {
         c.elasticTimeout = std::chrono::milliseconds(static_cast<int64_t>(s * 1000));
       }),
       aboveZero},
      {kMpiThreadsDisable, &Config::mpiThreadsDisable},
      {kController,
       Setting::Store<std::string>([](Config& c, const std::string& v) { c.controllerMpi = lower(v) == "mpi"; }),
       glooOrMpi},
      {kCpuOperations,
       Setting::Store<std::string>([](Config& c, const std::string& v) { c.cpuOperationsMpi = lower(v) == "mpi"; }),
       cpuOperationsBuilt},
      {collectives::allreduceCrossoverParam(), &Config::allreduceCrossoverBytes, atLeastZero},
      {kAdasumChunk, &Config::adasumMpiChunkBytes, aboveZero},
      {kTransport, Setting::Store<std::string>([](Config& c, const std::string& v) { c.transport = lower(v); })},
      {kStallCheckDisable, Setting::Store<bool>([](Config& c, const bool& off) { c.stallCheck = !off; })},
      {kStallCheckTime, Setting::Store<double>([](Config& c, const double& s) { c.stallCheckTime = roundedMs(s); }),
       seconds<false>},
      {kStallShutdownTime,
       Setting::Store<double>([](Config& c, const double& s) { c.stallShutdownTime = roundedMs(s); }), seconds<true>},
      {kLivenessTimeout, Setting::Store<double>([](Config& c, const double& s) { c.livenessTimeout = roundedMs(s); }),
       seconds<true>},
      {kGpuStagedChunkBytes, &Config::gpuStagedChunkBytes, atLeastZero},
      {kHierAllreduce, &Config::gpuHierarchicalAllreduce},
      {kBatchD2D, &Config::gpuBatchD2DMemcopies},
  };
  return table;
}

// Knobs set explicitly, which autotuning leaves alone (Config::Pinned).
void readPinned(Config& c, const EnvLookup& env) {
  c.pinned.fusionThreshold = kFusionThreshold.isSet(env);
  c.pinned.cacheCapacity = kCacheCapacity.isSet(env);
  c.pinned.burstQuiet = kBurstQuietUs.isSet(env);
  c.pinned.callerProgress = kCallerProgressUs.isSet(env);
  c.pinned.callerSpin = kCallerSpinUs.isSet(env);
  c.pinned.allreduceAlgorithm = collectives::allreduceAlgorithmParam().isSet(env);
  c.pinned.allreduceCrossover = collectives::allreduceCrossoverParam().isSet(env);
  c.pinned.hierarchical = kHierAllreduce.isSet(env) || kHierAllgather.isSet(env);
}

}  // namespace

Config Config::fromEnvironment(const EnvLookup& env) {
  Config c;
  readTopology(c, env);
  for (const Setting& setting : settings()) setting.read(c, env);
  readGpuOperations(c, env, /*warn=*/c.rank == 0);
  readPinned(c, env);
  checkInertKnobs(env, /*warn=*/c.rank == 0);
  return c;
}

const char* gpuOperationsName(GpuOperations value) {
  switch (value) {
    case GpuOperations::kNccl: return "NCCL";
    case GpuOperations::kHost: return "HOST";
    default: return "auto";
  }
}

int64_t Config::roundFusionThreshold(int64_t threshold, int localSize, bool homogeneous) {
  if (threshold <= 0 || !homogeneous || localSize <= 0) return threshold;
  int64_t unit = static_cast<int64_t>(localSize) * 8 * 64;
  return (threshold + unit - 1) / unit * unit;
}

void applyLogSettings(const EnvLookup& env) {
  auto level = env(kLogLevel.name());
  if (level.has_value() && !level->empty()) {
    std::string v = lower(*level);
    LogLevel l = LogLevel::kWarning;
    if (v == "trace") l = LogLevel::kTrace;
    else if (v == "debug") l = LogLevel::kDebug;
    else if (v == "info") l = LogLevel::kInfo;
    else if (v == "error") l = LogLevel::kError;
    else if (v == "fatal") l = LogLevel::kFatal;
    setLogLevel(l);
  }
  if (kLogHideTime.isSet(env)) setLogHideTime(kLogHideTime.get(env));
}

}  // namespace hvd::engine
