// Starting child processes: fork/exec into a new session and process group, with pipes for stdout/stderr
// (and optionally stdin), the signal mask and dispositions reset, and PR_SET_PDEATHSIG so a
// child notices when the launcher dies even by SIGKILL. An exec failure is reported to the
// parent through a close-on-exec pipe, so spawnProcess either returns a running child or throws.
//
// Called from the launcher's main thread only (PDEATHSIG is tied to the forking thread).
#pragma once

#include <sys/types.h>

#include <set>
#include <string>
#include <vector>

namespace hvd::launcher {

struct SpawnRequest {
  std::string path;               // executable to exec (absolute or relative to cwd)
  std::vector<std::string> argv;  // argv[0] included
  std::vector<std::string> env;   // "K=V"
  bool stdinPipe = false;         // else stdin is /dev/null
  bool newProcessGroup = true;   // setsid(): own session and process group (pgid = pid)
  bool mergeStderr = false;       // stderr goes to the stdout pipe
  bool inheritStdio = false;      // stdin/stdout/stderr are the launcher's own (no pipes)
};

struct SpawnedProcess {
  pid_t pid = -1;
  int stdoutFd = -1;  // read ends, non-blocking, close-on-exec (-1 with inheritStdio)
  int stderrFd = -1;  // -1 with mergeStderr
  int stdinFd = -1;   // write end, close-on-exec (only with stdinPipe)
};

// Throws hvd::Error "cannot execute <path>: <errno text>" if fork or exec fails.
SpawnedProcess spawnProcess(const SpawnRequest& request);

// Resolves a command name like execvp: names containing '/' are checked as paths, others are
// searched in `pathEnv`. Returns "" if no executable file is found.
std::string resolveExecutable(const std::string& name, const std::string& pathEnv);
// Why resolveExecutable(name, pathEnv) found nothing, for the user. `exists`: a file of that name
// is there but cannot run ("<path> is a directory", "<path> is not executable (...)"); else the
// reason is "<path>: no such file" or "not on PATH".
struct NotExecutable {
  bool exists = false;
  std::string reason;
};
NotExecutable whyNotExecutable(const std::string& name, const std::string& pathEnv);

// Signals the launcher handles through signalfd: blocked in the launcher (call before any thread
// starts so every thread inherits the mask), unblocked in children.
void blockLauncherSignals();
// A signalfd for SIGCHLD, SIGINT, SIGTERM, SIGHUP (non-blocking, close-on-exec).
int launcherSignalFd();

// The orphan guard: a small process forked at startup (before any thread) that outlives a
// launcher killed by SIGKILL and then terminates every worker process group it was told about
// (SIGTERM, SIGKILL 2 s later). PR_SET_PDEATHSIG alone only reaches a worker's first process,
// not the processes it started. On a clean exit the launcher dismisses the guard first.
void startOrphanGuard();
void guardProcessGroup(pid_t pgid);  // no-op without a guard
void dismissOrphanGuard();           // the job ended normally: forget every group

// Writes all bytes, retrying EINTR and short writes. Returns false on error (e.g. EPIPE).
bool writeAll(int fd, const char* data, size_t bytes);

const char* signalName(int signal);  // "SIGKILL"

// The process groups that hold a process stopped by a signal (SIGSTOP, SIGTSTP: state T in
// /proc/<pid>/stat), from one pass over /proc. A worker's group holds the worker and whatever it
// started. Traced processes (state t) are not counted: LeakSanitizer's exit check ptrace-stops
// every thread of a process that is only exiting, and so does a debugger at a breakpoint.
std::set<pid_t> processGroupsWithAStoppedProcess();

// "exit status 3" / "signal 9 (SIGKILL)" for a waitpid status.
std::string describeStatus(int status);
// Whether the local process `pid` (a child of ours) is on its way out but not yet reapable: a
// killed process closes its files (its peers see it gone) a little before waitpid can report it,
// longer when it is large or the machine is loaded. True when /proc/<pid>/stat shows a zombie
// leader (other threads still exiting) or the kernel's exiting flag (PF_EXITING).
bool processExiting(pid_t pid);
// Shell-style exit code for a waitpid status: the code, or 128 + signal.
int exitCodeOf(int status);

// Waits for `pid`, a child that stays in the launcher's process group (a foreground mpirun or
// jsrun, which reads the terminal), and returns its exitCodeOf. Signals arriving on `signalFd`
// (launcherSignalFd) are forwarded: the first one sent to the launcher alone is passed on as is
// (the child tears its job down), a later one kills the child outright. A terminal's Ctrl-C
// (SI_KERNEL) reached the child already through the shared process group, so the first one is
// not sent again.
int waitForegroundChild(pid_t pid, int signalFd);

}  // namespace hvd::launcher
