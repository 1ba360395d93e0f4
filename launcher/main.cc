// horovodrun: parse the command line (and --config-file), pick the hosts and the launch path
// (built-in or mpirun), and turn every failure into a one-line message and an exit status:
//   0 success; 1 a worker failed or the job could not start; 2 bad input (nothing started);
//   128 + signal when interrupted.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <iostream>

#include "check_build.h"
#include "cli.h"
#include "config_file.h"
#include "elastic_launch.h"
#include "env.h"
#include "gloo_launch.h"
#include "hosts.h"
#include "lsf_launch.h"
#include "mpi_launch.h"
#include "network.h"
#include "process.h"
#include "rendezvous.h"

namespace hvd::launcher {
namespace {

void say(int fd, const std::string& text) { writeAll(fd, text.data(), text.size()); }

std::string pathEnv() {
  const char* p = std::getenv("PATH");
  return p != nullptr ? p : "/usr/local/bin:/usr/bin:/bin";
}

int runMpiJob(const Options& o, const std::vector<HostSlots>& hosts, int signalFd) {
  std::string mpirun = resolveExecutable("mpirun", pathEnv());
  MpiImpl impl = detectMpi(mpirun);
  if (impl == MpiImpl::kMissing) {
    throw UsageError(
        "MPI support has not been built.  If this is not expected, ensure MPI is installed "
        "(mpirun on PATH).");
  }
  if (impl == MpiImpl::kUnknown) {
    throw LaunchError("horovodrun does not recognize the MPI implementation of " + mpirun +
                      " (`mpirun --version`); install Open MPI or MPICH, or use --gloo.");
  }
  int np = *o.numProc;
  if (np > totalSlots(hosts)) {
    throw UsageError("Requested more processes (" + std::to_string(np) + ") than there are available slots (" +
                     std::to_string(totalSlots(hosts)) + ")");
  }
  std::vector<std::string> remoteHosts;
  for (const auto& h : hosts) {
    if (!isLocalHost(h.host)) remoteHosts.push_back(h.host);
  }
  NetworkChoice network = chooseNetwork(o.networkInterfaces, remoteHosts);

  std::string secret = jobSecret();
  Rendezvous rendezvous(remoteHosts.empty() ? network.driverAddress : "0.0.0.0", secret);

  MpiJob job;
  job.impl = impl;
  job.np = np;
  job.hosts = hosts;
  job.nics = network.nics;
  job.runningAsRoot = geteuid() == 0;
  EnvMap knobs = knobEnvironment(o);
  job.environment = inheritedEnvironment();
  for (const auto& [k, v] : mallocEnvironment(job.environment)) job.environment[k] = v;
  for (const auto& [k, v] : knobs) job.environment[k] = v;
  job.environment["HOROVOD_GLOO_RENDEZVOUS_ADDR"] = network.driverAddress;
  job.environment["HOROVOD_GLOO_RENDEZVOUS_PORT"] = std::to_string(rendezvous.port());
  job.environment["PYTHONUNBUFFERED"] = "1";
  job.environment[kSecretEnv] = secret;  // exported by name only; the value stays off the command line
  std::string command = buildMpirunCommand(o, job);
  if (o.verbose) say(2, "horovodrun: running " + command + "\n");
  return runMpirun(command, job.environment, signalFd);
}

// Horovod's choice inside an LSF job: with no launcher chosen (no --gloo, --mpi, --jsrun), not
// elastic, and jsrun on PATH, the job runs under jsrun (hosts and -np from the allocation).
void chooseJsrunInsideLsf(Options& o) {
  const char* job = std::getenv("LSB_JOBID");
  if (o.controller != Controller::kDefault || o.elastic() || job == nullptr || *job == '\0') return;
  if (o.help || o.version || o.checkBuild || resolveExecutable("jsrun", pathEnv()).empty()) return;
  o.controller = Controller::kJsrun;
  say(2, std::string("horovodrun: inside LSF job ") + job +
             " with jsrun on PATH: launching with jsrun, as Horovod does (--gloo runs horovodrun's own launcher)\n");
}

int runLauncher(const std::vector<std::string>& args, int signalFd) {
  Options options = parseCommandLine(args);
  if (options.help) {
    say(1, usageText());
    return 0;
  }
  if (options.version) {
    say(1, std::string(kVersion) + "\n");
    return 0;
  }
  if (options.configFile.has_value()) applyConfigFile(*options.configFile, options);
  chooseJsrunInsideLsf(options);
  validateOptions(options);
  if (options.checkBuild) {
    // Nothing to clean up here: let Ctrl-C end the (possibly slow) import probes directly.
    sigset_t all;
    sigfillset(&all);
    sigprocmask(SIG_UNBLOCK, &all, nullptr);
    say(1, formatBuildInfo(probeBuild()));
    return 0;
  }

  if (options.elastic()) {
    if (options.controller == Controller::kMpi || options.controller == Controller::kJsrun) {
      throw UsageError(
          "Gloo support is required to use elastic training: elastic jobs run on horovodrun's own "
          "launcher, not under mpirun/jsrun (drop --mpi/--jsrun)");
    }
    return runElasticJob(options, signalFd);
  }
  say(2, ignoredElasticFlagsWarning(options));  // as Horovod, a fixed job runs without them
  if (options.controller == Controller::kJsrun) {
    return runJsrunJob(options, *detectLsf(inheritedEnvironment()), signalFd);  // LSF: checked above
  }
  std::vector<HostSlots> hosts;
  if (options.hostfile.has_value()) {
    hosts = parseHostfile(*options.hostfile);
  } else if (options.hosts.has_value()) {
    hosts = parseHosts(*options.hosts);
  }
  if (hosts.empty()) {
    hosts.push_back({"localhost", *options.numProc});
  }

  if (options.controller == Controller::kMpi) return runMpiJob(options, hosts, signalFd);
  return runGlooJob(options, hosts, signalFd);
}

}  // namespace
}  // namespace hvd::launcher

int main(int argc, char** argv) {
  using namespace hvd::launcher;
  // Before any thread exists, so every thread inherits the mask and signals reach the signalfd.
  blockLauncherSignals();
  int signalFd = launcherSignalFd();
  startOrphanGuard();
  std::vector<std::string> args(argv + 1, argv + argc);
  try {
    int code = runLauncher(args, signalFd);
    dismissOrphanGuard();
    return code;
  } catch (const UsageError& e) {
    say(2, std::string("horovodrun: error: ") + e.what() + "\n");
    return 2;
  } catch (const Interrupted& e) {
    say(2, std::string("horovodrun: interrupted by ") + signalName(e.signal()) + "\n");
    return 128 + e.signal();
  } catch (const std::exception& e) {
    say(2, std::string("horovodrun: error: ") + e.what() + "\n");
    return 1;
  }
}
