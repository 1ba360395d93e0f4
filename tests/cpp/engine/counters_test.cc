// Collective counters (engine/collective_counters.h): every collective a backend ran is counted
// by (backend, algorithm), exactly as its kCollectiveEnd events name it, whether or not an
// observer watches; the table itself merges equal names and grows without a lock on the way.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "cluster.h"
#include "engine/collective_counters.h"
#include "engine/observer.h"

namespace hvd::test {
namespace {

using Tally = std::map<std::pair<std::string, std::string>, uint64_t>;

Tally tally(const std::vector<engine::CollectiveCount>& counts) {
  Tally t;
  for (const auto& c : counts) {
    EXPECT_EQ(t.count({c.backend, c.algorithm}), 0u) << "one record per pair: " << c.backend << "/" << c.algorithm;
    t[{c.backend, c.algorithm}] = c.count;
  }
  return t;
}

// Tallies the kCollectiveEnd events by the backend and algorithm they name.
class EndCounter : public engine::EngineObserver {
 public:
  void onEvent(const engine::EngineEvent& e) override {
    if (e.kind != engine::EngineEventKind::kCollectiveEnd) return;
    std::lock_guard<std::mutex> lock(mu_);
    ASSERT_NE(e.backend, nullptr);
    ASSERT_NE(e.algorithm, nullptr);
    ++tally_[{e.backend, e.algorithm}];
  }
  engine::EventMask interests() const override { return engine::eventBit(engine::EngineEventKind::kCollectiveEnd); }
  Tally tally() const {
    std::lock_guard<std::mutex> lock(mu_);
    return tally_;
  }

 private:
  mutable std::mutex mu_;
  Tally tally_;
};

void someCollectives(int rank, engine::Runtime& rt, const std::string& tag) {
  std::vector<float> a(64, 1.0f), b(64);
  rt.allreduce(view(a, DataType::kFloat32), view(b, DataType::kFloat32), named("ar." + tag))->wait();
  std::vector<float> big(1 << 16, 1.0f), bigOut(1 << 16);
  rt.allreduce(view(big, DataType::kFloat32), view(bigOut, DataType::kFloat32), named("big." + tag))->wait();
  std::vector<int32_t> g(3, rank);
  rt.allgather(view(g, DataType::kInt32, {1, 3}), named("ag." + tag))->wait();
  std::vector<float> c(8, static_cast<float>(rank));
  rt.broadcast(view(c, DataType::kFloat32), named("bc." + tag))->wait();
  rt.barrier(0)->wait();
}

TEST(CollectiveCounters, CountEveryCollectiveAsItsEndEventNamesIt) {
  Cluster cluster(2);
  std::vector<std::shared_ptr<EndCounter>> watchers;
  for (int r = 0; r < 2; ++r) {
    watchers.push_back(std::make_shared<EndCounter>());
    cluster[r].addObserver(watchers.back());
  }
  cluster.run([&](int rank, engine::Runtime& rt) { someCollectives(rank, rt, "watched"); });
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    const Tally counted = tally(cluster[r].collectiveCounts());
    EXPECT_EQ(counted, watchers[r]->tally());
    uint64_t total = 0;
    for (const auto& [key, n] : counted) {
      EXPECT_EQ(key.first, "cpu");
      total += n;
    }
    EXPECT_EQ(total, 5u);  // two allreduces, an allgather, a broadcast, a barrier
    EXPECT_EQ(counted.at({"cpu", "allgatherv"}), 1u);
    EXPECT_EQ(counted.at({"cpu", "broadcast"}), 1u);
    EXPECT_EQ(counted.at({"cpu", "barrier"}), 1u);
  }
}

TEST(CollectiveCounters, CountWithoutObservers) {
  Cluster cluster(2);
  cluster.run([&](int rank, engine::Runtime& rt) {
    EXPECT_TRUE(rt.collectiveCounts().empty());
    someCollectives(rank, rt, "a");
    someCollectives(rank, rt, "b");
  });
  for (int r = 0; r < 2; ++r) {
    uint64_t total = 0;
    for (const auto& c : cluster[r].collectiveCounts()) total += c.count;
    EXPECT_EQ(total, 10u) << "rank " << r;
  }
}

TEST(CollectiveCounters, EqualNamesShareACounter) {
  engine::CollectiveCounters counters;
  char backend[] = "cpu";  // not the literal's address
  char algorithm[] = "ring";
  auto& first = counters.counter("cpu", "ring");
  engine::CollectiveCounters::increment(first);
  auto& again = counters.counter(backend, algorithm);
  EXPECT_EQ(&first, &again);
  engine::CollectiveCounters::increment(again);
  engine::CollectiveCounters::increment(counters.counter("mpi", "ring"));
  const auto snapshot = counters.snapshot();
  ASSERT_EQ(snapshot.size(), 2u);
  EXPECT_EQ(snapshot[0].backend, "cpu");
  EXPECT_EQ(snapshot[0].count, 2u);
  EXPECT_EQ(snapshot[1].backend, "mpi");
  EXPECT_EQ(snapshot[1].count, 1u);
}

}  // namespace
}  // namespace hvd::test
