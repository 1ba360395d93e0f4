#include "elastic_driver.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <fcntl.h>

#include "options.h"
#include "process.h"
#include "store/elastic_protocol.h"
#include "store/store.h"

namespace hvd::launcher {
namespace {

constexpr std::chrono::milliseconds kTick{50};
constexpr std::chrono::seconds kStoreDeadline{10};

void say(const std::string& text) { writeAll(2, text.data(), text.size()); }

Deadline storeDeadline() { return Deadline::after(kStoreDeadline); }

std::string seconds(std::chrono::milliseconds ms) {
  return pythonFloat(static_cast<double>(ms.count()) / 1000.0) + " s";
}

}  // namespace

ElasticDriver::ElasticDriver(ElasticSettings settings, std::unique_ptr<Discovery> discovery, HostRegistry registry,
                             std::shared_ptr<Store> store, SpawnFn spawn)
    : settings_(std::move(settings)),
      discovery_(std::move(discovery)),
      registry_(std::move(registry)),
      store_(std::move(store)),
      spawn_(std::move(spawn)) {
  waitDeadline_ = Clock::now() + settings_.elasticTimeout;
}

std::string ElasticDriver::workerName(const Worker& w) const {
  return w.slot.hostname + "[" + std::to_string(w.slot.localRank) + "]";
}

void ElasticDriver::discover(Clock::time_point now) {
  if (auto hosts = discovery_->discover(now)) registry_.setDiscovered(*hosts);
}

void ElasticDriver::refreshInits() {
  int64_t events = elastic::readEvents(*store_, storeDeadline());
  if (events == events_) return;
  events_ = events;
  for (auto& [id, w] : workers_) {
    if (w.alive && !w.retired) w.inits = elastic::readInits(*store_, std::to_string(id), storeDeadline());
  }
}

std::vector<HostSlots> ElasticDriver::orderedHosts(Clock::time_point now) const {
  // Hosts with a worker of the latest round first, in that round's rank order (rank 0 must hold
  // the state the next round is synced from); then the others, oldest first.
  std::vector<HostSlots> available = registry_.available(now);
  std::map<std::string, int> firstRank;
  for (int id : roundMembers_) {
    const Worker& w = workers_.at(id);
    if (!w.alive || w.retired) continue;
    auto [it, inserted] = firstRank.try_emplace(w.slot.hostname, w.slot.rank);
    if (!inserted) it->second = std::min(it->second, w.slot.rank);
  }
  std::stable_sort(available.begin(), available.end(), [&](const HostSlots& a, const HostSlots& b) {
    auto ra = firstRank.find(a.host), rb = firstRank.find(b.host);
    int ka = ra == firstRank.end() ? INT32_MAX : ra->second;
    int kb = rb == firstRank.end() ? INT32_MAX : rb->second;
    return ka < kb;
  });
  return available;
}

std::vector<SlotInfo> ElasticDriver::placement(Clock::time_point now) const {
  std::vector<HostSlots> hosts = orderedHosts(now);
  int n = totalSlots(hosts);
  if (settings_.maxNp.has_value()) n = std::min(n, *settings_.maxNp);
  if (n == 0) return {};
  return assignSlots(hosts, n);
}

void ElasticDriver::workerExited(const WorkerProcess& process) {
  auto it = workers_.find(process.elasticId);
  if (it == workers_.end()) return;
  Worker& w = it->second;
  bool wasActive = !w.retired;
  w.alive = false;
  if (!wasActive) return;  // removed, told to stop, or killed as a straggler: expected
  bool success = WIFEXITED(process.status) && WEXITSTATUS(process.status) == 0;
  if (success) {
    anySuccess_ = true;
    if (phase_ != Phase::kFinishing && phase_ != Phase::kStopped) {
      if (settings_.verbose) say("horovodrun: elastic: " + workerName(w) + " completed; no further rounds\n");
      phase_ = Phase::kFinishing;
      tellWaiting("the elastic job is finishing: another worker completed training", /*abort=*/false);
    }
    return;
  }
  if (phase_ == Phase::kFinishing) failedWhileFinishing_ = true;
  say("horovodrun: elastic: worker " + workerName(w) + " (rank " + std::to_string(w.slot.rank) + " of round " +
      std::to_string(round_) + ") ended with " + describeStatus(process.status) + "\n");
  if (phase_ == Phase::kStopped || phase_ == Phase::kFinishing) return;
  blacklistHost(w.slot.hostname, Clock::now(), "a worker failed there");
  if (phase_ == Phase::kRunning && roundMembers_.count(w.id) > 0) {
    phase_ = Phase::kGathering;
    gatherStart_ = Clock::now();
  }
}

void ElasticDriver::blacklistHost(const std::string& host, Clock::time_point now, const std::string& why) {
  if (registry_.isBlacklisted(host, now)) return;
  auto cooldown = registry_.blacklist(host, now);
  say("horovodrun: elastic: blacklisting host " + host + " (" + why + ")" +
      (cooldown.has_value() ? " for " + seconds(*cooldown) : "") + "\n");
}

void ElasticDriver::tellWaiting(const std::string& message, bool abort) {
  elastic::Assignment a;
  a.kind = abort ? elastic::Assignment::Kind::kAbort : elastic::Assignment::Kind::kRemoved;
  a.message = message;
  for (auto& [id, w] : workers_) {
    if (!w.waiting()) continue;
    elastic::publishAssignment(*store_, std::to_string(id), w.published++, a, storeDeadline());
    w.retired = true;
  }
}

void ElasticDriver::stop(Supervisor& supervisor, const std::string& message) {
  phase_ = Phase::kStopped;
  stopMessage_ = message;
  say("horovodrun: error: " + message + "\n");
  try {
    refreshInits();
    tellWaiting(message, /*abort=*/true);
  } catch (const std::exception&) {
    // The workers are terminated below anyway.
  }
  if (!settings_.statusFile.empty()) {
    int fd = open(settings_.statusFile.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd >= 0) {
      writeAll(fd, message.data(), message.size());
      close(fd);
    }
  }
  supervisor.terminate();
}

void ElasticDriver::formRound(Supervisor& supervisor, Clock::time_point now) {
  std::vector<SlotInfo> slots = placement(now);
  // Survivors waiting for this round, by the slot they hold.
  std::map<SlotKey, int> waitingAt;
  for (auto& [id, w] : workers_) {
    if (w.waiting()) waitingAt[{w.slot.hostname, w.slot.localRank}] = id;
  }
  bool first = round_ < 0;
  if (!first) {
    bool anySurvivor = std::any_of(slots.begin(), slots.end(),
                                   [&](const SlotInfo& s) { return waitingAt.count({s.hostname, s.localRank}) > 0; });
    if (!anySurvivor) {
      stop(supervisor, "No hosts from previous set remaining, unable to broadcast state.");
      return;
    }
  }
  round_++;
  elastic::Assignment join;
  join.round = round_;
  join.updatesSeen = elastic::readUpdateCount(*store_, storeDeadline());
  roundMembers_.clear();
  std::vector<std::pair<SlotInfo, int>> toSpawn;
  for (const SlotInfo& s : slots) {
    join.placement = s;
    auto found = waitingAt.find({s.hostname, s.localRank});
    int id;
    if (found != waitingAt.end()) {
      id = found->second;
      waitingAt.erase(found);
    } else {
      id = nextId_++;
      workers_[id] = Worker{id, s};
      toSpawn.push_back({s, id});
    }
    Worker& w = workers_[id];
    w.slot = s;
    elastic::publishAssignment(*store_, std::to_string(id), w.published++, join, storeDeadline());
    roundMembers_.insert(id);
  }
  for (auto& [key, id] : waitingAt) {
    Worker& w = workers_[id];
    elastic::Assignment removed;
    removed.kind = elastic::Assignment::Kind::kRemoved;
    removed.message = workerName(w) + " has been removed from elastic job";
    elastic::publishAssignment(*store_, std::to_string(id), w.published++, removed, storeDeadline());
    w.retired = true;
  }
  lastAnnounced_.clear();
  for (const SlotInfo& s : slots) lastAnnounced_.insert({s.hostname, s.localRank});
  phase_ = Phase::kRunning;
  {
    std::string line = "horovodrun: elastic: round " + std::to_string(round_) + " with " +
                       std::to_string(slots.size()) + " workers on";
    std::string lastHost;
    for (const SlotInfo& s : slots) {
      if (s.hostname != lastHost) line += " " + s.hostname;
      lastHost = s.hostname;
    }
    if (!toSpawn.empty()) line += " (" + std::to_string(toSpawn.size()) + " new)";
    say(line + "\n");
  }
  for (const auto& [slot, id] : toSpawn) {
    try {
      WorkerProcess p = spawn_(slot, id);
      p.elasticId = id;
      supervisor.add(std::move(p));
    } catch (const std::exception& e) {
      // Its host is unusable: the round's other workers will fail to rendezvous and ask again.
      say("horovodrun: elastic: cannot start a worker on " + slot.hostname + ": " + e.what() + "\n");
      workers_[id].alive = false;
      blacklistHost(slot.hostname, now, "a worker could not be started there");
      phase_ = Phase::kGathering;
      gatherStart_ = now;
    }
  }
}

void ElasticDriver::announceIfHostsChanged(Clock::time_point now) {
  std::set<SlotKey> candidate;
  for (const SlotInfo& s : placement(now)) candidate.insert({s.hostname, s.localRank});
  if (candidate == lastAnnounced_) return;
  std::set<SlotKey> current;
  for (int id : roundMembers_) {
    const Worker& w = workers_.at(id);
    if (w.alive && !w.retired) current.insert({w.slot.hostname, w.slot.localRank});
  }
  int flags = 0;
  for (const auto& k : candidate) {
    if (current.count(k) == 0) flags |= elastic::kHostsAdded;
  }
  for (const auto& k : current) {
    if (candidate.count(k) == 0) flags |= elastic::kHostsRemoved;
  }
  lastAnnounced_ = candidate;
  if (flags == 0) return;
  int64_t index = elastic::announceHostUpdate(*store_, flags, storeDeadline());
  say(std::string("horovodrun: elastic: hosts ") +
      (flags == elastic::kHostsAdded     ? "added"
       : flags == elastic::kHostsRemoved ? "removed"
                                         : "added and removed") +
      " (update " + std::to_string(index) + "); workers re-form at their next commit\n");
}

void ElasticDriver::gather(Supervisor& supervisor, Clock::time_point now) {
  // The others report a worker lost as soon as it dies, often while this tick ran (the discovery
  // script, the store's reads) and before the loop reaped its exit status. Such a worker is
  // reported by how it ended (workerExited: "ended with signal 9 (SIGKILL)"), never killed as a
  // straggler and reported in other words: reap what exited meanwhile before judging anyone.
  supervisor.reapExited();
  if (phase_ != Phase::kGathering) return;
  std::vector<int> pending;
  int live = 0;
  for (int id : roundMembers_) {
    const Worker& w = workers_.at(id);
    if (!w.alive || w.retired) continue;
    live++;
    if (!w.waiting()) pending.push_back(id);
  }
  if (live == 0) {
    bool anyWaiting = std::any_of(workers_.begin(), workers_.end(), [](const auto& kv) { return kv.second.waiting(); });
    if (!anyWaiting) {
      stop(supervisor, "every worker of round " + std::to_string(round_) + " failed" +
                           (registry_.allBlacklistedForGood() ? " and every host is blacklisted" : "") +
                           "; the elastic job cannot continue");
      return;
    }
  }
  if (!pending.empty()) {
    // A worker the others reported lost (silent: paused, hung, cut off) is not waited for.
    // So is one on a host blacklisted meanwhile (a reported worker's host: cut off as a whole).
    std::vector<int> suspects;
    for (int id : pending) {
      if (elastic::isSuspect(*store_, round_, workers_.at(id).slot.rank, storeDeadline())) suspects.push_back(id);
    }
    for (int id : suspects) blacklistHost(workers_.at(id).slot.hostname, now, "a worker there stopped answering");
    for (int id : pending) {
      if (std::find(suspects.begin(), suspects.end(), id) == suspects.end() &&
          registry_.isBlacklisted(workers_.at(id).slot.hostname, now)) {
        suspects.push_back(id);
      }
    }
    const bool timedOut = now - gatherStart_ >= settings_.gatherTimeout;
    if (!timedOut && suspects.size() < pending.size()) {
      if (suspects.empty()) return;
      pending = suspects;  // kill those now; wait for the others
    }
    // Exits that happened during the suspect reads above: reported, not killed (see the top).
    // A local worker still on its way out is waited for (its status comes within moments), up
    // to the gather timeout.
    supervisor.reapExited();
    if (phase_ != Phase::kGathering) return;
    std::erase_if(pending, [&](int id) {
      const Worker& w = workers_.at(id);
      if (!w.alive || w.retired) return true;
      if (timedOut) return false;
      for (const auto& p : supervisor.workers()) {
        if (p.elasticId == id && !p.exited && !p.remote && processExiting(p.pid)) return true;
      }
      return false;
    });
    for (int id : pending) {
      Worker& w = workers_[id];
      std::string why =
          " did not rejoin within " + seconds(settings_.gatherTimeout) + " (HOROVOD_ELASTIC_GATHER_TIMEOUT)";
      if (elastic::isSuspect(*store_, round_, w.slot.rank, storeDeadline())) {
        why = " was reported lost by the others and did not rejoin";
      } else if (std::find(suspects.begin(), suspects.end(), id) != suspects.end()) {
        why = " did not rejoin and its host is blacklisted";
      }
      say("horovodrun: elastic: worker " + workerName(w) + why + "; killing it\n");
      for (auto& p : supervisor.workers()) {
        if (p.elasticId == id && !p.exited) {
          if (p.remote && p.stdinFd >= 0) {
            close(p.stdinFd);
            p.stdinFd = -1;
          }
          if (kill(-p.pid, SIGKILL) != 0) kill(p.pid, SIGKILL);
        }
      }
      w.retired = true;
      blacklistHost(w.slot.hostname, now, "a worker there stopped answering");
    }
    // Killed suspects only: the others of the round still have time to ask.
    for (int id : roundMembers_) {
      const Worker& w = workers_.at(id);
      if (w.alive && !w.retired && !w.waiting()) return;
    }
  }
  beginReset(now);
}

void ElasticDriver::beginReset(Clock::time_point now) {
  phase_ = Phase::kWaitingForHosts;
  waitDeadline_ = now + settings_.elasticTimeout;
}

std::chrono::milliseconds ElasticDriver::tick(Supervisor& supervisor) {
  if (phase_ == Phase::kStopped || supervisor.terminating()) return std::chrono::milliseconds(100);
  Clock::time_point now = Clock::now();
  try {
    discover(now);
    refreshInits();
    switch (phase_) {
      case Phase::kRunning: {
        bool someoneAsked = false;
        for (int id : roundMembers_) someoneAsked = someoneAsked || workers_.at(id).waiting();
        if (someoneAsked) {
          phase_ = Phase::kGathering;
          gatherStart_ = now;
          gather(supervisor, now);
        } else {
          announceIfHostsChanged(now);
        }
        break;
      }
      case Phase::kGathering: gather(supervisor, now); break;
      case Phase::kWaitingForHosts: break;
      case Phase::kFinishing:
        tellWaiting("the elastic job is finishing: another worker completed training", /*abort=*/false);
        break;
      case Phase::kStopped: break;
    }
    if (phase_ == Phase::kWaitingForHosts) {
      bool first = round_ < 0;
      if (!first && settings_.resetLimit.has_value() && resets_ >= *settings_.resetLimit) {
        stop(supervisor, "Horovod was shutdown because number of resets during elastic job exceeded limit: " +
                             std::to_string(*settings_.resetLimit));
        return kTick;
      }
      int needed = first ? settings_.startNp : settings_.minNp;
      int have = totalSlots(registry_.available(now));
      if (have >= needed) {
        if (!first) resets_++;
        formRound(supervisor, now);
      } else if (!first && registry_.allBlacklistedForGood()) {
        stop(supervisor, "every host of the elastic job is blacklisted; the job cannot continue");
      } else if (now >= waitDeadline_) {
        stop(supervisor, "Timed out after " + seconds(settings_.elasticTimeout) + " waiting for " +
                             std::to_string(needed) + " slots (" + std::to_string(have) +
                             " available on hosts that are not blacklisted); check the host discovery script "
                             "and --min-np, or raise --elastic-timeout");
      }
    }
  } catch (const UsageError& e) {
    stop(supervisor, e.what());
  } catch (const std::exception& e) {
    stop(supervisor, e.what());
  }
  return kTick;
}

int ElasticDriver::exitCode() const {
  if (stopMessage_.has_value()) return 1;
  if (anySuccess_ && !failedWhileFinishing_) return 0;
  return 1;
}

}  // namespace hvd::launcher
