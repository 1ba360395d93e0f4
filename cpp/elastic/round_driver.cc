#include "elastic/round_driver.h"

#include <algorithm>
#include <climits>

#include "common/python_float.h"
#include "store/elastic_protocol.h"
#include "store/store.h"

namespace hvd::elastic {
namespace {

constexpr std::chrono::seconds kStoreDeadline{10};

const char* const kNoSurvivorsMessage = "No hosts from previous set remaining, unable to broadcast state.";

Deadline storeDeadline() { return Deadline::after(kStoreDeadline); }

std::string seconds(std::chrono::milliseconds ms) {
  return pythonFloat(static_cast<double>(ms.count()) / 1000.0) + " s";
}

}  // namespace

RoundDriver::RoundDriver(DriverSettings settings, std::shared_ptr<HostRegistry> registry, std::shared_ptr<Store> store,
                         Clock::time_point now)
    : settings_(std::move(settings)), registry_(std::move(registry)), store_(std::move(store)) {
  nextId_ = settings_.firstId;
  waitStart_ = now;
  waitDeadline_ = now + settings_.elasticTimeout;
}

bool RoundDriver::landed() const { return settings_.placement == PlacementMode::kLanded; }

std::string RoundDriver::workerName(const Worker& w) const {
  // kLanded hosts are the framework's keys (a Ray node id): the id says more.
  if (landed()) return std::to_string(w.id);
  return w.slot.hostname + "[" + std::to_string(w.slot.localRank) + "]";
}

std::vector<std::pair<int, int>> RoundDriver::members() const {
  std::vector<std::pair<int, int>> out;
  for (int id : roundMembers_) {
    const Worker& w = workers_.at(id);
    if (w.alive && !w.retired) out.emplace_back(id, w.slot.rank);
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
  return out;
}

void RoundDriver::workerLanded(int id, const std::string& host) {
  auto it = workers_.find(id);
  if (it != workers_.end()) it->second.landedOn = host;
}

void RoundDriver::log(std::string text) {
  Action a;
  a.kind = Action::Kind::kLog;
  a.text = std::move(text);
  actions_.push_back(std::move(a));
}

void RoundDriver::hostsDiscovered(const std::vector<HostSlots>& hosts) { registry_->setDiscovered(hosts); }

void RoundDriver::refreshInits() {
  int64_t events = readEvents(*store_, storeDeadline());
  if (events == events_) return;
  events_ = events;
  for (auto& [id, w] : workers_) {
    if (w.alive && !w.retired) w.inits = readInits(*store_, std::to_string(id), storeDeadline());
  }
}

std::vector<HostSlots> RoundDriver::orderedHosts(Clock::time_point now) const {
  // Hosts with a worker of the latest round first, in that round's rank order (rank 0 must hold
  // the state the next round is synced from); then the others, oldest first.
  std::vector<HostSlots> available = registry_->available(now);
  std::map<std::string, int> firstRank;
  for (int id : roundMembers_) {
    const Worker& w = workers_.at(id);
    if (!w.alive || w.retired) continue;
    auto [it, inserted] = firstRank.try_emplace(w.slot.hostname, w.slot.rank);
    if (!inserted) it->second = std::min(it->second, w.slot.rank);
  }
  std::stable_sort(available.begin(), available.end(), [&](const HostSlots& a, const HostSlots& b) {
    auto ra = firstRank.find(a.host), rb = firstRank.find(b.host);
    int ka = ra == firstRank.end() ? INT_MAX : ra->second;
    int kb = rb == firstRank.end() ? INT_MAX : rb->second;
    return ka < kb;
  });
  return available;
}

std::vector<SlotInfo> RoundDriver::placement(Clock::time_point now) const {
  std::vector<HostSlots> hosts = orderedHosts(now);
  int n = totalSlots(hosts);
  if (settings_.maxNp.has_value()) n = std::min(n, *settings_.maxNp);
  if (n == 0) return {};
  return fillSlots(hosts, n);
}

void RoundDriver::workerExited(int id, bool success, const std::string& how, Clock::time_point now) {
  auto it = workers_.find(id);
  if (it == workers_.end()) return;
  Worker& w = it->second;
  bool wasActive = !w.retired;
  w.alive = false;
  if (!wasActive) return;  // removed, told to stop, or killed as a straggler: expected
  if (success) {
    anySuccess_ = true;
    if (phase_ != Phase::kFinishing && phase_ != Phase::kStopped) {
      if (settings_.verbose) log(workerName(w) + " completed; no further rounds");
      phase_ = Phase::kFinishing;
      tellWaiting("the elastic job is finishing: another worker completed training", /*abort=*/false);
    }
    return;
  }
  if (phase_ == Phase::kFinishing) failedWhileFinishing_ = true;
  log("worker " + workerName(w) + " (rank " + std::to_string(w.slot.rank) + " of round " + std::to_string(round_) +
      (landed() ? ") failed: " : ") ended with ") + how);
  if (phase_ == Phase::kStopped || phase_ == Phase::kFinishing) return;
  blacklistHost(w.slot.hostname, now, "a worker failed there");
  if (phase_ == Phase::kRunning && roundMembers_.count(w.id) > 0) {
    phase_ = Phase::kGathering;
    gatherStart_ = now;
  }
}

void RoundDriver::startFailed(int id, const std::string& why, Clock::time_point now) {
  auto it = workers_.find(id);
  if (it == workers_.end()) return;
  Worker& w = it->second;
  // Its host is unusable: the round's other workers will fail to rendezvous and ask again.
  log("cannot start a worker on " + w.slot.hostname + ": " + why);
  w.alive = false;
  blacklistHost(w.slot.hostname, now, "a worker could not be started there");
  if (phase_ == Phase::kRunning || phase_ == Phase::kGathering) {
    phase_ = Phase::kGathering;
    gatherStart_ = now;
  }
}

void RoundDriver::blacklistHost(const std::string& host, Clock::time_point now, const std::string& why) {
  // kLanded: only with a cooldown range (the owner places the workers; blacklisting for good
  // would leave a one-node cluster nowhere to go).
  if ((landed() && !registry_->hasCooldown()) || registry_->isBlacklisted(host, now)) return;
  auto cooldown = registry_->blacklist(host, now);
  log("blacklisting host " + host + " (" + why + ")" + (cooldown.has_value() ? " for " + seconds(*cooldown) : ""));
}

void RoundDriver::tellWaiting(const std::string& message, bool abort) {
  Assignment a;
  a.kind = abort ? Assignment::Kind::kAbort : Assignment::Kind::kRemoved;
  a.message = message;
  for (auto& [id, w] : workers_) {
    if (!w.waiting()) continue;
    publishAssignment(*store_, std::to_string(id), w.published++, a, storeDeadline());
    w.retired = true;
  }
}

void RoundDriver::fail(const std::string& message) {
  if (phase_ != Phase::kStopped) stop(message);
}

void RoundDriver::stop(const std::string& message, Action::Reason reason, int needed, int have) {
  phase_ = Phase::kStopped;
  stopMessage_ = message;
  try {
    refreshInits();
    tellWaiting(message, /*abort=*/true);
  } catch (const std::exception&) {
    // The owner terminates the workers anyway.
  }
  Action a;
  a.kind = Action::Kind::kFinish;
  a.exitCode = 1;
  a.text = message;
  a.reason = reason;
  a.needed = needed;
  a.have = have;
  actions_.push_back(std::move(a));
}

void RoundDriver::formRound(Clock::time_point now) {
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
      stop(kNoSurvivorsMessage, Action::Reason::kNoSurvivors);
      return;
    }
  }
  round_++;
  Assignment join;
  join.updatesSeen = readUpdateCount(*store_, storeDeadline());
  roundMembers_.clear();
  std::vector<int> fresh;
  for (const SlotInfo& s : slots) {
    auto found = waitingAt.find({s.hostname, s.localRank});
    int id;
    if (found != waitingAt.end()) {
      id = found->second;
      waitingAt.erase(found);
    } else {
      id = nextId_++;
      workers_[id] = Worker{id, s};
      fresh.push_back(id);
    }
    publishJoin(id, s, join.updatesSeen);
    roundMembers_.insert(id);
  }
  for (auto& [key, id] : waitingAt) {
    Worker& w = workers_[id];
    Assignment removed;
    removed.kind = Assignment::Kind::kRemoved;
    removed.message = workerName(w) + " has been removed from elastic job";
    publishAssignment(*store_, std::to_string(id), w.published++, removed, storeDeadline());
    w.retired = true;
  }
  lastAnnounced_.clear();
  for (const SlotInfo& s : slots) lastAnnounced_.insert({s.hostname, s.localRank});
  phase_ = Phase::kRunning;
  std::string line = "round " + std::to_string(round_) + " with " + std::to_string(slots.size()) + " workers on";
  std::string lastHost;
  for (const SlotInfo& s : slots) {
    if (s.hostname != lastHost) line += " " + s.hostname;
    lastHost = s.hostname;
  }
  if (!fresh.empty()) line += " (" + std::to_string(fresh.size()) + " new)";
  log(line);
  for (int id : fresh) {
    Action a;
    a.kind = Action::Kind::kStart;
    a.id = id;
    a.slot = workers_[id].slot;
    actions_.push_back(std::move(a));
  }
}

void RoundDriver::publishJoin(int id, const SlotInfo& slot, int64_t updatesSeen) {
  Worker& w = workers_[id];
  w.slot = slot;
  Assignment join;
  join.round = round_;
  join.placement = slot;
  join.updatesSeen = updatesSeen;
  publishAssignment(*store_, std::to_string(id), w.published++, join, storeDeadline());
}

std::vector<int> RoundDriver::survivors() const {
  // A worker that never joined a round is not one (kLanded: a launched worker may ask before
  // the driver answered its first init).
  std::vector<int> ids;
  for (const auto& [id, w] : workers_) {
    if (w.waiting() && w.published > 0) ids.push_back(id);
  }
  std::stable_sort(ids.begin(), ids.end(),
                   [&](int a, int b) { return workers_.at(a).slot.rank < workers_.at(b).slot.rank; });
  return ids;
}

void RoundDriver::launchRound(Clock::time_point now) {
  if (!roomKnown_) return;  // the owner reports it before the next tick
  const bool first = round_ < 0;
  const int cap = settings_.maxNp.value_or(INT_MAX);
  const std::vector<int> waiting = survivors();
  const int survivorCount = static_cast<int>(waiting.size());
  const int fresh = std::max(0, std::min(cap - survivorCount, room_));
  const int have = survivorCount + fresh;
  const int needed = first ? settings_.startNp : settings_.minNp;
  // Replace the lost workers if the room comes within the grace; else go smaller.
  const int target = std::min(cap, std::max(needed, static_cast<int>(roundMembers_.size())));
  if (have < target && (have < needed || now - waitStart_ < settings_.replaceGrace)) {
    if (now >= waitDeadline_) {
      stop("Timed out after " + seconds(settings_.elasticTimeout) + " waiting for " + std::to_string(needed) +
               " workers (" + std::to_string(have) + " possible)",
           Action::Reason::kTimedOut, needed, have);
    }
    return;
  }
  if (!first && waiting.empty()) {
    stop(kNoSurvivorsMessage, Action::Reason::kNoSurvivors);
    return;
  }
  if (!first) resets_++;
  roomKnown_ = false;
  launching_.clear();
  for (int i = 0; i < fresh; ++i) {
    int id = nextId_++;
    workers_[id] = Worker{id, SlotInfo{}};
    launching_.push_back(id);
    Action a;
    a.kind = Action::Kind::kLaunch;
    a.id = id;
    actions_.push_back(std::move(a));
  }
  phase_ = Phase::kLaunching;
  formLandedRound();
}

void RoundDriver::formLandedRound() {
  for (int id : launching_) {
    const Worker& w = workers_.at(id);
    if (w.alive && w.landedOn.empty()) return;  // not placed yet
  }
  // Survivors in their old rank order, then the new workers; a host's workers get consecutive
  // ranks, hosts in the order of their first worker (so the old rank 0 keeps rank 0).
  std::vector<int> ids = survivors();
  for (int id : ids) workers_[id].landedOn = workers_[id].slot.hostname;
  size_t freshCount = 0;
  for (int id : launching_) {
    if (workers_.at(id).alive) {
      ids.push_back(id);
      freshCount++;
    }
  }
  std::vector<std::string> hostOrder;
  for (int id : ids) {
    const std::string& host = workers_.at(id).landedOn;
    if (std::find(hostOrder.begin(), hostOrder.end(), host) == hostOrder.end()) hostOrder.push_back(host);
  }
  std::vector<int> ordered;
  std::vector<std::string> hostOf;
  for (const std::string& host : hostOrder) {
    for (int id : ids) {
      if (workers_.at(id).landedOn == host) {
        ordered.push_back(id);
        hostOf.push_back(host);
      }
    }
  }
  const std::vector<SlotInfo> slots = slotsOnHosts(hostOf);
  round_++;
  const int64_t updatesSeen = readUpdateCount(*store_, storeDeadline());
  roundMembers_.clear();
  for (size_t r = 0; r < ordered.size(); ++r) {
    publishJoin(ordered[r], slots[r], updatesSeen);
    roundMembers_.insert(ordered[r]);
  }
  phase_ = Phase::kRunning;
  log("round " + std::to_string(round_) + " with " + std::to_string(ordered.size()) + " workers (" +
      std::to_string(freshCount) + " new)");
  for (int id : launching_) {
    if (!workers_.at(id).alive) continue;
    Action a;
    a.kind = Action::Kind::kStart;
    a.id = id;
    a.slot = workers_.at(id).slot;
    actions_.push_back(std::move(a));
  }
  launching_.clear();
}

void RoundDriver::announceIfHostsChanged(Clock::time_point now) {
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
    if (current.count(k) == 0) flags |= kHostsAdded;
  }
  for (const auto& k : current) {
    if (candidate.count(k) == 0) flags |= kHostsRemoved;
  }
  lastAnnounced_ = candidate;
  if (flags == 0) return;
  int64_t index = announceHostUpdate(*store_, flags, storeDeadline());
  log(std::string("hosts ") +
      (flags == kHostsAdded     ? "added"
       : flags == kHostsRemoved ? "removed"
                                : "added and removed") +
      " (update " + std::to_string(index) + "); workers re-form at their next commit");
}

void RoundDriver::gather(Clock::time_point now, ExitProbe* probe) {
  // The others report a worker lost as soon as it dies, often while the owner was busy (the
  // discovery script, the store's reads) and before it reaped the exit. Such a worker is reported
  // by how it ended ("ended with signal 9 (SIGKILL)"), never killed as a straggler and reported
  // in other words: take in what exited meanwhile before judging anyone.
  if (probe != nullptr) probe->reportExited();
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
      stop("every worker of round " + std::to_string(round_) + " failed" +
               (registry_->allBlacklistedForGood() ? " and every host is blacklisted" : "") +
               "; the elastic job cannot continue",
           Action::Reason::kRoundFailed);
      return;
    }
  }
  if (!pending.empty()) {
    std::vector<int> suspects = suspectsAmong(pending, now);
    const bool timedOut = now - gatherStart_ >= settings_.gatherTimeout;
    if (!timedOut && suspects.size() < pending.size()) {
      if (suspects.empty()) return;
      pending = suspects;  // kill those now; wait for the others
    }
    // Exits that happened during the suspect reads above: reported, not killed (see the top).
    if (probe != nullptr) probe->reportExited();
    if (phase_ != Phase::kGathering) return;
    // A worker still on its way out is waited for (its exit comes within moments), up to the
    // gather timeout.
    std::erase_if(pending, [&](int id) {
      const Worker& w = workers_.at(id);
      if (!w.alive || w.retired) return true;
      return !timedOut && probe != nullptr && probe->exiting(id);
    });
    killStragglers(pending, suspects, now);
    // Killed suspects only: the others of the round still have time to ask.
    for (int id : roundMembers_) {
      const Worker& w = workers_.at(id);
      if (w.alive && !w.retired && !w.waiting()) return;
    }
  }
  phase_ = Phase::kWaitingForHosts;
  roomKnown_ = false;
  waitStart_ = now;
  waitDeadline_ = now + settings_.elasticTimeout;
}

std::vector<int> RoundDriver::suspectsAmong(const std::vector<int>& pending, Clock::time_point now) {
  // A worker the others reported lost (silent: paused, hung, cut off) is not waited for; its
  // host is blacklisted. kChoose: nor is one on a host blacklisted meanwhile (a reported
  // worker's host: cut off as a whole). kLanded: the blacklisting keeps only new workers away.
  std::vector<int> suspects;
  for (int id : pending) {
    if (isSuspect(*store_, round_, workers_.at(id).slot.rank, storeDeadline())) suspects.push_back(id);
  }
  for (int id : suspects) blacklistHost(workers_.at(id).slot.hostname, now, "a worker there stopped answering");
  for (int id : pending) {
    if (!landed() && std::find(suspects.begin(), suspects.end(), id) == suspects.end() &&
        registry_->isBlacklisted(workers_.at(id).slot.hostname, now)) {
      suspects.push_back(id);
    }
  }
  return suspects;
}

void RoundDriver::killStragglers(const std::vector<int>& pending, const std::vector<int>& suspects,
                                 Clock::time_point now) {
  for (int id : pending) {
    Worker& w = workers_[id];
    std::string why =
        " did not rejoin within " + seconds(settings_.gatherTimeout) + " (HOROVOD_ELASTIC_GATHER_TIMEOUT)";
    if (isSuspect(*store_, round_, w.slot.rank, storeDeadline())) {
      why = " was reported lost by the others and did not rejoin";
    } else if (std::find(suspects.begin(), suspects.end(), id) != suspects.end()) {
      why = " did not rejoin and its host is blacklisted";
    }
    log("worker " + workerName(w) + why + "; killing it");
    Action kill;
    kill.kind = Action::Kind::kKill;
    kill.id = id;
    actions_.push_back(std::move(kill));
    w.retired = true;
    blacklistHost(w.slot.hostname, now, "a worker there stopped answering");
  }
}

void RoundDriver::tick(Clock::time_point now, ExitProbe* probe) {
  if (phase_ == Phase::kStopped) return;
  try {
    step(now, probe);
  } catch (const std::exception& e) {
    stop(e.what());
  }
}

void RoundDriver::step(Clock::time_point now, ExitProbe* probe) {
  refreshInits();
  switch (phase_) {
    case Phase::kRunning: {
      bool someoneAsked = false;
      for (int id : roundMembers_) someoneAsked = someoneAsked || workers_.at(id).waiting();
      if (someoneAsked) {
        phase_ = Phase::kGathering;
        gatherStart_ = now;
        gather(now, probe);
      } else if (!landed()) {
        announceIfHostsChanged(now);
      }
      break;
    }
    case Phase::kGathering: gather(now, probe); break;
    case Phase::kLaunching: formLandedRound(); break;
    case Phase::kWaitingForHosts: break;
    case Phase::kFinishing:
      tellWaiting("the elastic job is finishing: another worker completed training", /*abort=*/false);
      break;
    case Phase::kStopped: break;
  }
  if (phase_ != Phase::kWaitingForHosts) return;
  bool first = round_ < 0;
  if (!first && settings_.resetLimit.has_value() && resets_ >= *settings_.resetLimit) {
    stop("Horovod was shutdown because number of resets during elastic job exceeded limit: " +
             std::to_string(*settings_.resetLimit),
         Action::Reason::kResetLimit);
    return;
  }
  if (landed()) {
    launchRound(now);
    return;
  }
  int needed = first ? settings_.startNp : settings_.minNp;
  int have = totalSlots(registry_->available(now));
  if (have >= needed) {
    if (!first) resets_++;
    formRound(now);
  } else if (!first && registry_->allBlacklistedForGood()) {
    stop("every host of the elastic job is blacklisted; the job cannot continue", Action::Reason::kAllBlacklisted);
  } else if (now >= waitDeadline_) {
    stop("Timed out after " + seconds(settings_.elasticTimeout) + " waiting for " + std::to_string(needed) +
             " slots (" + std::to_string(have) +
             " available on hosts that are not blacklisted); check the host discovery script "
             "and --min-np, or raise --elastic-timeout",
         Action::Reason::kTimedOut, needed, have);
  }
}

int RoundDriver::exitCode() const {
  if (stopMessage_.has_value()) return 1;
  if (anySuccess_ && !failedWhileFinishing_) return 0;
  return 1;
}

}  // namespace hvd::elastic
