#include "api/launch_bootstrap.h"

#include <unistd.h>

#include <map>

#include "common/hmac.h"
#include "common/logging.h"
#include "horovod/errors.h"
#include "mpi/mpi_bootstrap.h"
#include "mpi/mpi_library.h"
#include "store/served_tcp_store.h"
#include "store/tcp_store.h"

namespace hvd::api {
namespace {

const Param<int64_t> kSlurmPort(
    "HOROVOD_SLURM_RENDEZVOUS_PORT", 0,
    "srun without horovodrun or MPI: the port node 0's first task serves the rendezvous on (default: "
    "derived from SLURM_JOB_ID and SLURM_STEP_ID, 20000-31999).");

std::shared_ptr<Store> mpiRendezvous(engine::Config& config, const InitOptions& options) {
  mpi::MpiBootstrapOptions o;
  o.comm = options.mpiComm;
  o.threadsDisable = config.mpiThreadsDisable;
  o.dataPlane = config.cpuOperationsMpi;
  o.timeout = config.timeout;
  o.interface = config.interface;
  mpi::MpiJob job = mpi::bootstrapOverMpi(o);
  if (config.launchedBy != "default" && options.mpiComm == HVD_MPI_WORLD_COMM &&
      (config.rank != job.rank || config.size != job.size)) {
    // Typically an MPI library other than the launcher's (mpi4py loaded Open MPI under MPICH's
    // mpiexec), or MPI asked for (HOROVOD_CONTROLLER=mpi) under a launcher that is not MPI's:
    // every process would run alone as rank 0 of 1.
    static const std::map<std::string, std::string> kLaunchers = {
        {"openmpi", "Open MPI"}, {"pmi", "MPICH (Hydra)"}, {"slurm", "srun"}, {"horovod", "horovodrun"}};
    throw InvalidArgument("the " + kLaunchers.at(config.launchedBy) + " launcher started rank " +
                          std::to_string(config.rank) + " of " + std::to_string(config.size) +
                          ", but MPI_COMM_WORLD (" + mpi::mpiState().flavor + " library) says rank " +
                          std::to_string(job.rank) + " of " + std::to_string(job.size) +
                          ": the MPI loaded in this process is not the launcher's. Use the mpirun of the MPI the "
                          "program loads (docs/mpi.md)");
  }
  static_cast<Placement&>(config) = job;
  config.secret = job.secret;
  config.mpiComm = options.mpiComm;
  if (config.launchedBy == "default") config.launchedBy = "mpi";
  return job.store;
}

// A key every task of the step can compute without a channel to share one: it keeps other jobs
// from joining this one by accident, but anyone who knows the job id can compute it (docs/mpi.md).
std::string derivedSlurmKey(const engine::Config& config) {
  const std::string text = "horovod-slurm/" + std::to_string(config.slurmJobId) + "/" +
                           std::to_string(config.slurmStepId) + "/" + std::to_string(getuid());
  const Digest digest = hmacSha256("horovod srun rendezvous", text);
  return toHex(digest.data(), digest.size());
}

std::shared_ptr<Store> slurmRendezvous(engine::Config& config) {
  if (config.slurmJobId < 0 || config.slurmStepId < 0 || config.slurmNodeId < 0 || config.slurmNodeList.empty()) {
    throw InvalidArgument(
        "Launched by srun with " + std::to_string(config.size) +
        " tasks, but SLURM_JOB_ID, SLURM_STEP_ID, SLURM_NODEID or SLURM_STEP_NODELIST is missing, so the tasks "
        "cannot find each other: run the step with srun itself, or set HOROVOD_RENDEZVOUS_DIR (docs/mpi.md)");
  }
  const bool oneNode = config.slurmNumNodes == 1;
  const std::string host = oneNode ? "127.0.0.1" : firstSlurmHost(config.slurmNodeList);
  const int port = kSlurmPort.isSet() ? static_cast<int>(kSlurmPort.get())
                                      : slurmRendezvousPort(config.slurmJobId, config.slurmStepId);
  if (port <= 0 || port > 65535) {
    throw InvalidArgument("HOROVOD_SLURM_RENDEZVOUS_PORT='" + std::to_string(port) + "' is not a valid port");
  }
  if (config.secret.empty()) {
    config.secret = derivedSlurmKey(config);
    if (config.rank == 0 && !oneNode) {
      HVD_LOG(Warning) << "srun rendezvous without HOROVOD_SECRET_KEY: its key is derived from the job id, so it "
                          "keeps other jobs out by accident only; export HOROVOD_SECRET_KEY=$(openssl rand -hex 32) "
                          "in the batch script for a real secret (docs/mpi.md)";
    }
  }
  Deadline deadline = Deadline::after(config.timeout);
  const bool hostsServer = config.slurmNodeId == 0 && config.localRank == 0;
  HVD_LOG(Debug) << "srun rendezvous at " << host << ":" << port << (hostsServer ? " (served by this task)" : "");
  if (hostsServer) {
    std::unique_ptr<TcpStoreServer> server;
    try {
      server = std::make_unique<TcpStoreServer>(oneNode ? "127.0.0.1" : "0.0.0.0", static_cast<uint16_t>(port),
                                                config.secret);
    } catch (const std::exception& e) {
      throw Error(std::string("srun rendezvous: could not serve on port ") + std::to_string(port) + " (" + e.what() +
                  "); another job may hold it: set HOROVOD_SLURM_RENDEZVOUS_PORT to a free port for every task "
                  "(docs/mpi.md)");
    }
    return std::make_shared<ServedTcpStore>(std::move(server), host, config.secret, deadline);
  }
  try {
    return std::make_shared<TcpStore>(host, static_cast<uint16_t>(port), config.secret, deadline);
  } catch (const std::exception& e) {
    throw Error(std::string("srun rendezvous: ") + e.what() + " (served by the first task on " + host +
                "; did it fail to start? see its log; HOROVOD_SLURM_RENDEZVOUS_PORT changes the port, docs/mpi.md)");
  }
}

}  // namespace

std::string firstSlurmHost(const std::string& hostlist) {
  std::string out;
  bool inBracket = false, skipping = false;
  for (char ch : hostlist) {
    if (inBracket) {
      if (ch == ']') {
        inBracket = false;
        skipping = false;
      } else if (ch == ',' || ch == '-') {
        skipping = true;  // the first value of the range list is the first host's
      } else if (!skipping) {
        out += ch;
      }
    } else if (ch == '[') {
      inBracket = true;
    } else if (ch == ',') {
      break;
    } else {
      out += ch;
    }
  }
  return out;
}

int slurmRendezvousPort(int64_t jobId, int64_t stepId) {
  return 20000 + static_cast<int>(((jobId * 64 + stepId) % 12000 + 12000) % 12000);
}

namespace {

std::shared_ptr<Store> chooseBootstrap(engine::Config& config, const InitOptions& options) {
  const bool rendezvousGiven = !config.rendezvousAddr.empty() || !config.rendezvousDir.empty();
  if (options.mpiComm != HVD_MPI_WORLD_COMM || config.controllerMpi) return mpiRendezvous(config, options);
  if (rendezvousGiven) return nullptr;
  if (config.launchedBy == "openmpi" || config.launchedBy == "pmi") return mpiRendezvous(config, options);
  if (config.launchedBy == "slurm" && config.size > 1) return slurmRendezvous(config);
  return nullptr;
}

// A job whose rendezvous came from horovodrun but whose processes mpirun started (horovodrun
// --mpi) initializes MPI here; any other job fails.
void startMpiForDataPlane(engine::Config& config) {
  if (config.launchedBy != "openmpi" && config.launchedBy != "pmi" && mpi::chooseFlavor().empty()) {
    throw InvalidArgument(
        "HOROVOD_CPU_OPERATIONS=mpi: this job was not started by MPI (launched by " + config.launchedBy +
        "), so there is no MPI communicator to run its collectives on. Launch it with mpirun/mpiexec (or "
        "horovodrun --mpi), give hvd.init(comm=...), or unset HOROVOD_CPU_OPERATIONS (docs/mpi.md)");
  }
  const HvdMpiPlugin& plugin = mpi::initMpi(config.mpiThreadsDisable, true);
  int rank = 0, size = 0;
  char err[1024] = {0};
  if (plugin.rankSize(HVD_MPI_WORLD_COMM, &rank, &size, err, sizeof(err)) != 0) {
    throw Error(std::string("HOROVOD_CPU_OPERATIONS=mpi: ") + err);
  }
  if (size != config.size) {
    throw InvalidArgument("HOROVOD_CPU_OPERATIONS=mpi: MPI_COMM_WORLD has " + std::to_string(size) +
                          " processes but the job has " + std::to_string(config.size) +
                          " ranks: the MPI loaded in this process is not the launcher's (docs/mpi.md)");
  }
  if (rank != config.rank) {
    // The data plane's communicators number ranks as MPI_COMM_WORLD does.
    throw InvalidArgument("HOROVOD_CPU_OPERATIONS=mpi: Horovod rank " + std::to_string(config.rank) + " is rank " +
                          std::to_string(rank) +
                          " of MPI_COMM_WORLD; the MPI data plane needs both numberings to agree (launch with "
                          "mpirun directly, docs/mpi.md)");
  }
  config.mpiComm = HVD_MPI_WORLD_COMM;
}

// HOROVOD_CPU_OPERATIONS=mpi needs MPI initialized over the job's processes, at a thread level
// that lets the engine's thread call it. Throws on every rank alike when it cannot be had.
void requireMpiDataPlane(engine::Config& config) {
  if (!mpi::mpiState().enabled) startMpiForDataPlane(config);
  const mpi::MpiState state = mpi::mpiState();
  if (state.threadLevel < 2) {
    // The engine's collectives run on its background thread or on a waiting caller's, one at a
    // time: MPI must allow calls from more than the initializing thread.
    throw InvalidArgument(std::string("HOROVOD_CPU_OPERATIONS=mpi needs MPI_THREAD_SERIALIZED or more, but MPI "
                                      "runs with ") +
                          mpi::threadLevelName(state.threadLevel) +
                          " (initialized before Horovod, by mpi4py with mpi4py.rc.thread_level?): initialize it "
                          "with MPI_THREAD_MULTIPLE (mpi4py's default), or unset HOROVOD_CPU_OPERATIONS (docs/mpi.md)");
  }
}

}  // namespace

std::shared_ptr<Store> bootstrapWithoutLauncher(engine::Config& config, const InitOptions& options) {
  std::shared_ptr<Store> store = chooseBootstrap(config, options);
  // The Runtime's Config carries the choice to the collective backends (backends/mpi).
  if (config.cpuOperationsMpi) requireMpiDataPlane(config);
  return store;
}

}  // namespace hvd::api
