// Starting a worker on a remote host with OpenSSH:
//   ssh -o PasswordAuthentication=no -o StrictHostKeyChecking=no -o BatchMode=yes [-p P] [-i F]
//       host 'cd <cwd> >/dev/null 2>&1 ; exec env K=V ... /bin/sh -c <wrapper> horovod-worker <command>'
// The remote wrapper (POSIX sh):
//   * reads HOROVOD_SECRET_KEY from the first line of its stdin (so the secret is on no command
//     line, local or remote),
//   * when the launcher detected the interface itself (no --network-interface), sets
//     HOROVOD_GLOO_IFACE / NCCL_SOCKET_IFNAME to the interface that routes to the rendezvous
//     address on the remote host (`ip route get`), since interface names differ between hosts
//     (left unset if `ip` is missing: the core then picks an address itself),
//   * starts the command in its own session/process group (setsid),
//   * watches the rest of stdin: when it reaches EOF (the launcher closed it, or the ssh client
//     or the launcher died), it sends SIGTERM (then SIGCONT) to the worker's process group and SIGKILL 5 s later,
//   * exits with the worker's status (128 + signal when killed), which ssh passes back.
#pragma once

#include <string>
#include <vector>

#include "worker.h"

namespace hvd::launcher {

// POSIX shell single-quoting: abc -> 'abc', it's -> 'it'\''s'.
std::string shellQuote(const std::string& text);

// "ssh -o ... [-p P] [-i F]" up to (not including) the host.
std::vector<std::string> sshBaseArgs(const JobContext& job);

// The command string ssh runs on the remote host for one slot (contains no secret).
std::string remoteCommand(const JobContext& job, const SlotInfo& slot);

// Starts remoteCommand() on slot.hostname with ssh, or with `blaunch <host> <command>` when
// job.blaunchPath is set (remote_launcher.h): the wrapper and the secret on stdin are the same.
// Throws hvd::Error if the client cannot be started.
WorkerProcess spawnRemoteWorker(const JobContext& job, const SlotInfo& slot);

}  // namespace hvd::launcher
