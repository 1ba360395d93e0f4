#include "gloo_launch.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <sstream>

#include "common/deadline.h"
#include "common/params.h"
#include "env.h"
#include "network.h"
#include "process.h"
#include "remote_launcher.h"
#include "rendezvous.h"
#include "spawn_local.h"
#include "spawn_ssh.h"
#include "ssh_check.h"
#include "supervisor.h"

namespace hvd::launcher {
namespace {

const Param<double> kStartTimeout("HOROVOD_START_TIMEOUT", 30.0,
                                  "horovodrun: seconds for ssh checks and worker start when --start-timeout is absent");

void say(const std::string& text) { writeAll(2, text.data(), text.size()); }

std::string currentDirectory() {
  char buf[4096];
  if (getcwd(buf, sizeof(buf)) == nullptr) return "/";
  return buf;
}

void prepareOutputDirectory(const std::string& dir) {
  std::string current;
  for (size_t pos = 0; pos <= dir.size();) {
    size_t slash = dir.find('/', pos);
    if (slash == std::string::npos) slash = dir.size();
    current = dir.substr(0, slash);
    if (!current.empty() && mkdir(current.c_str(), 0755) != 0 && errno != EEXIST) {
      throw UsageError("--output-filename: cannot create " + current + ": " + std::strerror(errno));
    }
    pos = slash + 1;
  }
  if (access(dir.c_str(), W_OK) != 0) {
    throw UsageError("--output-filename: cannot write to " + dir + ": " + std::strerror(errno));
  }
}

}  // namespace

double startTimeoutSeconds(const Options& options) {
  double seconds;
  const char* name;
  if (options.startTimeout.has_value()) {
    seconds = *options.startTimeout;
    name = "--start-timeout";
  } else {
    try {
      seconds = kStartTimeout.get();
    } catch (const Error& e) {
      throw UsageError(e.what());
    }
    name = kStartTimeout.name();
  }
  // Converted to milliseconds for a deadline: inf, nan and values past ~31 years would overflow.
  constexpr double kMaxSeconds = 1e9;
  if (!(seconds >= 0 && seconds <= kMaxSeconds)) {
    std::ostringstream out;
    out << name << "=" << seconds << ": the start timeout must be a number of seconds from 0 to " << kMaxSeconds;
    throw UsageError(out.str());
  }
  return seconds;
}

std::map<std::string, bool> classifyHosts(const std::vector<std::string>& hosts) {
  std::map<std::string, bool> local;
  for (const auto& h : hosts) {
    if (local.count(h) == 0) local[h] = isLocalHost(h);
  }
  return local;
}

JobContext makeJobContext(const Options& options, bool anyLocal, bool anyRemote) {
  // Before any ssh check or process: a malformed HOROVOD_MALLOC_HUGEPAGES is a usage error.
  EnvMap inherited = inheritedEnvironment();
  EnvMap malloc = mallocEnvironment(inherited);
  JobContext job;
  job.command = options.command;
  job.cwd = currentDirectory();
  job.outputDir = options.outputFilename;
  job.timestampOutput = options.prefixOutputWithTimestamp;
  job.verbose = options.verbose;
  job.np = options.numProc.value_or(1);
  job.sshPort = options.sshPort;
  job.sshIdentityFile = options.sshIdentityFile;
  const char* path = std::getenv("PATH");
  std::string pathText = path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
  if (anyLocal) {
    // Catch a typo before anything starts (remote hosts resolve the command themselves).
    job.localExecutable = resolveExecutable(options.command[0], pathText);
    if (job.localExecutable.empty()) {
      const NotExecutable why = whyNotExecutable(options.command[0], pathText);
      throw UsageError(why.exists ? "cannot run " + options.command[0] + ": " + why.reason
                                  : "command not found: " + options.command[0] + " (" + why.reason + ")");
    }
  }
  if (anyRemote) setRemoteLauncher(job, options);
  if (job.outputDir.has_value()) prepareOutputDirectory(*job.outputDir);
  EnvMap knobs = knobEnvironment(options);
  for (const EnvMap* layer : {&inherited, &malloc, &knobs}) {
    for (const auto& [k, v] : *layer) job.environment[k] = v;
  }
  return job;
}

int runGlooJob(const Options& options, const std::vector<HostSlots>& hosts, int signalFd) {
  int np = *options.numProc;
  std::vector<SlotInfo> slots = assignSlots(hosts, np);
  Deadline startDeadline =
      Deadline::after(std::chrono::milliseconds(static_cast<int64_t>(startTimeoutSeconds(options) * 1000)));

  std::vector<std::string> names;
  for (const auto& s : slots) names.push_back(s.hostname);
  std::map<std::string, bool> local = classifyHosts(names);
  std::vector<std::string> remoteHosts;
  for (const auto& [host, isLocal] : local) {
    if (!isLocal) remoteHosts.push_back(host);
  }
  bool anyLocal = remoteHosts.size() < local.size();
  JobContext job = makeJobContext(options, anyLocal, !remoteHosts.empty());

  NetworkChoice network = chooseNetwork(options.networkInterfaces, remoteHosts);
  job.remoteInterfaceFromRoute = network.detected;
  if (options.verbose) {
    std::string nics;
    for (const auto& n : network.nics) nics += (nics.empty() ? "" : ",") + n;
    say("horovodrun: rendezvous address " + network.driverAddress + ", interfaces " + nics + "\n");
  }

  if (!remoteHosts.empty() && job.blaunchPath.empty()) {
    checkSshHosts(remoteHosts, sshBaseArgs(job), startDeadline, !options.disableCache, options.verbose, signalFd);
  }

  job.secret = jobSecret();
  Rendezvous rendezvous(remoteHosts.empty() ? network.driverAddress : "0.0.0.0", job.secret);
  if (options.verbose)
    say("horovodrun: rendezvous server listening on port " + std::to_string(rendezvous.port()) + "\n");

  // HOROVOD_CPU_OPERATIONS=mpi from the user's environment reaches the workers, which refuse it on
  // every rank (no MPI started them) instead of silently running gloo.
  const auto askedOps = job.environment.find("HOROVOD_CPU_OPERATIONS");
  const std::string cpuOperations = askedOps == job.environment.end() ? "" : askedOps->second;
  for (const auto& [k, v] : jobEnvironment(network, rendezvous.port())) job.environment[k] = v;
  if (cpuOperations == "mpi" || cpuOperations == "MPI") job.environment["HOROVOD_CPU_OPERATIONS"] = cpuOperations;

  Supervisor supervisor(signalFd, options.statusFile.value_or(""), options.verbose);
  for (const auto& slot : slots) {
    try {
      supervisor.add(local[slot.hostname] ? spawnLocalWorker(job, slot) : spawnRemoteWorker(job, slot));
    } catch (const Error& e) {
      supervisor.abort("cannot start process " + std::to_string(slot.rank) + " on " + slot.hostname + ": " + e.what());
      return 1;
    }
  }
  return supervisor.run();
}

}  // namespace hvd::launcher
