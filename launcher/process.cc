#include "process.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/close_range.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "common/check.h"

namespace hvd::launcher {
namespace {

sigset_t launcherSignalSet() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGCHLD);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  return set;
}

void makePipe(int fds[2]) { HVD_SYSCHECK(pipe2(fds, O_CLOEXEC) == 0, "pipe2"); }

void closeIf(int fd) {
  if (fd >= 0) close(fd);
}

// Child side after fork: only async-signal-safe calls until exec.
[[noreturn]] void childExec(const SpawnRequest& req, char* const* argv, char* const* envp, int stdinRead,
                            int stdoutWrite, int stderrWrite, int errorPipe, pid_t parent) {
  // A new session (and so a new process group, pgid = pid), as Horovod and torchrun do: the
  // group is what the supervisor signals, and with the kernel's autogroup scheduling each
  // worker gets its own CPU share instead of all workers sharing the launcher's.
  if (req.newProcessGroup) setsid();
  // Die with the launcher: a SIGKILLed launcher must not leave workers behind.
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() != parent) _exit(127);  // the launcher died before prctl took effect
  sigset_t empty;
  sigemptyset(&empty);
  sigprocmask(SIG_SETMASK, &empty, nullptr);
  // Ignored signals stay ignored across exec; the launcher ignores SIGPIPE, children must not.
  signal(SIGPIPE, SIG_DFL);
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  signal(SIGHUP, SIG_DFL);
  int devnull = -1;
  if (req.inheritStdio) {
    stdinRead = 0;
    stdoutWrite = 1;
    stderrWrite = 2;
  } else if (stdinRead < 0) {
    devnull = open("/dev/null", O_RDONLY);
    stdinRead = devnull;
  }
  if (!req.inheritStdio && (dup2(stdinRead, 0) < 0 || dup2(stdoutWrite, 1) < 0 || dup2(stderrWrite, 2) < 0)) {
    int err = errno;
    (void)!write(errorPipe, &err, sizeof(err));
    _exit(127);
  }
  // Nothing else of the launcher's leaks into the child (like Popen's close_fds).
  close_range(3, ~0U, CLOSE_RANGE_CLOEXEC);
  execve(req.path.c_str(), argv, envp);
  int err = errno;
  (void)!write(errorPipe, &err, sizeof(err));
  _exit(127);
}

int gGuardFd = -1;
pid_t gGuardPid = -1;

}  // namespace

void startOrphanGuard() {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return;  // best effort: no guard
  pid_t pid = fork();
  if (pid == 0) {
    // Keep the read end at a known number across close_range.
    int keep = fcntl(fds[0], F_DUPFD, 3);
    if (keep < 0) _exit(0);
    int devnull = open("/dev/null", O_RDWR);
    dup2(devnull, 0);
    dup2(devnull, 1);
    dup2(devnull, 2);
    dup2(keep, 3);
    close_range(4, ~0U, 0);
    setsid();  // out of the terminal's process group: Ctrl-C is the launcher's business
    std::vector<pid_t> groups;
    pid_t pgid = 0;
    while (true) {
      ssize_t n = read(3, &pgid, sizeof(pgid));
      if (n < 0 && errno == EINTR) continue;
      if (n != sizeof(pgid)) break;  // EOF: the launcher is gone
      if (pgid == 0) _exit(0);        // dismissed
      groups.push_back(pgid);
    }
    for (pid_t g : groups) kill(-g, SIGTERM);
    sleep(2);
    for (pid_t g : groups) kill(-g, SIGKILL);
    _exit(0);
  }
  close(fds[0]);
  if (pid < 0) {
    close(fds[1]);
    return;
  }
  gGuardFd = fds[1];
  gGuardPid = pid;
}

void guardProcessGroup(pid_t pgid) {
  if (gGuardFd >= 0 && pgid > 0) writeAll(gGuardFd, reinterpret_cast<const char*>(&pgid), sizeof(pgid));
}

void dismissOrphanGuard() {
  if (gGuardFd < 0) return;
  pid_t zero = 0;
  writeAll(gGuardFd, reinterpret_cast<const char*>(&zero), sizeof(zero));
  close(gGuardFd);
  gGuardFd = -1;
  waitpid(gGuardPid, nullptr, 0);  // it exits as soon as it reads the dismissal
}

SpawnedProcess spawnProcess(const SpawnRequest& req) {
  // Everything the child needs is prepared before fork: the launcher has other threads (the
  // rendezvous server), so the child may not allocate.
  std::vector<char*> argv;
  for (const auto& a : req.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (const auto& e : req.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  int out[2] = {-1, -1}, err[2] = {-1, -1}, in[2] = {-1, -1}, status[2];
  if (!req.inheritStdio) {
    makePipe(out);
    if (!req.mergeStderr) makePipe(err);
    if (req.stdinPipe) makePipe(in);
  }
  makePipe(status);

  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid == 0) {
    childExec(req, argv.data(), envp.data(), in[0], out[1], req.mergeStderr ? out[1] : err[1], status[1], parent);
  }
  int forkErrno = errno;
  closeIf(out[1]);
  closeIf(err[1]);
  closeIf(in[0]);
  closeIf(status[1]);
  if (pid < 0) {
    closeIf(out[0]);
    closeIf(err[0]);
    closeIf(in[1]);
    closeIf(status[0]);
    errno = forkErrno;
    HVD_SYSCHECK(false, "fork");
  }
  // setsid() ran before exec, so once the status pipe closes, kill(-pid) reaches the group.

  // The status pipe closes on a successful exec; otherwise it carries the child's errno.
  int childErrno = 0;
  ssize_t n;
  do {
    n = read(status[0], &childErrno, sizeof(childErrno));
  } while (n < 0 && errno == EINTR);
  close(status[0]);
  if (n == sizeof(childErrno)) {
    waitpid(pid, nullptr, 0);
    closeIf(out[0]);
    closeIf(err[0]);
    closeIf(in[1]);
    throw Error("cannot execute " + req.path + ": " + std::strerror(childErrno));
  }
  if (out[0] >= 0) fcntl(out[0], F_SETFL, O_NONBLOCK);
  if (err[0] >= 0) fcntl(err[0], F_SETFL, O_NONBLOCK);
  return {pid, out[0], err[0], in[1]};
}

std::string resolveExecutable(const std::string& name, const std::string& pathEnv) {
  auto executable = [](const std::string& p) {
    struct stat st{};
    return stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(p.c_str(), X_OK) == 0;
  };
  if (name.empty()) return "";
  if (name.find('/') != std::string::npos) return executable(name) ? name : "";
  std::stringstream dirs(pathEnv);
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    if (executable(candidate)) return candidate;
  }
  return "";
}

std::set<pid_t> processGroupsWithAStoppedProcess() {
  std::set<pid_t> groups;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return groups;
  while (const dirent* entry = readdir(proc)) {
    if (entry->d_name[0] < '0' || entry->d_name[0] > '9') continue;
    const std::string path = std::string("/proc/") + entry->d_name + "/stat";
    FILE* f = std::fopen(path.c_str(), "r");
    if (f == nullptr) continue;  // gone meanwhile
    char buf[512];
    size_t n = std::fread(buf, 1, sizeof buf - 1, f);
    std::fclose(f);
    buf[n] = '\0';
    // "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses; fields follow the last ')'.
    const char* close = std::strrchr(buf, ')');
    char state = 0;
    long ppid = 0, group = 0;
    if (close != nullptr && std::sscanf(close + 1, " %c %ld %ld", &state, &ppid, &group) == 3 && state == 'T') {
      groups.insert(static_cast<pid_t>(group));
    }
  }
  closedir(proc);
  return groups;
}

NotExecutable whyNotExecutable(const std::string& name, const std::string& pathEnv) {
  auto why = [](const std::string& p) -> std::string {
    struct stat st{};
    if (stat(p.c_str(), &st) != 0) return "";
    if (S_ISDIR(st.st_mode)) return p + " is a directory";
    if (!S_ISREG(st.st_mode)) return p + " is not a regular file";
    return p + " is not executable (make it executable with chmod +x, or put its interpreter before it, e.g. 'sh " + p +
           "' or 'python3 " + p + "')";
  };
  if (name.find('/') != std::string::npos) {
    std::string reason = why(name);
    if (reason.empty()) return {false, name + ": no such file"};
    return {true, reason};
  }
  // Like execvp: a file of that name on PATH that cannot run is what the user most likely meant.
  std::stringstream dirs(pathEnv);
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    std::string reason = why((dir.empty() ? "." : dir) + "/" + name);
    if (!reason.empty()) return {true, reason + " (found on PATH)"};
  }
  return {false, "not on PATH"};
}

void blockLauncherSignals() {
  sigset_t set = launcherSignalSet();
  sigprocmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

int launcherSignalFd() {
  sigset_t set = launcherSignalSet();
  int fd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
  HVD_SYSCHECK(fd >= 0, "signalfd");
  return fd;
}

bool writeAll(int fd, const char* data, size_t bytes) {
  while (bytes > 0) {
    ssize_t n = write(fd, data, bytes);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) {
        // A non-blocking destination (the user's terminal set so by someone else): wait.
        fd_set set;
        FD_ZERO(&set);
        FD_SET(fd, &set);
        select(fd + 1, nullptr, &set, nullptr, nullptr);
        continue;
      }
      return false;
    }
    data += n;
    bytes -= static_cast<size_t>(n);
  }
  return true;
}

const char* signalName(int sig) {
  switch (sig) {
    case SIGHUP: return "SIGHUP";
    case SIGINT: return "SIGINT";
    case SIGQUIT: return "SIGQUIT";
    case SIGILL: return "SIGILL";
    case SIGTRAP: return "SIGTRAP";
    case SIGABRT: return "SIGABRT";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGKILL: return "SIGKILL";
    case SIGUSR1: return "SIGUSR1";
    case SIGSEGV: return "SIGSEGV";
    case SIGUSR2: return "SIGUSR2";
    case SIGPIPE: return "SIGPIPE";
    case SIGALRM: return "SIGALRM";
    case SIGTERM: return "SIGTERM";
    case SIGXCPU: return "SIGXCPU";
    case SIGXFSZ: return "SIGXFSZ";
    case SIGSYS: return "SIGSYS";
    default: return "unknown signal";
  }
}

std::string describeStatus(int status) {
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    return "signal " + std::to_string(sig) + " (" + signalName(sig) + ")";
  }
  return "exit status " + std::to_string(WEXITSTATUS(status));
}

bool processExiting(pid_t pid) {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/stat", static_cast<int>(pid));
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[1024];
  ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0) return false;
  buf[n] = '\0';
  // "pid (comm) state ppid pgrp session tty_nr tpgid flags ...": comm may hold spaces and ')'.
  const char* rest = std::strrchr(buf, ')');
  if (rest == nullptr) return false;
  char state = 0;
  unsigned long flags = 0;
  if (std::sscanf(rest + 1, " %c %*d %*d %*d %*d %*d %lu", &state, &flags) != 2) return false;
  constexpr unsigned long kPfExiting = 0x4;  // include/linux/sched.h
  return state == 'Z' || state == 'X' || (flags & kPfExiting) != 0;
}

int exitCodeOf(int status) {
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return WEXITSTATUS(status);
}

int waitForegroundChild(pid_t pid, int signalFd) {
  int forwarded = 0;
  while (true) {
    pollfd pfd{signalFd, POLLIN, 0};
    poll(&pfd, 1, -1);
    signalfd_siginfo info;
    while (read(signalFd, &info, sizeof(info)) == static_cast<ssize_t>(sizeof(info))) {
      int sig = static_cast<int>(info.ssi_signo);
      if (sig == SIGCHLD) continue;
      if (info.ssi_code == SI_KERNEL && forwarded == 0) {
        ++forwarded;
        continue;
      }
      kill(pid, forwarded++ == 0 ? sig : SIGKILL);
    }
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) return exitCodeOf(status);
  }
}

}  // namespace hvd::launcher
