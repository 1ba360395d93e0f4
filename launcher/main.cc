// horovodrun: parse the command line (and --config-file), pick the hosts and the launch path
// (built-in or mpirun), and turn every failure into a one-line message and an exit status:
//   0 success; 1 a worker failed or the job could not start; 2 bad input (nothing started);
//   128 + signal when interrupted.
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <iostream>

#include "check_build.h"
#include "cli.h"
#include "common/deadline.h"
#include "config_file.h"
#include "env.h"
#include "gloo_launch.h"
#include "hosts.h"
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

// Runs the discovery script once (this launcher has no elastic driver yet) and returns its
// hosts. Horovod's rule: a failing first call fails the job.
std::vector<HostSlots> discoverHostsOnce(const Options& o) {
  SpawnRequest request;
  request.path = o.hostDiscoveryScript->find('/') == std::string::npos
                     ? resolveExecutable(*o.hostDiscoveryScript, pathEnv())
                     : *o.hostDiscoveryScript;
  if (request.path.empty() || resolveExecutable(request.path, "").empty()) {
    throw UsageError("host discovery script " + *o.hostDiscoveryScript + " is not an executable file");
  }
  request.argv = {request.path};
  EnvMap own = inheritedEnvironment();
  request.env = renderEnvironment({&own});
  SpawnedProcess p = spawnProcess(request);
  std::string output;
  Deadline deadline = Deadline::after(std::chrono::seconds(60));
  while (p.stdoutFd >= 0 && !deadline.expired()) {
    pollfd pfd{p.stdoutFd, POLLIN, 0};
    poll(&pfd, 1, deadline.pollTimeoutMs(1000));
    char buf[4096];
    ssize_t n = read(p.stdoutFd, buf, sizeof(buf));
    if (n > 0) {
      output.append(buf, static_cast<size_t>(n));
    } else if (n == 0 || errno != EAGAIN) {
      close(p.stdoutFd);
      p.stdoutFd = -1;
    }
  }
  if (p.stdoutFd >= 0) close(p.stdoutFd);
  close(p.stderrFd);
  kill(-p.pid, SIGKILL);  // no-op when it finished
  int status = 0;
  waitpid(p.pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    throw LaunchError("Failed to execute discovery script: " + *o.hostDiscoveryScript +
                      ". Exit code: " + std::to_string(exitCodeOf(status)));
  }
  return parseDiscoveredHosts(output, o.slotsPerHost.value_or(1));
}

int runMpiJob(const Options& o, const std::vector<HostSlots>& hosts, int signalFd) {
  std::string mpirun = resolveExecutable("mpirun", pathEnv());
  MpiImpl impl = detectMpi(mpirun);
  if (impl == MpiImpl::kMissing) {
    throw UsageError("MPI support has not been built.  If this is not expected, ensure MPI is installed "
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
  validateOptions(options);
  if (options.checkBuild) {
    // Nothing to clean up here: let Ctrl-C end the (possibly slow) import probes directly.
    sigset_t all;
    sigfillset(&all);
    sigprocmask(SIG_UNBLOCK, &all, nullptr);
    say(1, formatBuildInfo(probeBuild()));
    return 0;
  }

  std::vector<HostSlots> hosts;
  if (options.hostDiscoveryScript.has_value()) {
    hosts = discoverHostsOnce(options);
  } else if (options.hostfile.has_value()) {
    hosts = parseHostfile(*options.hostfile);
  } else if (options.hosts.has_value()) {
    hosts = parseHosts(*options.hosts);
  }
  if (options.elastic()) {
    // Elastic flags are accepted; without an elastic driver the job runs with a fixed set of
    // processes on the hosts known now.
    if (!options.numProc.has_value()) options.numProc = options.minNumProc.value_or(totalSlots(hosts));
    if (options.maxNumProc.has_value() && *options.numProc > *options.maxNumProc) options.numProc = options.maxNumProc;
    say(2, "horovodrun: warning: elastic mode is not implemented by this launcher yet; running a static job with " +
               std::to_string(*options.numProc) + " processes\n");
  }
  if (hosts.empty()) {
    if (options.hostDiscoveryScript.has_value()) throw LaunchError("the host discovery script found no hosts");
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
