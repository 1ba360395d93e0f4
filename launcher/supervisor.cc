#include "supervisor.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <set>

#include "process.h"

namespace hvd::launcher {
namespace {

void say(int fd, const std::string& text) { writeAll(fd, text.data(), text.size()); }

std::string failureDetail(const WorkerProcess& w) {
  std::string where = "Process " + std::to_string(w.slot.rank) + " ran on host " + w.slot.hostname;
  if (!w.remote) {
    if (WIFSIGNALED(w.status)) {
      int sig = WTERMSIG(w.status);
      return where + " and was killed by signal " + std::to_string(sig) + " (" + signalName(sig) + ").";
    }
    return where + " and exited with status " + std::to_string(WEXITSTATUS(w.status)) + ".";
  }
  where += " (over ssh)";
  if (WIFSIGNALED(w.status)) {
    int sig = WTERMSIG(w.status);
    return where + "; the ssh client was killed by signal " + std::to_string(sig) + " (" + signalName(sig) + ").";
  }
  int code = WEXITSTATUS(w.status);
  if (code == 255) return where + "; ssh failed (exit status 255): see the ssh error in its stderr above.";
  if (code > 128 && code < 128 + 32) {
    int sig = code - 128;
    return where + "; the remote process was killed by signal " + std::to_string(sig) + " (" + signalName(sig) +
           ") or exited with status " + std::to_string(code) + ".";
  }
  return where + " and exited with status " + std::to_string(code) + ".";
}

}  // namespace

Supervisor::Supervisor(int signalFd, std::string statusFile, bool verbose)
    : signalFd_(signalFd), statusFile_(std::move(statusFile)), verbose_(verbose) {}

void Supervisor::add(WorkerProcess worker) {
  guardProcessGroup(worker.pid);
  workers_.push_back(std::move(worker));
}

bool Supervisor::allExited() const {
  for (const auto& w : workers_) {
    if (!w.exited) return false;
  }
  return true;
}

void Supervisor::closeStdin(WorkerProcess& w) {
  if (w.stdinFd >= 0) {
    close(w.stdinFd);
    w.stdinFd = -1;
  }
}

void Supervisor::readFrom(WorkerProcess& w, int& fd, LineForwarder& forwarder, bool untilEof) {
  char buf[65536];
  // Bounded per call so one chatty worker cannot starve the others or the signal fd.
  for (int round = 0; fd >= 0 && (untilEof || round < 16); ++round) {
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n > 0) {
      forwarder.feed(buf, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    forwarder.finish();  // EOF or error: the stream is over
    close(fd);
    fd = -1;
  }
}

void Supervisor::drain(WorkerProcess& w) {
  // Non-blocking: a grandchild may still hold the pipe open, so EOF may never come.
  if (w.stdoutFd >= 0) readFrom(w, w.stdoutFd, *w.out, true);
  if (w.stderrFd >= 0) readFrom(w, w.stderrFd, *w.err, true);
}

void Supervisor::reap() {
  for (auto& w : workers_) {
    if (w.exited) continue;
    int status = 0;
    pid_t r = waitpid(w.pid, &status, WNOHANG);
    if (r == w.pid) {
      w.exited = true;
      w.status = status;
      onExit(w);
    }
  }
}

void Supervisor::onExit(WorkerProcess& w) {
  closeStdin(w);
  drain(w);  // its last words come before our report
  bool failed = !(WIFEXITED(w.status) && WEXITSTATUS(w.status) == 0);
  if (verbose_) {
    say(2, "horovodrun: process " + std::to_string(w.slot.rank) + " on " + w.slot.hostname + " ended with " +
               describeStatus(w.status) + "\n");
  }
  if (policy_ != nullptr) {
    if (!terminating_) policy_->workerExited(w);  // once terminating, every exit is ours
    return;
  }
  if (!failed || failedIndex_.has_value() || terminating_) return;
  failedIndex_ = static_cast<int>(&w - workers_.data());
  int code = exitCodeOf(w.status);
  std::string rank = std::to_string(w.slot.rank);
  say(1, "Process " + rank + " exit with status code " + std::to_string(code) + ".\n");
  say(1, failureDetail(w) + "\n");
  stoppedIndex_ = firstStoppedWorker();
  if (stoppedIndex_.has_value()) {
    const auto& stopped = workers_[*stoppedIndex_];
    say(1, "Process " + std::to_string(stopped.slot.rank) + " on host " + stopped.slot.hostname +
               " is stopped (SIGSTOP or SIGTSTP): its peers fail when it stops answering them.\n");
  }
  if (!allExited()) {
    say(1, "Terminating remaining workers after failure of Process " + rank + ".\n");
    beginTermination();
  }
}

std::optional<int> Supervisor::firstStoppedWorker() const {
  std::optional<int> first;
  const std::set<pid_t> stopped = processGroupsWithAStoppedProcess();
  for (size_t i = 0; i < workers_.size(); ++i) {
    const auto& w = workers_[i];
    if (w.exited || w.remote || !stopped.contains(w.pid)) continue;
    if (!first.has_value() || w.slot.rank < workers_[*first].slot.rank) first = static_cast<int>(i);
  }
  return first;
}

void Supervisor::signalWorker(const WorkerProcess& w, int sig) {
  if (kill(-w.pid, sig) != 0) kill(w.pid, sig);
  // A stopped process only acts on SIGTERM once it runs again (SIGKILL needs no help).
  if (sig != SIGKILL && kill(-w.pid, SIGCONT) != 0) kill(w.pid, SIGCONT);
}

void Supervisor::beginTermination() {
  if (terminating_) return;
  terminating_ = true;
  for (auto& w : workers_) {
    if (w.exited) continue;
    if (w.remote) {
      closeStdin(w);  // the remote wrapper sends SIGTERM (and SIGCONT) to the remote process group
    } else {
      signalWorker(w, SIGTERM);
    }
  }
  killAt_ = std::chrono::steady_clock::now() + kGracePeriod;
}

void Supervisor::killRemaining(int sig) {
  for (auto& w : workers_) {
    if (w.exited) continue;
    closeStdin(w);
    signalWorker(w, sig);
  }
}

void Supervisor::handleSignals() {
  signalfd_siginfo info;
  while (read(signalFd_, &info, sizeof(info)) == static_cast<ssize_t>(sizeof(info))) {
    int sig = static_cast<int>(info.ssi_signo);
    if (sig == SIGCHLD) continue;  // reaped below, once per batch
    if (interruptSignal_ == 0) {
      interruptSignal_ = sig;
      say(2, std::string("horovodrun: received ") + signalName(sig) + ", terminating the workers\n");
      beginTermination();
    } else {
      say(2, std::string("horovodrun: received ") + signalName(sig) + " again, killing the workers\n");
      killRemaining(SIGKILL);
    }
  }
  reap();
}

int Supervisor::run() {
  std::vector<pollfd> fds;
  struct Source {
    size_t worker;
    bool isStderr;
  };
  std::vector<Source> sources;
  reap();  // a worker may have exited before we started polling
  int policyWaitMs = -1;
  if (policy_ != nullptr) policyWaitMs = static_cast<int>(policy_->tick(*this).count());
  while (!allExited() || (policy_ != nullptr && !terminating_ && interruptSignal_ == 0 && policy_->keepRunning())) {
    fds.clear();
    sources.clear();
    fds.push_back({signalFd_, POLLIN, 0});
    for (size_t i = 0; i < workers_.size(); ++i) {
      if (workers_[i].stdoutFd >= 0) {
        fds.push_back({workers_[i].stdoutFd, POLLIN, 0});
        sources.push_back({i, false});
      }
      if (workers_[i].stderrFd >= 0) {
        fds.push_back({workers_[i].stderrFd, POLLIN, 0});
        sources.push_back({i, true});
      }
    }
    int timeoutMs = -1;
    if (killAt_.has_value()) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*killAt_ - std::chrono::steady_clock::now());
      timeoutMs = static_cast<int>(std::max<int64_t>(0, left.count()) + 1);
    }
    if (policyWaitMs >= 0 && (timeoutMs < 0 || policyWaitMs < timeoutMs)) timeoutMs = policyWaitMs;
    int n = poll(fds.data(), fds.size(), timeoutMs);
    if (n < 0 && errno != EINTR) break;
    for (size_t k = 1; n > 0 && k < fds.size(); ++k) {
      if (fds[k].revents == 0) continue;
      auto& w = workers_[sources[k - 1].worker];
      if (sources[k - 1].isStderr) {
        readFrom(w, w.stderrFd, *w.err, false);
      } else {
        readFrom(w, w.stdoutFd, *w.out, false);
      }
    }
    if (n > 0 && fds[0].revents != 0) handleSignals();
    if (killAt_.has_value() && std::chrono::steady_clock::now() >= *killAt_) {
      killAt_.reset();
      killRemaining(SIGKILL);
    }
    if (policy_ != nullptr) {
      reap();
      policyWaitMs = static_cast<int>(policy_->tick(*this).count());
    }
  }

  // Every worker is gone. Take what is left in the pipes, then make sure no process of a
  // worker's group outlives the job.
  for (auto& w : workers_) {
    drain(w);
    if (w.stdoutFd >= 0) {
      w.out->finish();
      close(w.stdoutFd);
      w.stdoutFd = -1;
    }
    if (w.stderrFd >= 0) {
      w.err->finish();
      close(w.stderrFd);
      w.stderrFd = -1;
    }
    closeStdin(w);
    if (!w.remote) kill(-w.pid, SIGTERM);  // ESRCH when the group is empty, as it should be
  }

  if (interruptSignal_ != 0) return 128 + interruptSignal_;
  if (policy_ != nullptr) return policy_->exitCode();
  if (failedIndex_.has_value()) {
    const auto& w = workers_[*failedIndex_];
    std::string message =
        "Horovod detected that one or more processes exited with non-zero status, thus causing the job to be "
        "terminated. The first process to do so was:\nProcess name: " +
        std::to_string(w.slot.rank) + "\nExit code: " + std::to_string(exitCodeOf(w.status)) + "\n";
    if (stoppedIndex_.has_value()) {
      // The first to exit only gave up on a peer that had stopped: name that one.
      const auto& stopped = workers_[*stoppedIndex_];
      message =
          "Horovod detected that one or more processes stopped (SIGSTOP or SIGTSTP) and no longer answered "
          "their peers, thus causing the job to be terminated. The first process to do so was:\nProcess "
          "name: " +
          std::to_string(stopped.slot.rank) + "\nExit code: " + std::to_string(exitCodeOf(stopped.status)) +
          " (it was stopped when process " + std::to_string(w.slot.rank) + ", the first to exit, exited with code " +
          std::to_string(exitCodeOf(w.status)) + ")\n";
    }
    say(2, message);
    if (!statusFile_.empty()) {
      int fd = open(statusFile_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
      if (fd >= 0) {
        writeAll(fd, message.data(), message.size());
        close(fd);
      }
    }
    return 1;
  }
  return 0;
}

void Supervisor::abort(const std::string& reason) {
  if (!reason.empty()) say(2, "horovodrun: " + reason + "\n");
  beginTermination();
  run();
}

}  // namespace hvd::launcher
