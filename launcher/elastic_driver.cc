#include "elastic_driver.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <stdexcept>

#include "process.h"

namespace hvd::launcher {
namespace {

constexpr std::chrono::milliseconds kTick{50};

void say(const std::string& text) { writeAll(2, text.data(), text.size()); }

// The Supervisor's view of the workers, for the driver judging stragglers.
class SupervisorProbe : public elastic::ExitProbe {
 public:
  explicit SupervisorProbe(Supervisor& supervisor) : supervisor_(supervisor) {}
  void reportExited() override { supervisor_.reapExited(); }
  bool exiting(int id) override {
    for (const auto& p : supervisor_.workers()) {
      if (p.elasticId == id && !p.exited && !p.remote && processExiting(p.pid)) return true;
    }
    return false;
  }

 private:
  Supervisor& supervisor_;
};

void kill(Supervisor& supervisor, int id) {
  for (auto& p : supervisor.workers()) {
    if (p.elasticId != id || p.exited) continue;
    if (p.remote && p.stdinFd >= 0) {
      close(p.stdinFd);
      p.stdinFd = -1;
    }
    if (::kill(-p.pid, SIGKILL) != 0) ::kill(p.pid, SIGKILL);
  }
}

void writeStatusFile(const std::string& path, const std::string& message) {
  if (path.empty()) return;
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd >= 0) {
    writeAll(fd, message.data(), message.size());
    close(fd);
  }
}

}  // namespace

ElasticDriver::ElasticDriver(ElasticSettings settings, std::unique_ptr<Discovery> discovery, HostRegistry registry,
                             std::shared_ptr<Store> store, SpawnFn spawn)
    : statusFile_(settings.statusFile),
      discovery_(std::move(discovery)),
      driver_(settings, std::make_shared<HostRegistry>(std::move(registry)), std::move(store),
              std::chrono::steady_clock::now()),
      spawn_(std::move(spawn)) {}

void ElasticDriver::workerExited(const WorkerProcess& process) {
  bool success = WIFEXITED(process.status) && WEXITSTATUS(process.status) == 0;
  driver_.workerExited(process.elasticId, success, describeStatus(process.status), std::chrono::steady_clock::now());
  execute();  // log lines only: an exit starts nothing
}

std::chrono::milliseconds ElasticDriver::tick(Supervisor& supervisor) {
  supervisor_ = &supervisor;
  if (supervisor.terminating()) return std::chrono::milliseconds(100);
  auto now = std::chrono::steady_clock::now();
  try {
    if (auto hosts = discovery_->discover(now)) driver_.hostsDiscovered(*hosts);
  } catch (const std::exception& e) {
    driver_.fail(e.what());
  }
  SupervisorProbe probe(supervisor);
  driver_.tick(now, &probe);
  execute();
  return kTick;
}

void ElasticDriver::execute() {
  // Workers start only from tick(), which set supervisor_ (a worker exits after it started).
  Supervisor& supervisor = *supervisor_;
  for (auto actions = driver_.takeActions(); !actions.empty(); actions = driver_.takeActions()) {
    for (const elastic::Action& a : actions) {
      switch (a.kind) {
        case elastic::Action::Kind::kLog: say("horovodrun: elastic: " + a.text + "\n"); break;
        case elastic::Action::Kind::kStart:
          try {
            WorkerProcess p = spawn_(a.slot, a.id);
            p.elasticId = a.id;
            supervisor.add(std::move(p));
          } catch (const std::exception& e) {
            driver_.startFailed(a.id, e.what(), std::chrono::steady_clock::now());
            execute();  // its lines now, before the round's other starts
          }
          break;
        case elastic::Action::Kind::kKill: kill(supervisor, a.id); break;
        case elastic::Action::Kind::kLaunch:  // landed placement only (Ray, Spark): horovodrun chooses slots
          throw std::logic_error("horovodrun's elastic driver was asked to launch a worker without a slot");
        case elastic::Action::Kind::kFinish:
          say("horovodrun: error: " + a.text + "\n");
          writeStatusFile(statusFile_, a.text);
          supervisor.terminate();
          break;
      }
    }
  }
}

}  // namespace hvd::launcher
