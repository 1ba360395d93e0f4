#include "discovery.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

#include "options.h"
#include "process.h"

namespace hvd::launcher {
namespace {

void say(const std::string& text) { writeAll(2, text.data(), text.size()); }

class FixedDiscovery : public Discovery {
 public:
  explicit FixedDiscovery(std::vector<HostSlots> hosts) : hosts_(std::move(hosts)) {}
  std::optional<std::vector<HostSlots>> discover(std::chrono::steady_clock::time_point) override {
    if (reported_) return std::nullopt;
    reported_ = true;
    return hosts_;
  }

 private:
  std::vector<HostSlots> hosts_;
  bool reported_ = false;
};

struct ScriptResult {
  bool ok = false;
  int exitCode = 0;  // or 128 + signal
  std::string output;
};

// Runs the script to completion or until `timeout`; stderr passes through to ours.
ScriptResult runScript(const std::string& script, std::chrono::milliseconds timeout) {
  SpawnRequest request;
  request.path = "/bin/sh";
  request.argv = {"/bin/sh", "-c", script};
  for (char** e = environ; *e != nullptr; ++e) request.env.emplace_back(*e);
  SpawnedProcess p = spawnProcess(request);
  ScriptResult result;
  auto deadline = std::chrono::steady_clock::now() + timeout;
  char buf[4096];
  bool timedOut = false;
  while (p.stdoutFd >= 0 || p.stderrFd >= 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timedOut = true;
      break;
    }
    pollfd fds[2];
    int n = 0;
    if (p.stdoutFd >= 0) fds[n++] = {p.stdoutFd, POLLIN, 0};
    if (p.stderrFd >= 0) fds[n++] = {p.stderrFd, POLLIN, 0};
    int r = poll(fds, n, static_cast<int>(left.count()));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) continue;
    for (int i = 0; i < n; ++i) {
      if (fds[i].revents == 0) continue;
      ssize_t got = read(fds[i].fd, buf, sizeof(buf));
      if (got < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      bool isOut = fds[i].fd == p.stdoutFd;
      if (got <= 0) {
        close(fds[i].fd);
        (isOut ? p.stdoutFd : p.stderrFd) = -1;
        continue;
      }
      if (isOut) {
        result.output.append(buf, static_cast<size_t>(got));
      } else {
        writeAll(2, buf, static_cast<size_t>(got));
      }
    }
  }
  if (timedOut) kill(-p.pid, SIGKILL);
  if (p.stdoutFd >= 0) close(p.stdoutFd);
  if (p.stderrFd >= 0) close(p.stderrFd);
  int status = 0;
  while (waitpid(p.pid, &status, 0) < 0 && errno == EINTR) {
  }
  result.exitCode = timedOut ? 128 + SIGKILL : exitCodeOf(status);
  result.ok = !timedOut && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  return result;
}

class ScriptDiscovery : public Discovery {
 public:
  ScriptDiscovery(std::string script, int defaultSlots, std::chrono::milliseconds interval,
                  std::chrono::milliseconds runTimeout, bool verbose)
      : script_(std::move(script)),
        defaultSlots_(defaultSlots),
        interval_(interval),
        runTimeout_(runTimeout),
        verbose_(verbose) {}

  std::optional<std::vector<HostSlots>> discover(std::chrono::steady_clock::time_point now) override {
    if (ranOnce_ && now < nextRun_) return std::nullopt;
    ScriptResult r = runScript(script_, runTimeout_);
    nextRun_ = std::chrono::steady_clock::now() + interval_;
    if (!r.ok) {
      if (!ranOnce_) {
        throw LaunchError("Failed to execute discovery script: " + script_ +
                          ". Exit code: " + std::to_string(r.exitCode));
      }
      say("horovodrun: host discovery script " + script_ + " failed (exit code " + std::to_string(r.exitCode) +
          "); keeping the last known hosts\n");
      return std::nullopt;
    }
    ranOnce_ = true;
    std::vector<HostSlots> hosts = parseDiscoveredHosts(r.output, defaultSlots_);
    if (verbose_) {
      std::string line = "horovodrun: discovered hosts:";
      for (const auto& h : hosts) line += " " + h.host + ":" + std::to_string(h.slots);
      say(line + "\n");
    }
    return hosts;
  }

 private:
  std::string script_;
  int defaultSlots_;
  std::chrono::milliseconds interval_;
  std::chrono::milliseconds runTimeout_;
  bool verbose_;
  bool ranOnce_ = false;
  std::chrono::steady_clock::time_point nextRun_{};
};

}  // namespace

std::unique_ptr<Discovery> fixedDiscovery(std::vector<HostSlots> hosts) {
  return std::make_unique<FixedDiscovery>(std::move(hosts));
}

std::unique_ptr<Discovery> scriptDiscovery(std::string script, int defaultSlots, std::chrono::milliseconds interval,
                                           std::chrono::milliseconds runTimeout, bool verbose) {
  return std::make_unique<ScriptDiscovery>(std::move(script), defaultSlots, interval, runTimeout, verbose);
}

}  // namespace hvd::launcher
