// The built-in launch path (--gloo, the default): classify hosts as local or remote, pick the
// rendezvous address and interfaces, check ssh to every remote host, start the rendezvous
// server, start one worker per slot (fork/exec locally, ssh remotely) and supervise them.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "hosts.h"
#include "options.h"
#include "worker.h"

namespace hvd::launcher {

// Returns the launcher's exit code. Throws UsageError / LaunchError / Interrupted before any
// worker has started; once workers run, failures are reported through the exit code.
int runGlooJob(const Options& options, const std::vector<HostSlots>& hosts, int signalFd);

// What every worker of a job launched here shares: the command (resolved on PATH when some host
// is this machine), working directory, output settings, ssh settings (when some host is remote),
// and the environment: inherited, malloc tunables, flag knobs. The caller adds the job's
// rendezvous variables and the secret. Throws UsageError for a command or ssh that is not found
// and an unusable --output-filename directory.
JobContext makeJobContext(const Options& options, bool anyLocal, bool anyRemote);

// Whether each host is this machine (workers forked here) or needs ssh.
std::map<std::string, bool> classifyHosts(const std::vector<std::string>& hosts);

// Start timeout in seconds: --start-timeout, else $HOROVOD_START_TIMEOUT, else 30.
double startTimeoutSeconds(const Options& options);

}  // namespace hvd::launcher
