// The elastic driver's policy (elastic/round_driver.h) on a MemoryStore and a fake clock: the
// workers are ids whose init() calls the test makes by bumping their counters in the store, as
// a worker's hvd.init() does, and reading the assignment the driver published.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "elastic/round_driver.h"
#include "store/elastic_protocol.h"
#include "store/memory_store.h"

namespace hvd::elastic {
namespace {

using namespace std::chrono_literals;
using Clock = RoundDriver::Clock;
using Kind = Action::Kind;

Deadline soon() { return Deadline::after(2s); }

class RoundDriverTest : public ::testing::Test {
 protected:
  void make(DriverSettings settings, std::optional<std::pair<int, int>> cooldown = std::nullopt) {
    driver_ =
        std::make_unique<RoundDriver>(settings, std::make_shared<HostRegistry>(cooldown, /*seed=*/7), store_, now_);
  }
  // Worker `id` calls init(); returns the index of the assignment it waits for.
  int64_t ask(int id) {
    int64_t k = store_->add("elastic/inits/" + std::to_string(id), 1, soon()) - 1;
    store_->add("elastic/events", 1, soon());
    return k;
  }
  std::string assignment(int id, int64_t k) {
    return getString(*store_, "elastic/assign/" + std::to_string(id) + "/" + std::to_string(k), soon());
  }
  std::vector<Action> tick(std::chrono::milliseconds advance = 0ms) {
    now_ += advance;
    driver_->tick(now_);
    return driver_->takeActions();
  }
  static std::vector<int> started(const std::vector<Action>& actions) {
    std::vector<int> ids;
    for (const auto& a : actions) {
      if (a.kind == Kind::kStart) ids.push_back(a.id);
    }
    return ids;
  }
  static std::vector<std::string> lines(const std::vector<Action>& actions) {
    std::vector<std::string> out;
    for (const auto& a : actions) {
      if (a.kind == Kind::kLog) out.push_back(a.text);
    }
    return out;
  }
  static const Action* find(const std::vector<Action>& actions, Kind kind) {
    for (const auto& a : actions) {
      if (a.kind == kind) return &a;
    }
    return nullptr;
  }

  std::shared_ptr<MemoryStore> store_ = std::make_shared<MemoryStore>();
  Clock::time_point now_ = Clock::now();
  std::unique_ptr<RoundDriver> driver_;
};

TEST_F(RoundDriverTest, TheFirstRoundWaitsForStartNpSlotsThenStartsEveryWorkerOnItsSlot) {
  DriverSettings s;
  s.startNp = 3;
  s.minNp = 2;
  make(s);
  driver_->hostsDiscovered({{"a", 2}});
  EXPECT_TRUE(tick().empty());  // 2 slots of the 3 needed
  driver_->hostsDiscovered({{"a", 2}, {"b", 2}});
  auto actions = tick();
  EXPECT_EQ(started(actions), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(lines(actions), (std::vector<std::string>{"round 0 with 4 workers on a b (4 new)"}));
  EXPECT_EQ(actions[3].slot.hostname, "b");
  EXPECT_EQ(actions[3].slot.rank, 2);
  EXPECT_EQ(actions[3].slot.localRank, 0);
  EXPECT_EQ(assignment(2, ask(2)), "join 0 2 4 0 2 1 2 0");
  EXPECT_TRUE(driver_->keepRunning());
}

TEST_F(RoundDriverTest, MaxNpBoundsTheRound) {
  DriverSettings s;
  s.maxNp = 3;
  make(s);
  driver_->hostsDiscovered({{"a", 2}, {"b", 2}});
  EXPECT_EQ(started(tick()), (std::vector<int>{0, 1, 2}));
}

TEST_F(RoundDriverTest, AFailedWorkerBlacklistsItsHostAndTheSurvivorsFormTheNextRoundFirst) {
  DriverSettings s;
  s.startNp = 4;
  make(s);
  driver_->hostsDiscovered({{"a", 2}, {"b", 2}, {"c", 2}});
  EXPECT_EQ(started(tick()), (std::vector<int>{0, 1, 2, 3, 4, 5}));
  for (int id = 0; id < 6; ++id) ask(id);  // everyone's first init
  tick();
  driver_->workerExited(1, /*success=*/false, "exit code 1", now_);
  EXPECT_EQ(lines(driver_->takeActions()),
            (std::vector<std::string>{"worker a[1] (rank 1 of round 0) ended with exit code 1",
                                      "blacklisting host a (a worker failed there)"}));
  // Worker 0 on the blacklisted host is not waited for: killed as a straggler at once.
  std::vector<int64_t> k;
  for (int id : {2, 3, 4, 5}) k.push_back(ask(id));
  // ... and round 1 forms on b and c: survivors keep their slots and order (b's first: rank 0).
  auto actions = tick();
  const Action* kill = find(actions, Kind::kKill);
  ASSERT_NE(kill, nullptr);
  EXPECT_EQ(kill->id, 0);
  EXPECT_EQ(lines(actions), (std::vector<std::string>{"worker a[0] did not rejoin and its host is blacklisted; "
                                                      "killing it",
                                                      "round 1 with 4 workers on b c"}));
  EXPECT_EQ(started(actions), std::vector<int>{});
  EXPECT_EQ(assignment(2, k[0]), "join 1 0 4 0 2 0 2 0");
  EXPECT_EQ(assignment(5, k[3]), "join 1 3 4 1 2 1 2 0");
}

TEST_F(RoundDriverTest, ASilentWorkerIsKilledAfterTheGatherTimeoutUnlessTheOthersReportedIt) {
  DriverSettings s;
  s.startNp = 3;
  s.gatherTimeout = 30s;
  make(s);
  driver_->hostsDiscovered({{"a", 1}, {"b", 1}, {"c", 1}});
  tick();
  for (int id = 0; id < 3; ++id) ask(id);
  tick();
  ask(0);  // worker 0 asks for a new round; 1 and 2 keep silent
  EXPECT_EQ(find(tick(), Kind::kKill), nullptr);
  EXPECT_EQ(find(tick(29s), Kind::kKill), nullptr);
  // The others report worker 2 (rank 2 of round 0) lost: killed now, 1 still has time.
  reportSuspect(*store_, 0, 2, soon());
  auto actions = tick();
  ASSERT_NE(find(actions, Kind::kKill), nullptr);
  EXPECT_EQ(find(actions, Kind::kKill)->id, 2);
  EXPECT_EQ(lines(actions),
            (std::vector<std::string>{"blacklisting host c (a worker there stopped answering)",
                                      "worker c[0] was reported lost by the others and did not rejoin; killing it"}));
  actions = tick(1s);  // 30 s since the reset began: worker 1 is a straggler
  ASSERT_NE(find(actions, Kind::kKill), nullptr);
  EXPECT_EQ(find(actions, Kind::kKill)->id, 1);
  EXPECT_EQ(lines(actions).at(0),
            "worker b[0] did not rejoin within 30.0 s (HOROVOD_ELASTIC_GATHER_TIMEOUT); killing it");
}

TEST_F(RoundDriverTest, TheResetLimitEndsTheJobAndAbortsTheWaitingWorkers) {
  DriverSettings s;
  s.startNp = 2;
  s.resetLimit = 0;
  make(s);
  driver_->hostsDiscovered({{"a", 1}, {"b", 1}});
  tick();
  ask(0);
  ask(1);
  tick();
  driver_->workerExited(1, false, "exit code 1", now_);
  int64_t k = ask(0);
  auto actions = tick();
  const Action* finish = find(actions, Kind::kFinish);
  ASSERT_NE(finish, nullptr);
  EXPECT_EQ(finish->exitCode, 1);
  EXPECT_EQ(finish->text, "Horovod was shutdown because number of resets during elastic job exceeded limit: 0");
  EXPECT_EQ(assignment(0, k), "abort " + finish->text);
  EXPECT_FALSE(driver_->keepRunning());
  EXPECT_EQ(driver_->exitCode(), 1);
}

TEST_F(RoundDriverTest, TooFewSlotsPastTheElasticTimeoutEndTheJob) {
  DriverSettings s;
  s.startNp = 2;
  s.elasticTimeout = 1s;
  make(s);
  driver_->hostsDiscovered({{"a", 1}});
  EXPECT_EQ(find(tick(999ms), Kind::kFinish), nullptr);
  const Action* finish = nullptr;
  auto actions = tick(1ms);
  finish = find(actions, Kind::kFinish);
  ASSERT_NE(finish, nullptr);
  EXPECT_EQ(finish->text,
            "Timed out after 1.0 s waiting for 2 slots (1 available on hosts that are not blacklisted); check the "
            "host discovery script and --min-np, or raise --elastic-timeout");
}

TEST_F(RoundDriverTest, AWorkerThatCompletedEndsTheRoundsAndTheWaitingOnesAreRemoved) {
  DriverSettings s;
  s.startNp = 2;
  make(s);
  driver_->hostsDiscovered({{"a", 2}});
  tick();
  ask(0);
  ask(1);
  tick();
  int64_t k = ask(1);
  driver_->workerExited(0, /*success=*/true, "exit code 0", now_);
  EXPECT_FALSE(driver_->keepRunning());
  tick();  // reads worker 1's new init
  EXPECT_EQ(assignment(1, k), "removed the elastic job is finishing: another worker completed training");
  driver_->workerExited(1, true, "exit code 0", now_);
  EXPECT_EQ(driver_->exitCode(), 0);
}

TEST_F(RoundDriverTest, ARoundWithoutASurvivingHostCannotBroadcastTheState) {
  DriverSettings s;
  s.startNp = 1;
  make(s, std::make_pair(1, 1));  // cooldown: hosts come back, the job goes on
  driver_->hostsDiscovered({{"a", 1}, {"b", 1}});
  tick();
  ask(0);
  ask(1);
  tick();
  int64_t k = ask(0);
  driver_->hostsDiscovered({{"b", 1}, {"c", 1}});  // a, where the only survivor waits, is gone
  driver_->workerExited(1, false, "exit code 1", now_);
  auto actions = tick();
  const Action* finish = find(actions, Kind::kFinish);
  ASSERT_NE(finish, nullptr);
  EXPECT_EQ(finish->text, "No hosts from previous set remaining, unable to broadcast state.");
  EXPECT_EQ(assignment(0, k), "abort No hosts from previous set remaining, unable to broadcast state.");
}

TEST_F(RoundDriverTest, AHostChangeThatMovesThePlacementIsAnnouncedOnce) {
  DriverSettings s;
  s.startNp = 1;
  make(s);
  driver_->hostsDiscovered({{"a", 1}});
  tick();
  ask(0);
  tick();
  EXPECT_EQ(readUpdateCount(*store_, soon()), 0);
  driver_->hostsDiscovered({{"a", 1}, {"b", 1}});
  EXPECT_EQ(lines(tick()), (std::vector<std::string>{"hosts added (update 1); workers re-form at their next commit"}));
  EXPECT_TRUE(lines(tick()).empty());
  EXPECT_EQ(readHostUpdates(*store_, 0, soon()).flags, kHostsAdded);
  // The worker re-inits: the next round takes b.
  int64_t k = ask(0);
  auto actions = tick();
  EXPECT_EQ(started(actions), std::vector<int>{1});
  EXPECT_EQ(assignment(0, k), "join 1 0 2 0 1 0 2 1");
}

TEST_F(RoundDriverTest, AWorkerThatCannotStartBlacklistsItsHost) {
  DriverSettings s;
  s.startNp = 2;
  make(s, std::make_pair(10, 10));
  driver_->hostsDiscovered({{"a", 1}, {"b", 1}});
  tick();
  driver_->startFailed(1, "ssh: connect refused", now_);
  EXPECT_EQ(lines(driver_->takeActions()),
            (std::vector<std::string>{"cannot start a worker on b: ssh: connect refused",
                                      "blacklisting host b (a worker could not be started there) for 10.0 s"}));
}

TEST_F(RoundDriverTest, FailEndsTheJobWithTheOwnersMessage) {
  make(DriverSettings{});
  driver_->fail("host discovery script printed an invalid host: 'x y'");
  const Action* finish = nullptr;
  auto actions = driver_->takeActions();
  finish = find(actions, Kind::kFinish);
  ASSERT_NE(finish, nullptr);
  EXPECT_EQ(finish->text, "host discovery script printed an invalid host: 'x y'");
  EXPECT_TRUE(tick().empty());  // stopped: nothing more
}

// ---- kLanded: the framework places the workers, the driver forms rounds from where they landed ----

class LandedTest : public RoundDriverTest {
 protected:
  void makeLanded(DriverSettings s) {
    s.placement = PlacementMode::kLanded;
    make(s);
  }
  // A tick as the owner makes it: with a capacity report when the driver waits for room.
  std::vector<Action> roomTick(int room, std::chrono::milliseconds advance = 0ms) {
    if (driver_->wantsRoom()) driver_->capacity(room);
    return tick(advance);
  }
  static std::vector<int> launched(const std::vector<Action>& actions) {
    std::vector<int> ids;
    for (const auto& a : actions) {
      if (a.kind == Kind::kLaunch) ids.push_back(a.id);
    }
    return ids;
  }
};

TEST_F(LandedTest, ALostWorkerIsReplacedAndTheSurvivorsComeFirst) {
  DriverSettings s;
  s.maxNp = 3;
  s.firstId = 10;
  makeLanded(s);
  driver_->capacity(3);
  auto actions = tick();
  EXPECT_EQ(launched(actions), (std::vector<int>{10, 11, 12}));
  EXPECT_TRUE(started(actions).empty());  // not before they landed
  driver_->workerLanded(10, "h0");
  driver_->workerLanded(11, "h1");
  EXPECT_TRUE(tick().empty());
  driver_->workerLanded(12, "h0");
  actions = tick();
  EXPECT_EQ(lines(actions), (std::vector<std::string>{"round 0 with 3 workers (3 new)"}));
  // h0's workers get consecutive ranks: 10 -> 0, 12 -> 1, 11 -> 2.
  EXPECT_EQ(started(actions), (std::vector<int>{10, 11, 12}));
  EXPECT_EQ(assignment(12, ask(12)), "join 0 1 3 1 2 0 1 0");
  EXPECT_EQ(assignment(11, ask(11)), "join 0 2 3 0 1 1 2 0");
  ask(10);
  driver_->capacity(0);
  tick();
  EXPECT_EQ(driver_->members(), (std::vector<std::pair<int, int>>{{10, 0}, {12, 1}, {11, 2}}));
  driver_->workerExited(10, false, "it raised RuntimeError: boom", now_);
  EXPECT_EQ(lines(driver_->takeActions()),
            (std::vector<std::string>{"worker 10 (rank 0 of round 0) failed: it raised RuntimeError: boom"}));
  int64_t k12 = ask(12), k11 = ask(11);
  EXPECT_TRUE(launched(roomTick(1)).empty());  // the round gathered: now it waits for room
  EXPECT_TRUE(driver_->wantsRoom());
  actions = roomTick(1);  // the lost worker's room came free
  EXPECT_EQ(launched(actions), std::vector<int>{13});
  driver_->workerLanded(13, "h2");
  actions = tick();
  EXPECT_EQ(lines(actions), (std::vector<std::string>{"round 1 with 3 workers (1 new)"}));
  EXPECT_EQ(assignment(12, k12), "join 1 0 3 0 1 0 3 0");
  EXPECT_EQ(assignment(11, k11), "join 1 1 3 0 1 1 3 0");
  EXPECT_EQ(started(actions), std::vector<int>{13});
  EXPECT_EQ(driver_->members(), (std::vector<std::pair<int, int>>{{12, 0}, {11, 1}, {13, 2}}));
  EXPECT_EQ(driver_->nextId(), 14);
}

TEST_F(LandedTest, WithoutRoomALaterRoundWaitsTheReplaceGraceThenFormsSmaller) {
  DriverSettings s;
  s.replaceGrace = 5s;
  makeLanded(s);
  driver_->capacity(2);
  tick();
  driver_->workerLanded(0, "h");
  driver_->workerLanded(1, "h");
  tick();
  ask(0);
  ask(1);
  driver_->capacity(0);
  tick();
  driver_->workerExited(1, false, "its Ray actor died", now_);
  driver_->takeActions();
  int64_t k = ask(0);
  EXPECT_TRUE(lines(roomTick(0)).empty());
  EXPECT_TRUE(lines(roomTick(0, 4s)).empty());
  EXPECT_EQ(lines(roomTick(0, 1s)), (std::vector<std::string>{"round 1 with 1 workers (0 new)"}));
  EXPECT_EQ(assignment(0, k), "join 1 0 1 0 1 0 1 0");
}

TEST_F(LandedTest, TooLittleRoomPastTheElasticTimeoutEndsTheJobWithTheCounts) {
  DriverSettings s;
  s.startNp = 2;
  s.elasticTimeout = 1s;
  makeLanded(s);
  driver_->capacity(1);
  EXPECT_TRUE(tick().empty());
  auto actions = tick(1s);
  const Action* finish = find(actions, Kind::kFinish);
  ASSERT_NE(finish, nullptr);
  EXPECT_EQ(finish->reason, Action::Reason::kTimedOut);
  EXPECT_EQ(finish->needed, 2);
  EXPECT_EQ(finish->have, 1);
}

TEST_F(LandedTest, FailuresNeitherBlacklistNorKillTheOtherWorkersOfTheirHost) {
  DriverSettings s;
  s.startNp = 2;
  makeLanded(s);
  driver_->capacity(2);
  tick();
  driver_->workerLanded(0, "node");
  driver_->workerLanded(1, "node");
  tick();
  ask(0);
  ask(1);
  driver_->capacity(0);
  tick();
  driver_->workerExited(0, false, "its Ray actor died", now_);
  auto actions = driver_->takeActions();
  EXPECT_EQ(lines(actions).size(), 1u);  // no blacklisting
  EXPECT_EQ(find(tick(), Kind::kKill), nullptr);  // worker 1 on the same host gets its time
  int64_t k = ask(1);
  tick();
  actions = roomTick(1);
  EXPECT_EQ(launched(actions), std::vector<int>{2});
  driver_->workerLanded(2, "node");
  tick();
  EXPECT_EQ(assignment(1, k), "join 1 0 2 0 2 0 1 0");
}

TEST_F(LandedTest, WithACooldownRangeAFailedWorkersHostIsBlacklistedForNewWorkersOnly) {
  DriverSettings s;
  s.startNp = 2;
  s.placement = PlacementMode::kLanded;
  make(s, std::make_pair(600, 600));
  driver_->capacity(2);
  tick();
  driver_->workerLanded(0, "node");
  driver_->workerLanded(1, "node");
  tick();
  ask(0);
  ask(1);
  tick();
  driver_->workerExited(1, false, "its Ray actor died", now_);
  EXPECT_EQ(lines(driver_->takeActions()),
            (std::vector<std::string>{"worker 1 (rank 1 of round 0) failed: its Ray actor died",
                                      "blacklisting host node (a worker failed there) for 600.0 s"}));
  EXPECT_TRUE(driver_->blacklisted("node", now_));
  EXPECT_EQ(find(tick(), Kind::kKill), nullptr);  // worker 0 there is not cut off with it
  int64_t k = ask(0);
  tick();
  EXPECT_EQ(lines(roomTick(0, 5s)), (std::vector<std::string>{"round 1 with 1 workers (0 new)"}));
  EXPECT_EQ(assignment(0, k), "join 1 0 1 0 1 0 1 0");
  EXPECT_FALSE(driver_->blacklisted("node", now_ + 600s));
}

TEST_F(LandedTest, ALaunchedWorkerThatAsksBeforeItsFirstJoinIsANewWorkerNotASurvivor) {
  DriverSettings s;
  s.maxNp = 2;
  makeLanded(s);
  driver_->capacity(2);
  tick();
  int64_t k0 = ask(0), k1 = ask(1);  // before the round formed
  driver_->workerLanded(0, "h");
  driver_->workerLanded(1, "h");
  EXPECT_EQ(lines(tick()), (std::vector<std::string>{"round 0 with 2 workers (2 new)"}));
  EXPECT_EQ(assignment(0, k0), "join 0 0 2 0 2 0 1 0");
  EXPECT_EQ(assignment(1, k1), "join 0 1 2 1 2 0 1 0");
}

}  // namespace
}  // namespace hvd::elastic
