// The built-in launch path (--gloo, the default): classify hosts as local or remote, pick the
// rendezvous address and interfaces, check ssh to every remote host, start the rendezvous
// server, start one worker per slot (fork/exec locally, ssh remotely) and supervise them.
#pragma once

#include <vector>

#include "hosts.h"
#include "options.h"

namespace hvd::launcher {

// Returns the launcher's exit code. Throws UsageError / LaunchError / Interrupted before any
// worker has started; once workers run, failures are reported through the exit code.
int runGlooJob(const Options& options, const std::vector<HostSlots>& hosts, int signalFd);

// Start timeout in seconds: --start-timeout, else $HOROVOD_START_TIMEOUT, else 30.
double startTimeoutSeconds(const Options& options);

}  // namespace hvd::launcher
