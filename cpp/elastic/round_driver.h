// The elastic driver's policy: which workers form each round of an elastic job, when a round
// ends, which hosts are blacklisted, and when the job is over. A state machine that does no I/O
// but on the job's rendezvous store (the elastic protocol: store/elastic_protocol.h): its owner
// feeds it events (hosts discovered, a worker exited) and calls tick() now and then; every call
// leaves actions for the owner to execute in order (takeActions()): log a line, start a worker
// on a slot, kill a worker, finish the job. horovodrun's Supervisor is its owner
// (launcher/elastic_driver.h); so are the worker pools of horovod.ray and horovod.spark, through
// horovod/elastic_rounds.h.
// Not thread-safe: its owner calls it from one thread (and so uses the shared HostRegistry).
//
// Two placement modes. kChoose (horovodrun): the driver places workers on the slots of the
// discovered hosts (hostsDiscovered). kLanded (Ray, Spark: the framework puts a worker where it
// has room): the owner reports its room for new workers (capacity), the driver asks it to launch
// workers (kLaunch), the owner reports where each landed (workerLanded), and the driver forms
// the round from those hosts (a host's workers get consecutive ranks, hosts in the order of
// their first worker: survivors first) and hands each new worker its slot (kStart).
//
//   waiting for hosts --enough slots--> running --a worker asks for a new round, or fails-->
//   gathering --every live worker of the round asked (or the gather timeout killed the
//   stragglers)--> waiting for hosts --> running (next round) ...
//
// * Start: waits up to the elastic timeout for startNp slots, then places min(available, maxNp)
//   workers, hosts ordered by first appearance.
// * A worker exiting non-zero blacklists its host (HostRegistry: for good, or for a cooldown;
//   in kLanded only with a cooldown range, and the owner keeps new workers off blacklisted
//   hosts: blacklisted(host));
//   the survivors see HorovodInternalError, roll back, and call init() again, which asks for
//   their next round, reporting the rank their engine lost. A worker reported lost (silent:
//   paused, hung, cut off) is killed at once, one that merely does not ask within the gather
//   timeout too; either way its host is blacklisted.
//   (kChoose: the workers of a blacklisted host that did not ask yet are cut off with it.)
// * A new round keeps survivors on their slots (hosts that had survivors first, in their old
//   rank order, so rank 0 holds the state to broadcast), starts new workers on new slots, and
//   tells workers whose slots are gone that they were removed.
// * When discovery changes the hosts so that the placement would change, the driver announces
//   it; workers raise HostsUpdatedInterrupt at their next commit and re-init.
// * The job ends: exit code 0 when workers completed (the first exit 0 stops new rounds; the
//   owner waits for the others to exit); a Finish action with exit code 1 and a message when
//   the reset limit is exceeded, fewer than minNp slots stay available past the elastic timeout,
//   every worker of a round failed, every host is blacklisted for good, no host of the previous
//   round survived (nothing to broadcast the state from), or the owner called fail().
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "elastic/host_registry.h"
#include "elastic/slots.h"

namespace hvd {
class Store;
}

namespace hvd::elastic {

enum class PlacementMode { kChoose, kLanded };

struct DriverSettings {
  PlacementMode placement = PlacementMode::kChoose;
  int startNp = 1;            // slots needed before the first round (horovodrun -np)
  int minNp = 1;              // slots needed for later rounds (--min-np)
  std::optional<int> maxNp;   // --max-np
  std::optional<int> resetLimit;
  std::chrono::milliseconds elasticTimeout{600000};
  std::chrono::milliseconds gatherTimeout{30000};
  // kLanded: how long a later round waits for the room to replace its lost workers before it
  // forms smaller (the resources of a lost worker take a moment to come free).
  std::chrono::milliseconds replaceGrace{0};
  int firstId = 0;            // worker ids start here (a later job on the same store must not reuse ids)
  bool verbose = false;       // also log when a worker completed
};

struct Action {
  enum class Kind {
    kLog,     // text: one line for the user (no newline)
    kLaunch,  // kLanded: launch worker `id` where there is room; report workerLanded
    kStart,   // start worker `id` on `slot` (kLanded: run the launched worker); assignment published
    kKill,    // kill worker `id` now (it stopped answering); its exit is expected
    kFinish,  // the job failed: terminate every worker; exitCode 1, text says why
  };
  // Why a kFinish (owners may word kTimedOut in their own terms: needed, have).
  enum class Reason { kNone, kTimedOut, kResetLimit, kRoundFailed, kNoSurvivors, kAllBlacklisted, kOther };
  Kind kind = Kind::kLog;
  int id = -1;
  SlotInfo slot;
  std::string text;
  int exitCode = 0;
  Reason reason = Reason::kNone;
  int needed = 0;  // kTimedOut: the workers the round needed, and how many were possible
  int have = 0;
};

// What only the owner knows about its processes, asked while the driver judges stragglers.
class ExitProbe {
 public:
  virtual ~ExitProbe() = default;
  // Reports (RoundDriver::workerExited) every worker that exited since the owner last looked.
  virtual void reportExited() = 0;
  // Whether worker `id` is on its way out (its exit will be reported within moments).
  virtual bool exiting(int id) = 0;
};

class RoundDriver {
 public:
  using Clock = std::chrono::steady_clock;

  // `registry`: the hosts and their blacklisting (shared: a later job may go on with it);
  // `store`: the job's rendezvous store; `now`: the start of the wait for the first round.
  RoundDriver(DriverSettings settings, std::shared_ptr<HostRegistry> registry, std::shared_ptr<Store> store,
              Clock::time_point now);

  // kChoose: discovery's latest answer (hosts in its order, with their slots).
  void hostsDiscovered(const std::vector<HostSlots>& hosts);
  // kLanded: how many more workers could start now. A round launches only after a report made
  // while it waits for room (wantsRoom()): the room it uses is never from an earlier round.
  void capacity(int room) {
    room_ = room;
    roomKnown_ = true;
  }
  // kLanded: whether the next round waits for a capacity() report.
  bool wantsRoom() const { return landed() && phase_ == Phase::kWaitingForHosts; }
  // kLanded: launched worker `id` runs on `host` (workers with equal hosts share a host).
  void workerLanded(int id, const std::string& host);
  // Worker `id` ended: `success` when it exited 0; `how` describes the end ("exit code 1").
  void workerExited(int id, bool success, const std::string& how, Clock::time_point now);
  // A kStart action could not be executed (`why`): its host is blacklisted, the round re-forms.
  void startFailed(int id, const std::string& why, Clock::time_point now);
  // Ends the job with `message` (e.g. the discovery failed for good).
  void fail(const std::string& message);
  // Reads the store's init counters and advances the rounds. `probe`: see ExitProbe (nullptr:
  // every exit is reported before tick()).
  void tick(Clock::time_point now, ExitProbe* probe = nullptr);

  // The actions left by the calls so far, oldest first; the owner executes them in order.
  std::vector<Action> takeActions() { return std::exchange(actions_, {}); }

  // Whether `host` is blacklisted now (kLanded: where the owner must not launch workers).
  bool blacklisted(const std::string& host, Clock::time_point now) const { return registry_->isBlacklisted(host, now); }
  // The live workers of the latest round: (id, rank), by rank.
  std::vector<std::pair<int, int>> members() const;
  // The id the next new worker gets.
  int nextId() const { return nextId_; }

  // Whether the job goes on (false once workers completed or the job failed).
  bool keepRunning() const { return phase_ != Phase::kStopped && phase_ != Phase::kFinishing; }
  // The job's exit code once every worker is gone.
  int exitCode() const;

 private:
  enum class Phase { kWaitingForHosts, kLaunching, kRunning, kGathering, kFinishing, kStopped };
  using SlotKey = std::pair<std::string, int>;  // (host, local rank)

  struct Worker {
    Worker() = default;
    Worker(int id_, SlotInfo slot_) : id(id_), slot(std::move(slot_)) {}
    int id = 0;
    SlotInfo slot;           // its place in the latest round it joined
    int64_t published = 0;   // assignments written for it
    int64_t inits = 0;       // init() calls it made (from the store)
    std::string landedOn;    // kLanded: its host, once reported ("" before)
    bool alive = true;
    bool retired = false;    // told it was removed / the job ends, or killed as a straggler
    bool waiting() const { return alive && !retired && inits > published; }
  };

  void step(Clock::time_point now, ExitProbe* probe);
  void refreshInits();
  std::vector<HostSlots> orderedHosts(Clock::time_point now) const;
  std::vector<SlotInfo> placement(Clock::time_point now) const;
  void formRound(Clock::time_point now);
  // kLanded: launches the new workers of the next round when there is room for it.
  void launchRound(Clock::time_point now);
  // kLanded: forms the round once every launched worker landed.
  void formLandedRound();
  // Publishes `id`'s join assignment for `slot` in the round being formed.
  void publishJoin(int id, const SlotInfo& slot, int64_t updatesSeen);
  void announceIfHostsChanged(Clock::time_point now);
  void gather(Clock::time_point now, ExitProbe* probe);
  // Kills `pending` (not rejoined; `suspects`: reported lost or on a blacklisted host).
  // The pending workers not to wait for: reported lost (their hosts blacklisted), or (kChoose)
  // on a host blacklisted meanwhile.
  std::vector<int> suspectsAmong(const std::vector<int>& pending, Clock::time_point now);
  void killStragglers(const std::vector<int>& pending, const std::vector<int>& suspects, Clock::time_point now);
  void stop(const std::string& message, Action::Reason reason = Action::Reason::kOther, int needed = 0, int have = 0);
  void blacklistHost(const std::string& host, Clock::time_point now, const std::string& why);
  void tellWaiting(const std::string& message, bool abort);
  std::string workerName(const Worker& w) const;
  bool landed() const;
  // The workers waiting for the next round, by their rank in the latest one.
  std::vector<int> survivors() const;
  void log(std::string text);

  DriverSettings settings_;
  std::shared_ptr<HostRegistry> registry_;  // may outlive this driver (the next job's blacklist)
  std::shared_ptr<Store> store_;
  std::vector<Action> actions_;

  Phase phase_ = Phase::kWaitingForHosts;
  Clock::time_point waitStart_;       // since when the next round waits for hosts (room)
  Clock::time_point waitDeadline_;
  Clock::time_point gatherStart_;
  int64_t round_ = -1;     // the latest round formed
  int resets_ = 0;
  int64_t events_ = -1;    // last value of the events counter read
  int nextId_ = 0;
  int room_ = 0;                      // kLanded: room for new workers (capacity())
  bool roomKnown_ = false;            // kLanded: room_ was reported since the round began waiting
  std::vector<int> launching_;        // kLanded: new workers of the round being formed
  std::map<int, Worker> workers_;
  std::set<int> roundMembers_;        // ids placed in the latest round
  std::set<SlotKey> lastAnnounced_;   // placement last announced as a host change
  std::optional<std::string> stopMessage_;
  bool anySuccess_ = false;
  bool failedWhileFinishing_ = false;
};

}  // namespace hvd::elastic
