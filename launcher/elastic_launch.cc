#include "elastic_launch.h"

#include <chrono>
#include <map>
#include <memory>
#include <set>

#include "common/params.h"
#include "discovery.h"
#include "elastic/host_registry.h"
#include "elastic_driver.h"
#include "env.h"
#include "gloo_launch.h"
#include "network.h"
#include "process.h"
#include "remote_launcher.h"
#include "rendezvous.h"
#include "spawn_local.h"
#include "spawn_ssh.h"
#include "ssh_check.h"
#include "store/tcp_store.h"
#include "supervisor.h"

namespace hvd::launcher {
namespace {

const Param<double> kElasticTimeout("HOROVOD_ELASTIC_TIMEOUT", 600.0,
                                    "horovodrun: seconds an elastic job waits for enough slots when "
                                    "--elastic-timeout is absent");
const Param<double> kDiscoveryInterval("HOROVOD_ELASTIC_DISCOVERY_INTERVAL", 1.0,
                                       "horovodrun: seconds between runs of the host discovery script");
const Param<double> kGatherTimeout(
    "HOROVOD_ELASTIC_GATHER_TIMEOUT", 30.0,
    "horovodrun: seconds the elastic driver waits, once a reset began, for every worker of the round to "
    "ask for the next one; a worker that has not (and that no survivor reported lost) is killed and its "
    "host blacklisted. Longer than your longest stretch without a collective (a step, an evaluation)");

void say(const std::string& text) { writeAll(2, text.data(), text.size()); }

std::chrono::milliseconds secondsParam(const Param<double>& p, std::optional<double> flag) {
  double value = 0;
  try {
    value = flag.has_value() ? *flag : p.get();
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
  if (!(value > 0)) throw UsageError(std::string(p.name()) + " must be > 0 (got " + pythonFloat(value) + ")");
  return std::chrono::milliseconds(static_cast<int64_t>(value * 1000));
}

std::vector<HostSlots> fixedHosts(const Options& o) {
  if (o.hostfile.has_value()) return parseHostfile(*o.hostfile);
  if (o.hosts.has_value()) return parseHosts(*o.hosts);
  return {};
}

}  // namespace

int runElasticJob(const Options& options, int signalFd) {
  ElasticSettings settings;
  settings.startNp = options.numProc.value_or(options.minNumProc.value_or(1));
  settings.minNp = options.minNumProc.value_or(settings.startNp);
  settings.maxNp = options.maxNumProc;
  settings.resetLimit = options.resetLimit;
  settings.elasticTimeout = secondsParam(kElasticTimeout, options.elasticTimeout);
  settings.gatherTimeout = secondsParam(kGatherTimeout, std::nullopt);
  settings.statusFile = options.statusFile.value_or("");
  settings.verbose = options.verbose;
  if (settings.maxNp.has_value() && *settings.maxNp < settings.minNp) {
    throw UsageError("--max-np (" + std::to_string(*settings.maxNp) + ") must not be below --min-np (" +
                     std::to_string(settings.minNp) + ")");
  }

  std::unique_ptr<Discovery> discovery;
  std::vector<HostSlots> firstHosts;
  if (options.hostDiscoveryScript.has_value()) {
    discovery =
        scriptDiscovery(*options.hostDiscoveryScript, options.slotsPerHost.value_or(1),
                        secondsParam(kDiscoveryInterval, std::nullopt), std::chrono::seconds(30), options.verbose);
    firstHosts = *discovery->discover(std::chrono::steady_clock::now());  // the first run must succeed
  } else {
    firstHosts = fixedHosts(options);
    if (firstHosts.empty()) {
      throw UsageError("One of --host-discovery-script, --hosts, or --hostnames must be provided");
    }
    if (firstHosts.size() < 2) {
      throw UsageError("Cannot run in fault tolerance mode with fewer than 2 hosts.");
    }
    discovery = fixedDiscovery(firstHosts);
  }

  // Network and ssh settings from the hosts known at start (later hosts reach the same address).
  std::vector<std::string> names;
  for (const auto& h : firstHosts) names.push_back(h.host);
  std::map<std::string, bool> local = classifyHosts(names);
  std::vector<std::string> remoteHosts;
  for (const auto& [host, isLocal] : local) {
    if (!isLocal) remoteHosts.push_back(host);
  }
  // The remote launcher (ssh or blaunch) is chosen now for remote hosts known at start, else when
  // the first one appears (spawn).
  JobContext job = makeJobContext(options, /*anyLocal=*/true, /*anyRemote=*/!remoteHosts.empty());
  NetworkChoice network = chooseNetwork(options.networkInterfaces, remoteHosts);
  job.remoteInterfaceFromRoute = network.detected;
  job.secret = jobSecret();
  // Bound to every interface unless all hosts are fixed and local.
  bool allLocalForGood = remoteHosts.empty() && !options.hostDiscoveryScript.has_value();
  Rendezvous rendezvous(allLocalForGood ? network.driverAddress : "0.0.0.0", job.secret);
  for (const auto& [k, v] : jobEnvironment(network, rendezvous.port())) job.environment[k] = v;
  job.environment["HOROVOD_ELASTIC"] = "1";
  // A worker that stops answering (paused, hung) must become a reset, not a job stuck in
  // negotiation: unless the user chose, a tensor stalled for 2 minutes fails the round.
  if (job.environment.count("HOROVOD_STALL_SHUTDOWN_TIME_SECONDS") == 0 &&
      job.environment.count("HOROVOD_STALL_CHECK_DISABLE") == 0) {
    job.environment["HOROVOD_STALL_SHUTDOWN_TIME_SECONDS"] = "120";
  }
  job.environment["HOROVOD_ELASTIC_TIMEOUT"] = pythonFloat(static_cast<double>(settings.elasticTimeout.count()) / 1000);
  if (options.verbose) {
    say("horovodrun: elastic job; rendezvous " + network.driverAddress + ":" + std::to_string(rendezvous.port()) +
        "\n");
  }
  auto store =
      std::make_shared<TcpStore>("127.0.0.1", rendezvous.port(), job.secret, Deadline::after(std::chrono::seconds(10)));

  std::set<std::string> sshChecked;
  double startTimeout = startTimeoutSeconds(options);
  auto spawn = [&](const SlotInfo& slot, int id) -> WorkerProcess {
    auto [it, inserted] = local.try_emplace(slot.hostname, false);
    if (inserted) it->second = isLocalHost(slot.hostname);
    JobContext j = job;
    j.environment["HOROVOD_ELASTIC_WORKER_ID"] = std::to_string(id);
    if (it->second) return spawnLocalWorker(j, slot);
    if (j.sshPath.empty() && j.blaunchPath.empty()) {
      try {
        setRemoteLauncher(job, options);
      } catch (const UsageError& e) {
        throw LaunchError(std::string(e.what()) + " (starting a worker on " + slot.hostname + ")");
      }
      j.sshPath = job.sshPath;
      j.blaunchPath = job.blaunchPath;
    }
    if (j.blaunchPath.empty() && sshChecked.insert(slot.hostname).second) {
      Deadline deadline = Deadline::after(std::chrono::milliseconds(static_cast<int64_t>(startTimeout * 1000)));
      checkSshHosts({slot.hostname}, sshBaseArgs(j), deadline, !options.disableCache, options.verbose, signalFd);
    }
    return spawnRemoteWorker(j, slot);
  };

  HostRegistry registry(options.blacklistCooldownRange);
  registry.setDiscovered(firstHosts);
  ElasticDriver driver(settings, std::move(discovery), std::move(registry), store, spawn);
  Supervisor supervisor(signalFd, options.statusFile.value_or(""), options.verbose);
  supervisor.setPolicy(&driver);
  return supervisor.run();
}

}  // namespace hvd::launcher
