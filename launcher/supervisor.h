// Supervisor: the launcher's main loop once workers run. One poll() over the signalfd and every
// worker's output pipes; forwards output, reaps children, and on the first failure (non-zero
// exit or death by signal) reports it Horovod's way and terminates the rest:
//   SIGTERM to every remaining local process group, then SIGCONT (a stopped worker acts on the
//   SIGTERM at once) (ssh workers: their stdin is closed, which makes the remote wrapper
//   terminate the remote process group), then after a 5 s grace SIGKILL to every remaining
//   process group (ssh clients included). A local worker found stopped when the first one
//   failed is named as the cause in the final report (its peers failed because it stopped).
// SIGINT/SIGTERM/SIGHUP to the launcher terminate all workers the same way; a second one
// SIGKILLs at once.
//
// Exit code of run(): 0 if every worker exited 0; 1 after a worker failure; 128 + signal when
// the launcher itself was interrupted.
//
// Elastic mode plugs in a SupervisorPolicy (elastic_driver.h): then an exit is the policy's
// business (no termination of the others), the policy's tick() runs at least as often as it asks
// and may add() workers or terminate() the job, and the policy gives the exit code.
//
// Main thread only.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "worker.h"

namespace hvd::launcher {

class Supervisor;

class SupervisorPolicy {
 public:
  virtual ~SupervisorPolicy() = default;
  // A worker ended (its output is drained). Must not add() workers (tick() does).
  virtual void workerExited(const WorkerProcess& worker) = 0;
  // Runs after every loop iteration; returns how long the loop may wait before the next call.
  virtual std::chrono::milliseconds tick(Supervisor& supervisor) = 0;
  // Whether the job goes on while no worker runs (e.g. waiting for hosts).
  virtual bool keepRunning() const = 0;
  // The launcher's exit code once the loop ended (not interrupted by a signal).
  virtual int exitCode() const = 0;
};

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

  // Elastic jobs: the policy that decides about exits, ticks and the exit code (not owned).
  void setPolicy(SupervisorPolicy* policy) { policy_ = policy; }
  // Starts terminating every worker (SIGTERM, SIGKILL after the grace period); run() returns
  // once all are gone. For a policy that ends the job.
  void terminate() { beginTermination(); }
  bool terminating() const { return terminating_; }
  // Reaps the workers that exited since the loop last looked and reports each to the policy
  // (workerExited), now: for a policy about to act on news that may stem from such an exit.
  void reapExited() { reap(); }
  std::vector<WorkerProcess>& workers() { return workers_; }

  static constexpr std::chrono::seconds kGracePeriod{5};

 private:
  void handleSignals();
  void reap();
  void onExit(WorkerProcess& w);
  void readFrom(WorkerProcess& w, int& fd, LineForwarder& forwarder, bool untilEof);
  void drain(WorkerProcess& w);
  void beginTermination();
  void killRemaining(int signal);
  // Sends `sig` to a local worker's process group, then SIGCONT unless it is SIGKILL.
  static void signalWorker(const WorkerProcess& w, int sig);
  // The lowest-ranked running local worker with a stopped process in its group, if any.
  std::optional<int> firstStoppedWorker() const;
  bool allExited() const;
  void closeStdin(WorkerProcess& w);

  int signalFd_;
  std::string statusFile_;
  bool verbose_;
  std::vector<WorkerProcess> workers_;
  std::optional<int> failedIndex_;      // first failing worker
  std::optional<int> stoppedIndex_;     // a worker found stopped at the first failure: the culprit
  int interruptSignal_ = 0;             // signal that interrupted the launcher, if any
  bool terminating_ = false;
  std::optional<std::chrono::steady_clock::time_point> killAt_;
  SupervisorPolicy* policy_ = nullptr;
};

}  // namespace hvd::launcher
