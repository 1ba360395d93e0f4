// horovod/rendezvous.h: the store server and client that horovod.ray and horovod.spark serve
// their jobs with (horovod._core binds them): the server's own store operations, a client's
// blocking get, a refused secret, an unreachable server, and shutdown.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

#include "horovod/elastic_rounds.h"
#include "horovod/rendezvous.h"

namespace hvd {
namespace {

using std::chrono::milliseconds;

TEST(Rendezvous, ServerAndClientShareTheStore) {
  RendezvousServer server("127.0.0.1", 0, "secret");
  ASSERT_GT(server.port(), 0);
  RendezvousClient client("127.0.0.1", server.port(), "secret", milliseconds(5000));
  EXPECT_FALSE(server.tryGet("k").has_value());
  EXPECT_EQ(server.add("n", 0), 0);
  client.set("k", std::string("v\0x", 3));
  EXPECT_EQ(server.tryGet("k"), std::string("v\0x", 3));
  EXPECT_EQ(client.add("n", 2), 2);
  EXPECT_EQ(server.add("n", 0), 2);
  server.set("assign", "join");
  EXPECT_EQ(client.get("assign", milliseconds(1000)), "join");
  server.set("text", "abc");
  EXPECT_THROW(server.add("text", 1), StoreError);
}

TEST(Rendezvous, ClientGetWaitsForTheKeyOrGivesUp) {
  RendezvousServer server("127.0.0.1", 0, "secret");
  RendezvousClient client("127.0.0.1", server.port(), "secret", milliseconds(5000));
  std::thread later([&] {
    std::this_thread::sleep_for(milliseconds(200));
    server.set("late", "1");
  });
  EXPECT_EQ(client.get("late", milliseconds(10000)), "1");
  later.join();
  auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(client.get("never", milliseconds(200)).has_value());
  EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(150));
}

TEST(Rendezvous, WrongSecretIsRefusedAndCounted) {
  RendezvousServer server("127.0.0.1", 0, "secret");
  EXPECT_THROW(RendezvousClient("127.0.0.1", server.port(), "other", milliseconds(5000)), RendezvousRefused);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (server.refusedConnections() == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(10));
  }
  EXPECT_EQ(server.refusedConnections(), 1);
}

TEST(Rendezvous, PortInUseIsAStoreErrorNamingThePort) {
  RendezvousServer server("127.0.0.1", 0, "secret");
  try {
    RendezvousServer second("127.0.0.1", server.port(), "secret");
    FAIL() << "a second server listened on the same port";
  } catch (const StoreError& e) {
    EXPECT_NE(std::string(e.what()).find(std::to_string(server.port())), std::string::npos) << e.what();
  }
}

TEST(Rendezvous, ShutdownIsIdempotentAndEndsTheStore) {
  RendezvousServer server("127.0.0.1", 0, "secret");
  uint16_t port = server.port();
  server.shutdown();
  server.shutdown();
  EXPECT_EQ(server.port(), port);
  EXPECT_THROW(server.set("k", "v"), StoreError);
  EXPECT_THROW(RendezvousClient("127.0.0.1", port, "secret", milliseconds(300)), StoreError);
}

}  // namespace
}  // namespace hvd

namespace hvd {
namespace {

// The elastic driver for framework pools (horovod/elastic_rounds.h) speaks horovodrun's keys and
// assignment text on the server's store: a worker's init() (elastic::requestAssignment, here by
// hand through a client) sees what it published.
TEST(Rendezvous, ElasticRoundsFormRoundsOnTheServersStore) {
  RendezvousServer server("127.0.0.1", 0, "secret");
  RendezvousClient worker("127.0.0.1", server.port(), "secret", milliseconds(5000));
  ElasticRoundSettings settings;
  settings.firstId = 7;
  ElasticBlacklist blacklist(std::make_pair(60.0, 60.0));
  ElasticRounds rounds(server, settings, blacklist);
  EXPECT_TRUE(rounds.wantsRoom());
  rounds.capacity(1);
  std::vector<ElasticAction> actions = rounds.tick();
  ASSERT_EQ(actions.size(), 1u);
  EXPECT_EQ(actions[0].kind, ElasticAction::Kind::kLaunch);
  EXPECT_EQ(actions[0].id, 7);
  rounds.workerLanded(7, "node-a");
  actions = rounds.tick();
  ASSERT_EQ(actions.size(), 2u);
  EXPECT_EQ(actions[0].text, "round 0 with 1 workers (1 new)");
  EXPECT_EQ(actions[1].kind, ElasticAction::Kind::kStart);
  EXPECT_EQ(actions[1].host, "node-a");
  EXPECT_EQ(actions[1].slot.size, 1);
  worker.add("elastic/inits/7", 1);
  worker.add("elastic/events", 1);
  EXPECT_EQ(worker.get("elastic/assign/7/0", milliseconds(1000)), "join 0 0 1 0 1 0 1 0");
  EXPECT_EQ(rounds.members(), (std::vector<std::pair<int, int>>{{7, 0}}));
  rounds.workerExited(7, false, "it raised ValueError: x");
  EXPECT_TRUE(blacklist.blacklisted("node-a"));
  blacklist.advanceClock(std::chrono::seconds(60));
  EXPECT_FALSE(blacklist.blacklisted("node-a"));  // its cooldown is over
  actions = rounds.tick();
  ASSERT_FALSE(actions.empty());
  EXPECT_EQ(actions.back().kind, ElasticAction::Kind::kFinish);
  EXPECT_EQ(actions.back().reason, "round_failed");
  EXPECT_EQ(actions.back().text, "every worker of round 0 failed; the elastic job cannot continue");
  EXPECT_FALSE(rounds.keepRunning());
  EXPECT_EQ(rounds.exitCode(), 1);
  EXPECT_EQ(rounds.nextId(), 8);
}

}  // namespace
}  // namespace hvd
