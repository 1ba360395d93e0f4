// Supervisor: the launcher's main loop once workers run. One poll() over the signalfd and every
// worker's output pipes; forwards output, reaps children, and on the first failure (non-zero
// exit or death by signal) reports it Horovod's way and terminates the rest:
//   SIGTERM to every remaining local process group (ssh workers: their stdin is closed, which
//   makes the remote wrapper terminate the remote process group), then after a 5 s grace
//   SIGKILL to every remaining process group (ssh clients included).
// SIGINT/SIGTERM/SIGHUP to the launcher terminate all workers the same way; a second one
// SIGKILLs at once.
//
// Exit code of run(): 0 if every worker exited 0; 1 after a worker failure; 128 + signal when
// the launcher itself was interrupted.
//
// Elastic mode (later) plugs in here: a driver can add() workers for new slots between loop
// iterations and decide per exit whether the job fails; the loop itself does not depend on a
// fixed set of workers.
//
// Main thread only.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "worker.h"

namespace hvd::launcher {

class Supervisor {
 public:
  // signalFd: from launcherSignalFd(); not owned. statusFile: where to write the failure message
  // (for horovod.run), or "".
  Supervisor(int signalFd, std::string statusFile, bool verbose);

  // Takes ownership of the worker's fds.
  void add(WorkerProcess worker);

  // Runs until every worker exited. Returns the launcher's exit code.
  int run();

  // Terminates every started worker (used when starting the job fails half-way) and waits
  // for them, bounded by the grace period. Returns when all are gone.
  void abort(const std::string& reason);

  static constexpr std::chrono::seconds kGracePeriod{5};

 private:
  void handleSignals();
  void reap();
  void onExit(WorkerProcess& w);
  void readFrom(WorkerProcess& w, int& fd, LineForwarder& forwarder, bool untilEof);
  void drain(WorkerProcess& w);
  void beginTermination();
  void killRemaining(int signal);
  bool allExited() const;
  void closeStdin(WorkerProcess& w);

  int signalFd_;
  std::string statusFile_;
  bool verbose_;
  std::vector<WorkerProcess> workers_;
  std::optional<int> failedIndex_;      // first failing worker
  int interruptSignal_ = 0;             // signal that interrupted the launcher, if any
  bool terminating_ = false;
  std::optional<std::chrono::steady_clock::time_point> killAt_;
};

}  // namespace hvd::launcher
