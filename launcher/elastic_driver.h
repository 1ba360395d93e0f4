// The elastic driver: horovodrun's policy for elastic jobs (--min-np, --host-discovery-script).
// It keeps the job alive while hosts come and go and workers fail, forming numbered rounds of
// workers through the elastic rendezvous (store/elastic_protocol.h):
//
//   waiting for hosts --enough slots--> running --a worker asks for a new round, or fails-->
//   gathering --every live worker of the round asked (or the gather timeout killed the
//   stragglers)--> waiting for hosts --> running (next round) ...
//
// * Start: waits up to the elastic timeout for -np slots, then places min(available, max-np)
//   workers, hosts ordered by first appearance.
// * A worker exiting non-zero blacklists its host (cooldown: host_registry.h); the survivors see
//   HorovodInternalError, roll back, and call init() again, which asks the driver for their next
//   round, reporting the rank their engine lost. A worker reported lost (silent: paused, hung, cut
//   off) is killed at once, one that merely does not ask within the gather timeout too; either
//   way its host is blacklisted.
// * A new round keeps survivors on their hosts (hosts that had survivors first, in their old
//   rank order, so rank 0 holds the state to broadcast), starts new workers on new slots, and
//   tells workers whose slots are gone that they were removed.
// * When discovery changes the hosts so that the placement would change, the driver announces
//   it; workers raise HostsUpdatedInterrupt at their next commit and re-init.
// * The job ends: 0 when workers completed (the first exit 0 stops new rounds); 1 with a message
//   when the reset limit is exceeded, fewer than min-np slots stay available past the elastic
//   timeout, every worker of a round failed, every host is blacklisted for good, or no host of
//   the previous round survived (nothing to broadcast the state from).
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "discovery.h"
#include "host_registry.h"
#include "supervisor.h"

namespace hvd {
class Store;
}

namespace hvd::launcher {

struct ElasticSettings {
  int startNp = 1;            // -np: slots needed before the first round
  int minNp = 1;              // --min-np: slots needed for later rounds
  std::optional<int> maxNp;   // --max-np
  std::optional<int> resetLimit;
  std::chrono::milliseconds elasticTimeout{600000};
  std::chrono::milliseconds gatherTimeout{30000};
  std::string statusFile;     // horovod.run(): where a failure message goes
  bool verbose = false;
};

class ElasticDriver : public SupervisorPolicy {
 public:
  // Starts a worker for `slot` with elastic id `id` (its assignment 0 is already published).
  using SpawnFn = std::function<WorkerProcess(const SlotInfo& slot, int id)>;

  ElasticDriver(ElasticSettings settings, std::unique_ptr<Discovery> discovery, HostRegistry registry,
                std::shared_ptr<Store> store, SpawnFn spawn);

  void workerExited(const WorkerProcess& worker) override;
  std::chrono::milliseconds tick(Supervisor& supervisor) override;
  bool keepRunning() const override { return phase_ != Phase::kStopped && phase_ != Phase::kFinishing; }
  int exitCode() const override;

 private:
  using Clock = std::chrono::steady_clock;
  enum class Phase { kWaitingForHosts, kRunning, kGathering, kFinishing, kStopped };
  using SlotKey = std::pair<std::string, int>;  // (host, local rank)

  struct Worker {
    int id = 0;
    SlotInfo slot;           // its place in the latest round it joined
    int64_t published = 0;   // assignments written for it
    int64_t inits = 0;       // init() calls it made (from the store)
    bool alive = true;
    bool retired = false;    // told it was removed / the job ends, or killed as a straggler
    bool waiting() const { return alive && !retired && inits > published; }
  };

  void discover(Clock::time_point now);
  void refreshInits();
  std::vector<HostSlots> orderedHosts(Clock::time_point now) const;
  std::vector<SlotInfo> placement(Clock::time_point now) const;
  void formRound(Supervisor& supervisor, Clock::time_point now);
  void announceIfHostsChanged(Clock::time_point now);
  void gather(Supervisor& supervisor, Clock::time_point now);
  void beginReset(Clock::time_point now);
  void stop(Supervisor& supervisor, const std::string& message);
  void blacklistHost(const std::string& host, Clock::time_point now, const std::string& why);
  void tellWaiting(const std::string& message, bool abort);
  std::string workerName(const Worker& w) const;

  ElasticSettings settings_;
  std::unique_ptr<Discovery> discovery_;
  HostRegistry registry_;
  std::shared_ptr<Store> store_;
  SpawnFn spawn_;

  Phase phase_ = Phase::kWaitingForHosts;
  Clock::time_point waitDeadline_;
  Clock::time_point gatherStart_;
  int64_t round_ = -1;     // the latest round formed
  int resets_ = 0;
  int64_t events_ = -1;    // last value of the events counter read
  int nextId_ = 0;
  std::map<int, Worker> workers_;
  std::set<int> roundMembers_;        // ids placed in the latest round
  std::set<SlotKey> lastAnnounced_;   // placement last announced as a host change
  std::optional<std::string> stopMessage_;
  bool anySuccess_ = false;
  bool failedWhileFinishing_ = false;
};

}  // namespace hvd::launcher
