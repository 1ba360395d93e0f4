// Before starting anything remote, every remote host must accept a non-interactive ssh login:
// `ssh <base args> -o ConnectTimeout=<t> host true`, all hosts in parallel, up to 5 attempts per
// host, everything bounded by the start timeout.
//
// Successful checks are remembered for 60 minutes in ~/.horovod/ssh_check_cache, keyed by the
// host list, ssh port and identity file (--disable-cache skips the cache).
#pragma once

#include <string>
#include <vector>

#include "common/deadline.h"

namespace hvd::launcher {

// Throws LaunchError: "Timed out waiting for ssh to connect to <hosts>. Please check
// connectivity between servers. ..." when the deadline passes, or, after printing each failing
// host's ssh output, "could not connect to some hosts via ssh: <hosts>".
// signalFd: the launcher's signalfd; SIGINT/SIGTERM/SIGHUP stop the checks and throw Interrupted.
void checkSshHosts(const std::vector<std::string>& hosts, const std::vector<std::string>& sshBaseArgs,
                   Deadline deadline, bool useCache, bool verbose, int signalFd);

// Kept as its own function so the cache key is testable and stable across runs.
std::string sshCacheKey(const std::vector<std::string>& hosts, const std::vector<std::string>& sshBaseArgs);

}  // namespace hvd::launcher
