// The elastic driver of horovodrun (--min-np, --host-discovery-script): the Supervisor's policy
// for elastic jobs. The policy itself (rounds, timeouts, blacklisting, the verdict) is
// hvd::elastic::RoundDriver (elastic/round_driver.h); this class feeds it what the launcher
// learns (discovery's hosts, worker exits) and executes its actions: its log lines go to stderr
// prefixed "horovodrun: elastic: ", a worker starts through the spawn function on the slot the
// driver chose, a straggler is killed (SIGKILL to its process group; an ssh worker's stdin is
// closed first), and a failed job prints "horovodrun: error: <message>", writes the message to
// the status file (horovod.run) and terminates every worker.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "discovery.h"
#include "elastic/host_registry.h"
#include "elastic/round_driver.h"
#include "supervisor.h"

namespace hvd {
class Store;
}

namespace hvd::launcher {

using elastic::HostRegistry;

struct ElasticSettings : elastic::DriverSettings {
  std::string statusFile;  // horovod.run(): where a failure message goes
};

class ElasticDriver : public SupervisorPolicy {
 public:
  // Starts a worker for `slot` with elastic id `id` (its assignment 0 is already published).
  using SpawnFn = std::function<WorkerProcess(const SlotInfo& slot, int id)>;

  ElasticDriver(ElasticSettings settings, std::unique_ptr<Discovery> discovery, HostRegistry registry,
                std::shared_ptr<Store> store, SpawnFn spawn);

  void workerExited(const WorkerProcess& worker) override;
  std::chrono::milliseconds tick(Supervisor& supervisor) override;
  bool keepRunning() const override { return driver_.keepRunning(); }
  int exitCode() const override { return driver_.exitCode(); }

 private:
  // Executes the driver's pending actions (and those that executing them leaves).
  void execute();

  std::string statusFile_;
  std::unique_ptr<Discovery> discovery_;
  elastic::RoundDriver driver_;
  SpawnFn spawn_;
  Supervisor* supervisor_ = nullptr;  // the one whose tick() ran last
};

}  // namespace hvd::launcher
