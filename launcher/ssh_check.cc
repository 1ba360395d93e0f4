#include "ssh_check.h"

#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <sstream>

#include "env.h"
#include "options.h"
#include "process.h"

namespace hvd::launcher {
namespace {

constexpr int kMaxAttempts = 5;
constexpr int kMaxConnectTimeoutSeconds = 10;
constexpr auto kRetryDelay = std::chrono::milliseconds(500);
constexpr time_t kCacheSeconds = 60 * 60;

using Clock = std::chrono::steady_clock;

struct Check {
  std::string host;
  int attempts = 0;
  pid_t pid = -1;
  int fd = -1;
  std::string output;
  bool done = false;
  bool ok = false;
  int status = 0;
  Clock::time_point startAt = Clock::now();
};

std::string cacheFile() {
  const char* home = std::getenv("HOME");
  std::string dir;
  if (home != nullptr && *home != '\0') {
    dir = home;
  } else if (passwd* pw = getpwuid(getuid()); pw != nullptr) {
    dir = pw->pw_dir;
  } else {
    return "";
  }
  return dir + "/.horovod/ssh_check_cache";
}

bool cachedOk(const std::string& key) {
  std::string path = cacheFile();
  if (path.empty()) return false;
  std::ifstream in(path);
  std::string k;
  long long when = 0;
  time_t now = time(nullptr);
  while (in >> k >> when) {
    if (k == key && now - when >= 0 && now - when < kCacheSeconds) return true;
  }
  return false;
}

void rememberOk(const std::string& key) {
  std::string path = cacheFile();
  if (path.empty()) return;
  std::string dir = path.substr(0, path.rfind('/'));
  mkdir(dir.c_str(), 0700);
  // Keep the fresh entries of other keys; write to a temporary file and rename, so concurrent
  // launchers never read a torn file.
  std::ostringstream kept;
  {
    std::ifstream in(path);
    std::string k;
    long long when = 0;
    time_t now = time(nullptr);
    while (in >> k >> when) {
      if (k != key && now - when < kCacheSeconds) kept << k << " " << when << "\n";
    }
  }
  kept << key << " " << static_cast<long long>(time(nullptr)) << "\n";
  std::string tmp = path + ".tmp." + std::to_string(getpid());
  {
    std::ofstream out(tmp);
    out << kept.str();
    if (!out) return;
  }
  std::rename(tmp.c_str(), path.c_str());
}

void startAttempt(Check& c, const std::vector<std::string>& baseArgs, Deadline deadline) {
  SpawnRequest request;
  request.path = baseArgs[0];
  request.argv = baseArgs;
  long left = static_cast<long>(deadline.remaining().count() / 1000);
  long connectTimeout = std::clamp<long>(left, 1, kMaxConnectTimeoutSeconds);
  request.argv.push_back("-o");
  request.argv.push_back("ConnectTimeout=" + std::to_string(connectTimeout));
  request.argv.push_back(c.host);
  request.argv.push_back("true");
  EnvMap own = inheritedEnvironment();
  request.env = renderEnvironment({&own});
  request.mergeStderr = true;
  SpawnedProcess p = spawnProcess(request);
  c.pid = p.pid;
  c.fd = p.stdoutFd;
  c.output.clear();
  ++c.attempts;
}

void stopAll(std::vector<Check>& checks) {
  for (auto& c : checks) {
    if (c.pid > 0) {
      kill(-c.pid, SIGKILL);
      waitpid(c.pid, nullptr, 0);
      c.pid = -1;
    }
    if (c.fd >= 0) {
      close(c.fd);
      c.fd = -1;
    }
  }
}

std::string joinHosts(const std::vector<std::string>& hosts) {
  std::string out;
  for (const auto& h : hosts) out += (out.empty() ? "" : ", ") + h;
  return out;
}

}  // namespace

std::string sshCacheKey(const std::vector<std::string>& hosts, const std::vector<std::string>& sshBaseArgs) {
  std::vector<std::string> sorted = hosts;
  std::sort(sorted.begin(), sorted.end());
  // FNV-1a over the sorted hosts and the ssh options (port, identity): stable across runs.
  uint64_t hash = 1469598103934665603ull;
  auto mix = [&](const std::string& s) {
    for (unsigned char ch : s) {
      hash ^= ch;
      hash *= 1099511628211ull;
    }
    hash ^= 0xff;
    hash *= 1099511628211ull;
  };
  for (const auto& h : sorted) mix(h);
  for (size_t i = 1; i < sshBaseArgs.size(); ++i) mix(sshBaseArgs[i]);
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(hash));
  return buf;
}

void checkSshHosts(const std::vector<std::string>& hosts, const std::vector<std::string>& baseArgs, Deadline deadline,
                   bool useCache, bool verbose, int signalFd) {
  if (hosts.empty()) return;
  std::string key = sshCacheKey(hosts, baseArgs);
  if (useCache && cachedOk(key)) {
    if (verbose) std::fprintf(stderr, "horovodrun: ssh to %s verified earlier (cached)\n", joinHosts(hosts).c_str());
    return;
  }
  std::vector<Check> checks;
  for (const auto& h : hosts) {
    Check c;
    c.host = h;
    checks.push_back(c);
  }
  for (auto& c : checks) startAttempt(c, baseArgs, deadline);

  while (true) {
    bool pending = false;
    for (auto& c : checks) pending = pending || !c.done;
    if (!pending) break;
    if (deadline.expired()) {
      stopAll(checks);
      std::vector<std::string> late;
      for (auto& c : checks) {
        if (!c.done) late.push_back(c.host);
      }
      throw LaunchError("Timed out waiting for ssh to connect to " + joinHosts(late) +
                        ". Please check connectivity between servers. You may need to increase the "
                        "--start-timeout parameter if you have too many servers.");
    }
    std::vector<pollfd> fds = {{signalFd, POLLIN, 0}};
    std::vector<Check*> owners;
    for (auto& c : checks) {
      if (c.fd >= 0) {
        fds.push_back({c.fd, POLLIN, 0});
        owners.push_back(&c);
      }
    }
    poll(fds.data(), fds.size(), deadline.pollTimeoutMs(50));
    if (fds[0].revents != 0) {
      signalfd_siginfo info;
      while (read(signalFd, &info, sizeof(info)) == static_cast<ssize_t>(sizeof(info))) {
        if (info.ssi_signo != SIGCHLD) {
          stopAll(checks);
          throw Interrupted(static_cast<int>(info.ssi_signo));
        }
      }
    }
    for (size_t k = 1; k < fds.size(); ++k) {
      if (fds[k].revents == 0) continue;
      Check& c = *owners[k - 1];
      char buf[4096];
      ssize_t n = read(c.fd, buf, sizeof(buf));
      if (n > 0) {
        if (c.output.size() < 16384) c.output.append(buf, static_cast<size_t>(n));
      } else if (n == 0 || errno != EAGAIN) {
        close(c.fd);
        c.fd = -1;
      }
    }
    auto now = Clock::now();
    for (auto& c : checks) {
      if (c.done) continue;
      if (c.pid < 0) {
        if (now >= c.startAt) startAttempt(c, baseArgs, deadline);
        continue;
      }
      int status = 0;
      if (waitpid(c.pid, &status, WNOHANG) != c.pid) continue;
      c.pid = -1;
      if (c.fd >= 0) {
        close(c.fd);
        c.fd = -1;
      }
      c.status = status;
      if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
        c.done = c.ok = true;
        if (verbose) std::fprintf(stderr, "horovodrun: ssh to %s works\n", c.host.c_str());
      } else if (c.attempts >= kMaxAttempts) {
        c.done = true;
      } else {
        c.startAt = now + kRetryDelay;  // retried on a later iteration
      }
    }
  }

  std::vector<std::string> failed;
  for (auto& c : checks) {
    if (c.ok) continue;
    failed.push_back(c.host);
    std::string out = c.output;
    while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
    std::fprintf(stderr, "horovodrun: ssh to host %s failed (%s, %d attempts):\n%s\n", c.host.c_str(),
                 describeStatus(c.status).c_str(), c.attempts, out.empty() ? "(no output)" : out.c_str());
  }
  if (!failed.empty()) throw LaunchError("could not connect to some hosts via ssh: " + joinHosts(failed));
  if (useCache) rememberOk(key);
}

}  // namespace hvd::launcher
