#include "transport/shm/name_reaper.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>

#include "horovod/errors.h"

namespace hvd::shm {
namespace {

std::mutex mu;
int channel = -1;  // our end of the socket pair; -1 until started

// Names the helper holds; fixed storage, since the helper may not allocate (it is the child of a
// fork in a multithreaded process).
constexpr int kMaxNames = 256;
char names[kMaxNames][NameReaper::kMaxName + 1];
bool used[kMaxNames];

void forget(const char* name) {
  for (int i = 0; i < kMaxNames; ++i) {
    if (used[i] && std::strcmp(names[i], name) == 0) used[i] = false;
  }
}

void remember(const char* name) {
  forget(name);
  for (int i = 0; i < kMaxNames; ++i) {
    if (!used[i]) {
      std::strcpy(names[i], name);
      used[i] = true;
      return;
    }
  }
  shm_unlink(name);  // table full: drop it now rather than risk leaving it (never expected)
}

// The helper's whole life. Messages are "+name\n" and "-name\n".
[[noreturn]] void helperMain(int fd) {
  setsid();
  struct sigaction ignore{};
  ignore.sa_handler = SIG_IGN;
  sigaction(SIGINT, &ignore, nullptr);
  sigaction(SIGTERM, &ignore, nullptr);
  sigaction(SIGHUP, &ignore, nullptr);
  sigaction(SIGPIPE, &ignore, nullptr);
  // Out of the rank's process group now (a signal to the group no longer reaches us): the rank
  // may register names.
  const char ready = 'R';
  while (write(fd, &ready, 1) < 0 && errno == EINTR) {
  }
  int null = open("/dev/null", O_RDWR);
  if (null >= 0) {
    dup2(null, 0);
    dup2(null, 1);
    dup2(null, 2);
  }
  dup2(fd, 3);
  if (syscall(SYS_close_range, 4u, ~0u, 0u) != 0) {
    for (int i = 4; i < 65536; ++i) close(i);
  }
  char line[NameReaper::kMaxName + 3];
  size_t have = 0;
  char buf[4096];
  while (true) {
    ssize_t n = read(3, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // the rank is gone (or closed its end): clean up
    for (ssize_t i = 0; i < n; ++i) {
      if (buf[i] != '\n') {
        if (have < sizeof line - 1) line[have++] = buf[i];
        continue;
      }
      line[have] = '\0';
      if (have > 1 && line[0] == '+') remember(line + 1);
      if (have > 1 && line[0] == '-') forget(line + 1);
      have = 0;
    }
  }
  for (int i = 0; i < kMaxNames; ++i) {
    if (used[i]) shm_unlink(names[i]);
  }
  _exit(0);
}

}  // namespace

NameReaper& NameReaper::instance() {
  static NameReaper reaper;
  return reaper;
}

void NameReaper::start() {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
    throw Error(std::string("shm: cannot start the helper that removes named segments at exit: socketpair: ") +
                std::strerror(errno));
  }
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    helperMain(fds[1]);
  }
  int err = errno;
  ::close(fds[1]);
  if (pid < 0) {
    ::close(fds[0]);
    throw Error(std::string("shm: cannot start the helper that removes named segments at exit: fork: ") +
                std::strerror(err) + " (HOROVOD_SHM_NAMED=1 needs it; unset it to use anonymous segments)");
  }
  // Wait for the helper to leave our process group: until then a signal to the group (a
  // launcher ending the job) could kill it before it removes the names registered with it.
  char ready = 0;
  ssize_t n;
  do {
    n = ::read(fds[0], &ready, 1);
  } while (n < 0 && errno == EINTR);
  if (n != 1) {
    const int readErr = errno;
    ::close(fds[0]);
    throw Error(std::string("shm: the helper that removes named segments at exit did not start: ") +
                (n == 0 ? std::string("it exited") : std::strerror(readErr)));
  }
  channel = fds[0];
}

void NameReaper::send(char op, const std::string& name) {
  std::string msg = op + name + "\n";
  size_t done = 0;
  while (done < msg.size()) {
    ssize_t n = ::send(channel, msg.data() + done, msg.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      throw Error(std::string("shm: the helper that removes named segments at exit is gone: ") + std::strerror(errno));
    }
    done += static_cast<size_t>(n);
  }
}

void NameReaper::add(const std::string& name) {
  if (name.size() > kMaxName || name.find('\n') != std::string::npos) {
    throw Error("shm: segment name too long or malformed: '" + name + "'");
  }
  std::lock_guard<std::mutex> lock(mu);
  if (channel < 0) start();
  send('+', name);
}

void NameReaper::remove(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu);
  if (channel < 0) return;
  try {
    send('-', name);
  } catch (const Error&) {
    // The helper is gone; the name is unlinked already, which is all that matters.
  }
}

}  // namespace hvd::shm
