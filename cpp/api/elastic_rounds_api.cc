// horovod/elastic_rounds.h over the elastic layer's RoundDriver in its kLanded mode.
#include "horovod/elastic_rounds.h"

#include "elastic/round_driver.h"
#include "store/store.h"

namespace hvd {

std::shared_ptr<Store> servedStore(RendezvousServer& server);

namespace {

using Clock = std::chrono::steady_clock;

elastic::DriverSettings driverSettings(const ElasticRoundSettings& s) {
  elastic::DriverSettings d;
  d.placement = elastic::PlacementMode::kLanded;
  d.startNp = std::max(s.startWorkers, s.minWorkers);
  d.minNp = s.minWorkers;
  d.maxNp = s.maxWorkers;
  d.resetLimit = s.resetLimit;
  d.elasticTimeout = s.elasticTimeout;
  d.gatherTimeout = s.gatherTimeout;
  d.replaceGrace = s.replaceGrace;
  d.firstId = s.firstId;
  return d;
}

const char* reasonName(elastic::Action::Reason reason) {
  switch (reason) {
    case elastic::Action::Reason::kTimedOut: return "timed_out";
    case elastic::Action::Reason::kResetLimit: return "reset_limit";
    case elastic::Action::Reason::kRoundFailed: return "round_failed";
    case elastic::Action::Reason::kNoSurvivors: return "no_survivors";
    case elastic::Action::Reason::kNone: return "";
    case elastic::Action::Reason::kAllBlacklisted:
    case elastic::Action::Reason::kOther: break;
  }
  return "other";
}

ElasticAction publicAction(const elastic::Action& a) {
  ElasticAction out;
  out.id = a.id;
  out.text = a.text;
  switch (a.kind) {
    case elastic::Action::Kind::kLog: out.kind = ElasticAction::Kind::kLog; break;
    case elastic::Action::Kind::kLaunch: out.kind = ElasticAction::Kind::kLaunch; break;
    case elastic::Action::Kind::kStart:
      out.kind = ElasticAction::Kind::kStart;
      out.slot = a.slot;
      out.host = a.slot.hostname;
      break;
    case elastic::Action::Kind::kKill: out.kind = ElasticAction::Kind::kKill; break;
    case elastic::Action::Kind::kFinish:
      out.kind = ElasticAction::Kind::kFinish;
      out.reason = reasonName(a.reason);
      out.needed = a.needed;
      out.have = a.have;
      break;
  }
  return out;
}

}  // namespace

struct ElasticBlacklist::Impl {
  std::shared_ptr<elastic::HostRegistry> registry;
  Clock::duration skew{0};  // advanceClock()
  Clock::time_point now() const { return Clock::now() + skew; }
};

ElasticBlacklist::ElasticBlacklist(std::optional<std::pair<double, double>> cooldownRange)
    : impl_(std::make_shared<Impl>(Impl{std::make_shared<elastic::HostRegistry>(cooldownRange)})) {}

bool ElasticBlacklist::blacklisted(const std::string& host) const {
  return impl_->registry->isBlacklisted(host, impl_->now());
}

void ElasticBlacklist::advanceClock(std::chrono::milliseconds by) { impl_->skew += by; }

struct ElasticRounds::Impl {
  std::shared_ptr<ElasticBlacklist::Impl> blacklist;
  elastic::RoundDriver driver;
  Clock::time_point now() const { return blacklist->now(); }
};

ElasticRounds::ElasticRounds(RendezvousServer& server, const ElasticRoundSettings& settings,
                             const ElasticBlacklist& blacklist)
    : impl_(std::make_unique<Impl>(
          Impl{blacklist.impl_, elastic::RoundDriver(driverSettings(settings), blacklist.impl_->registry,
                                                     servedStore(server), blacklist.impl_->now())})) {}

ElasticRounds::~ElasticRounds() = default;

void ElasticRounds::capacity(int room) { impl_->driver.capacity(room); }

bool ElasticRounds::wantsRoom() const { return impl_->driver.wantsRoom(); }

void ElasticRounds::workerLanded(int id, const std::string& host) { impl_->driver.workerLanded(id, host); }

void ElasticRounds::workerExited(int id, bool success, const std::string& how) {
  impl_->driver.workerExited(id, success, how, impl_->now());
}

void ElasticRounds::fail(const std::string& message) { impl_->driver.fail(message); }

std::vector<ElasticAction> ElasticRounds::tick() {
  impl_->driver.tick(impl_->now());
  std::vector<ElasticAction> out;
  for (const elastic::Action& a : impl_->driver.takeActions()) out.push_back(publicAction(a));
  return out;
}

std::vector<std::pair<int, int>> ElasticRounds::members() const { return impl_->driver.members(); }

bool ElasticRounds::keepRunning() const { return impl_->driver.keepRunning(); }

int ElasticRounds::exitCode() const { return impl_->driver.exitCode(); }

int ElasticRounds::nextId() const { return impl_->driver.nextId(); }

}  // namespace hvd
