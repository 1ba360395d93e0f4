// Engine observers: a recording subscriber per rank checks the order and content of the events
// the engine publishes for one allreduce, an allgather, a fused step, a cached step, process-set
// changes and stall ticks; and the subscription itself (before init, removal, a failing observer).
#include <gtest/gtest.h>

#include <algorithm>
#include <barrier>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <ostream>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "cluster.h"
#include "collectives/algorithms.h"
#include "engine/observer.h"

namespace hvd::engine {
// Kind names in gtest's failure messages.
void PrintTo(EngineEventKind kind, std::ostream* os) { *os << eventKindName(kind); }
}  // namespace hvd::engine

namespace hvd::test {
namespace {

using engine::EngineEvent;
using engine::EngineEventKind;
using engine::EngineObserver;
using K = EngineEventKind;

struct Pending {
  int32_t processSet = 0;
  std::string name;
  bool cached = false;
  std::vector<int> submitted, missing;
};

// An event copied out of the callback (its views are valid only during the call).
struct Recorded {
  EngineEventKind kind;
  int64_t timeNs = 0;
  int32_t processSet = 0;
  engine::Kind op;
  std::vector<std::string> tensors;
  int64_t bytes = 0;
  std::string algorithm;  // "" = none given
  int rank = -1;
  uint32_t cacheId = engine::kNoCacheId;
  bool failed = false;
  std::vector<int> ranks;
  std::vector<Pending> pending;
  std::thread::id thread;
};

class Recorder : public EngineObserver {
 public:
  explicit Recorder(std::chrono::milliseconds tick = std::chrono::milliseconds(0)) : tick_(tick) {}

  void onEvent(const EngineEvent& e) override {
    Recorded r;
    r.kind = e.kind;
    r.timeNs = e.timeNs;
    r.processSet = e.processSet;
    r.op = e.op;
    for (size_t i = 0; i < e.tensors.size(); ++i) r.tensors.emplace_back(e.tensors[i]);
    r.bytes = e.bytes;
    if (e.algorithm != nullptr) r.algorithm = e.algorithm;
    r.rank = e.rank;
    r.cacheId = e.cacheId;
    r.failed = e.failed;
    r.ranks.assign(e.ranks.begin(), e.ranks.end());
    for (const auto& p : e.pending) {
      r.pending.push_back({p.processSet, std::string(p.name), p.cached, p.submitted, p.missing});
    }
    r.thread = std::this_thread::get_id();
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back(std::move(r));
    cv_.notify_all();
  }
  std::chrono::milliseconds stallTickInterval() const override { return tick_; }

  std::vector<Recorded> events() const {
    std::lock_guard<std::mutex> lock(mu_);
    return events_;
  }
  void clear() {
    std::lock_guard<std::mutex> lock(mu_);
    events_.clear();
  }
  // The events naming `tensor` (ticks excluded), in delivery order.
  std::vector<Recorded> about(const std::string& tensor) const {
    std::vector<Recorded> out;
    for (auto& e : events()) {
      if (std::find(e.tensors.begin(), e.tensors.end(), tensor) != e.tensors.end()) out.push_back(e);
    }
    return out;
  }
  // Waits until some recorded event satisfies `pred`; false after `limit`.
  bool waitFor(const std::function<bool(const Recorded&)>& pred,
               std::chrono::seconds limit = std::chrono::seconds(10)) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, limit, [&] { return std::any_of(events_.begin(), events_.end(), pred); });
  }

 private:
  std::chrono::milliseconds tick_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Recorded> events_;
};

std::vector<K> kinds(const std::vector<Recorded>& events) {
  std::vector<K> out;
  for (const auto& e : events) out.push_back(e.kind);
  return out;
}

std::string describe(const std::vector<Recorded>& events) {
  std::string s;
  for (const auto& e : events) {
    s += engine::eventKindName(e.kind);
    if (e.rank >= 0) s += "(rank " + std::to_string(e.rank) + ")";
    if (!e.algorithm.empty()) s += "[" + e.algorithm + "]";
    s += " ";
  }
  return s;
}

std::vector<Recorded> ofKind(const std::vector<Recorded>& events, K kind) {
  std::vector<Recorded> out;
  for (const auto& e : events) {
    if (e.kind == kind) out.push_back(e);
  }
  return out;
}

void expectTimesOrdered(const std::vector<Recorded>& events) {
  for (size_t i = 1; i < events.size(); ++i) {
    EXPECT_LE(events[i - 1].timeNs, events[i].timeNs) << "event " << i << ": " << describe(events);
  }
}

// One negotiated tensor's events on `rank` of two: enqueue, on rank 0 the negotiation (start
// with the first arrival, one arrival per rank, end), then `after`. Rank 1's request may reach
// the coordinator before rank 0 has enqueued, so rank 0's enqueue is only known to precede its
// own arrival.
void expectNegotiated(const std::vector<Recorded>& ev, int rank, const std::vector<K>& after) {
  std::vector<Recorded> rest = ev;
  auto enqueue = std::find_if(rest.begin(), rest.end(), [](const Recorded& e) { return e.kind == K::kEnqueue; });
  ASSERT_NE(enqueue, rest.end());
  const auto enqueueAt = enqueue - rest.begin();
  rest.erase(enqueue);
  std::vector<K> expected;
  if (rank == 0) expected = {K::kNegotiateStart, K::kNegotiateRank, K::kNegotiateRank, K::kNegotiateEnd};
  expected.insert(expected.end(), after.begin(), after.end());
  ASSERT_EQ(kinds(rest), expected);
  if (rank != 0) {
    EXPECT_EQ(enqueueAt, 0);
    return;
  }
  EXPECT_EQ(rest[0].rank, rest[1].rank) << "the first arrival starts the negotiation";
  EXPECT_EQ((std::set<int>{rest[1].rank, rest[2].rank}), (std::set<int>{0, 1}));
  const auto ownArrival = rest[1].rank == 0 ? 1 : 2;  // index in `rest`; in `ev` one more
  EXPECT_LE(enqueueAt, ownArrival + 1) << "rank 0's enqueue precedes its own arrival";
}

std::vector<std::shared_ptr<Recorder>> attach(Cluster& cluster) {
  std::vector<std::shared_ptr<Recorder>> recorders;
  for (int r = 0; r < cluster.size(); ++r) {
    recorders.push_back(std::make_shared<Recorder>());
    cluster[r].addObserver(recorders.back());
  }
  return recorders;
}

// Sets an environment variable for the communicators built meanwhile (they read
// HOROVOD_ALLREDUCE_ALGO from the process environment, not from the runtime's config).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (value != nullptr) setenv(name, value, 1);
  }
  ~ScopedEnv() { unsetenv(name_); }

 private:
  const char* name_;
};

bool isTableAlgorithm(const std::string& name) {
  for (const auto& a : collectives::allreduceAlgorithms()) {
    if (name == a.name) return true;
  }
  return false;
}

// (a) One allreduce: enqueue -> negotiation (rank 0: start, one arrival per rank, end) ->
// collective start/end with its bytes and algorithm -> done. No fusion copies: a single tensor is
// reduced straight into the caller's output.
void singleAllreduce(const char* algorithm) {
  ScopedEnv forced("HOROVOD_ALLREDUCE_ALGO", algorithm);
  const std::string expectedAlgorithm = algorithm != nullptr ? algorithm : "";
  Cluster cluster(2);
  auto rec = attach(cluster);
  std::vector<std::thread::id> callers(2);
  cluster.run([&](int rank, engine::Runtime& rt) {
    callers[rank] = std::this_thread::get_id();
    std::vector<float> in(16, 1.0f + rank), out(16);
    rt.allreduce(view(in, DataType::kFloat32), view(out, DataType::kFloat32), named("x"))->wait();
    ASSERT_EQ(out[0], 3.0f);
  });
  for (int rank = 0; rank < 2; ++rank) {
    auto ev = rec[rank]->about("x");
    SCOPED_TRACE("rank " + std::to_string(rank) + ": " + describe(ev));
    expectNegotiated(ev, rank, {K::kCollectiveStart, K::kCollectiveEnd, K::kTensorDone});
    if (::testing::Test::HasFatalFailure()) return;
    // The engine's events are published by one thread at a time, in order (the enqueue event, on
    // the caller's thread, may interleave with rank 1's arrivals).
    auto engineSide = ev;
    std::erase_if(engineSide, [](const Recorded& e) { return e.kind == K::kEnqueue; });
    expectTimesOrdered(engineSide);
    const Recorded enqueue = ofKind(ev, K::kEnqueue)[0];
    EXPECT_EQ(enqueue.bytes, 64);
    EXPECT_EQ(enqueue.op, engine::Kind::kAllreduce);
    EXPECT_EQ(enqueue.thread, callers[rank]) << "enqueue events come on the enqueueing thread";
    const Recorded& end = ev[ev.size() - 2];
    EXPECT_EQ(end.bytes, 64);
    EXPECT_EQ(ev[ev.size() - 3].bytes, 64);
    EXPECT_TRUE(isTableAlgorithm(end.algorithm)) << end.algorithm;
    if (!expectedAlgorithm.empty()) {
      EXPECT_EQ(end.algorithm, expectedAlgorithm);
    } else {
      // The local transport offers shared memory.
      EXPECT_EQ(end.algorithm, collectives::chooseAllreduce("", 64, 2, true).name);
    }
    EXPECT_FALSE(ev.back().failed);
    EXPECT_TRUE(ofKind(ev, K::kCacheHit).empty());
  }
}

TEST(Observer, SingleAllreduce) { singleAllreduce(nullptr); }

TEST(Observer, SingleAllreduceNamesForcedAlgorithm) { singleAllreduce("ring"); }

// (b) Allgather: the collective reports the gathered bytes (every rank's rows).
TEST(Observer, Allgather) {
  Cluster cluster(2);
  auto rec = attach(cluster);
  cluster.run([&](int rank, engine::Runtime& rt) {
    std::vector<int32_t> in(static_cast<size_t>(3 * (rank + 1)), rank);
    auto w = rt.allgather(view(in, DataType::kInt32, {rank + 1, 3}), named("g"));
    w->wait();
    ASSERT_EQ(w->outputs()[0].view.shape[0], 3);
  });
  for (int rank = 0; rank < 2; ++rank) {
    auto ev = rec[rank]->about("g");
    SCOPED_TRACE("rank " + std::to_string(rank) + ": " + describe(ev));
    expectNegotiated(ev, rank, {K::kCollectiveStart, K::kCollectiveEnd, K::kTensorDone});
    if (::testing::Test::HasFatalFailure()) return;
    const Recorded enqueue = ofKind(ev, K::kEnqueue)[0];
    EXPECT_EQ(enqueue.bytes, 12 * (rank + 1));
    EXPECT_EQ(enqueue.op, engine::Kind::kAllgather);
    for (const auto& e : ofKind(ev, K::kCollectiveStart)) {
      EXPECT_EQ(e.bytes, 36);
      EXPECT_EQ(e.algorithm, "allgatherv");
    }
    EXPECT_EQ(ofKind(ev, K::kCollectiveEnd)[0].bytes, 36);
  }
}

// (c) Several small allreduces fused into one response: one collective naming every tensor with
// their summed bytes. Where they go through the fusion buffer (a point-to-point algorithm such as
// ring needs one contiguous buffer), fusion copies surround it; the shared-memory algorithms the
// local transport offers by default read and write the tensors where they lie, so no copies.
void fusedStep(const char* algorithm, bool expectCopies) {
  ScopedEnv forced("HOROVOD_ALLREDUCE_ALGO", algorithm);
  const char* forcedName = algorithm;
  Cluster cluster(2);
  auto rec = attach(cluster);
  const int n = 4;
  cluster.run([&](int rank, engine::Runtime& rt) {
    std::vector<std::vector<float>> in(n, std::vector<float>(8, 1.0f + rank)), out(n, std::vector<float>(8));
    std::vector<TensorView> ins, outs;
    for (int i = 0; i < n; ++i) {
      ins.push_back(view(in[i], DataType::kFloat32));
      outs.push_back(view(out[i], DataType::kFloat32));
    }
    rt.groupedAllreduce(ins, outs, named("f"))->wait();
    for (auto& o : out) ASSERT_EQ(o[0], 3.0f);
  });
  for (int rank = 0; rank < 2; ++rank) {
    auto ev = rec[rank]->about("f_1of4");
    SCOPED_TRACE("rank " + std::to_string(rank) + ": " + describe(ev));
    auto data = ev;
    data.erase(std::remove_if(data.begin(), data.end(),
                              [](const Recorded& e) {
                                return e.tensors.size() == 1;  // the tensor's own enqueue/negotiation/done
                              }),
               data.end());
    std::vector<K> expected;
    if (expectCopies) expected = {K::kFusionCopyInStart, K::kFusionCopyInEnd};
    expected.insert(expected.end(), {K::kCollectiveStart, K::kCollectiveEnd});
    if (expectCopies) expected.insert(expected.end(), {K::kFusionCopyOutStart, K::kFusionCopyOutEnd});
    ASSERT_EQ(kinds(data), expected);
    expectTimesOrdered(data);
    for (const auto& e : data) {
      EXPECT_EQ(e.tensors, (std::vector<std::string>{"f_1of4", "f_2of4", "f_3of4", "f_4of4"}));
      EXPECT_EQ(e.bytes, n * 32);
    }
    const std::string algorithm = ofKind(data, K::kCollectiveEnd)[0].algorithm;
    EXPECT_TRUE(isTableAlgorithm(algorithm)) << algorithm;
    if (forcedName != nullptr) {
      EXPECT_EQ(algorithm, forcedName);
    }
    // Every tensor is done after the fused collective ended.
    auto all = rec[rank]->events();
    auto collectiveEnd =
        std::find_if(all.begin(), all.end(), [](const Recorded& e) { return e.kind == K::kCollectiveEnd; });
    ASSERT_NE(collectiveEnd, all.end());
    EXPECT_EQ(std::count_if(collectiveEnd, all.end(), [](const Recorded& e) { return e.kind == K::kTensorDone; }), n);
    EXPECT_EQ(ofKind(all, K::kEnqueue).size(), static_cast<size_t>(n));
  }
}

TEST(Observer, FusedStepInPlace) { fusedStep(nullptr, false); }

TEST(Observer, FusedStepThroughFusionBuffer) { fusedStep("ring", true); }

// (d) The second identical step goes through the cache: every rank reports its hit, rank 0
// negotiates nothing, the collective runs as before.
TEST(Observer, CacheHit) {
  Cluster cluster(2);
  auto rec = attach(cluster);
  auto step = [&](int, engine::Runtime& rt) {
    std::vector<float> in(16, 1.0f), out(16);
    rt.allreduce(view(in, DataType::kFloat32), view(out, DataType::kFloat32), named("c"))->wait();
    ASSERT_EQ(out[0], 2.0f);
  };
  cluster.run(step);
  for (auto& r : rec) {
    EXPECT_TRUE(ofKind(r->about("c"), K::kCacheHit).empty());
    r->clear();
  }
  cluster.run(step);
  for (int rank = 0; rank < 2; ++rank) {
    auto ev = rec[rank]->about("c");
    SCOPED_TRACE("rank " + std::to_string(rank) + ": " + describe(ev));
    std::vector<K> expected = {K::kEnqueue, K::kCacheHit, K::kCollectiveStart, K::kCollectiveEnd, K::kTensorDone};
    ASSERT_EQ(kinds(ev), expected);
    EXPECT_NE(ev[1].cacheId, engine::kNoCacheId);
    EXPECT_EQ(ev[1].bytes, 64);
  }
  EXPECT_EQ(rec[0]->about("c")[1].cacheId, rec[1]->about("c")[1].cacheId);
}

// (e) Process sets added and removed: every rank reports both, with the set's ranks.
TEST(Observer, ProcessSetChanges) {
  Cluster cluster(3, {{"HOROVOD_DYNAMIC_PROCESS_SETS", "1"}});
  auto rec = attach(cluster);
  std::vector<int> ids(3);
  cluster.run([&](int rank, engine::Runtime& rt) {
    ids[rank] = rt.addProcessSet({2, 0});
    ASSERT_TRUE(rt.removeProcessSet(ids[rank]));
  });
  for (int rank = 0; rank < 3; ++rank) {
    auto all = rec[rank]->events();
    std::vector<Recorded> changes;
    for (const auto& e : all) {
      if (e.kind == K::kProcessSetAdded || e.kind == K::kProcessSetRemoved) changes.push_back(e);
    }
    SCOPED_TRACE("rank " + std::to_string(rank) + ": " + describe(all));
    ASSERT_EQ(kinds(changes), (std::vector<K>{K::kProcessSetAdded, K::kProcessSetRemoved}));
    for (const auto& e : changes) {
      EXPECT_EQ(e.processSet, ids[rank]);
      EXPECT_EQ(e.ranks, (std::vector<int>{0, 2}));
    }
  }
}

// (f) Stall ticks while a tensor is pending on only some ranks name the ranks that submitted it
// and the missing one: first while it is negotiated, then again once it is cached (hits).
TEST(Observer, StallTicksNameMissingRanks) {
  Cluster cluster(3);
  auto ticks0 = std::make_shared<Recorder>(std::chrono::milliseconds(10));
  auto ticks1 = std::make_shared<Recorder>(std::chrono::milliseconds(10));
  cluster[0].addObserver(ticks0);
  cluster[1].addObserver(ticks1);
  auto stalledIn = [](const Recorded& e, bool cached) {
    if (e.kind != K::kStallTick) return false;
    for (const auto& p : e.pending) {
      const bool late2 = p.submitted == std::vector<int>{0, 1} && p.missing == std::vector<int>{2};
      if (p.name == "s" && p.cached == cached && late2) return true;
    }
    return false;
  };
  for (bool cached : {false, true}) {
    SCOPED_TRACE(cached ? "cached round" : "negotiated round");
    ticks0->clear();
    ticks1->clear();
    cluster.run([&](int rank, engine::Runtime& rt) {
      std::vector<float> in(4, 1.0f), out(4);
      if (rank == 2) {
        // Late: only after rank 0's ticks reported the tensor waiting for this rank.
        ASSERT_TRUE(ticks0->waitFor([&](const Recorded& e) { return stalledIn(e, cached); }))
            << describe(ticks0->events());
      }
      rt.allreduce(view(in, DataType::kFloat32), view(out, DataType::kFloat32), named("s"))->wait();
      ASSERT_EQ(out[0], 3.0f);
    });
    // Rank 1 sees its own side only: its operation waiting for the coordinator.
    EXPECT_TRUE(ticks1->waitFor([&](const Recorded& e) {
      if (e.kind != K::kStallTick) return false;
      for (const auto& p : e.pending) {
        if (p.name == "s" && p.submitted == std::vector<int>{1} && p.missing.empty() && p.cached == cached) return true;
      }
      return false;
    })) << describe(ticks1->events());
  }
}

TEST(Observer, NoTicksUnlessAsked) {
  Cluster cluster(2);
  auto rec = attach(cluster);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  for (auto& r : rec) EXPECT_TRUE(ofKind(r->events(), K::kStallTick).empty());
}

// Subscribing before init works; after removal nothing more arrives; an observer that throws
// does not disturb the engine.
TEST(Observer, SubscriptionLifecycle) {
  const int n = 2;
  auto store = std::make_shared<MemoryStore>();
  std::vector<std::unique_ptr<engine::Runtime>> rts(n);
  std::vector<std::shared_ptr<Recorder>> rec(n);
  std::barrier removed(n);
  struct Throwing : EngineObserver {
    void onEvent(const EngineEvent&) override { throw std::runtime_error("observer failure"); }
  };
  runRankThreads(n, [&](int r) {
    auto config = engine::Config::fromEnvironment(mapEnvironment(rankEnv(r, n, {})));
    rts[r] = std::make_unique<engine::Runtime>(config, store);
    rec[r] = std::make_shared<Recorder>();
    rts[r]->addObserver(rec[r]);
    rts[r]->addObserver(std::make_shared<Throwing>());
    rts[r]->init();
    std::vector<float> in(4, 1.0f), out(4);
    rts[r]->allreduce(view(in, DataType::kFloat32), view(out, DataType::kFloat32), named("a"))->wait();
    EXPECT_EQ(out[0], 2.0f);
    EXPECT_EQ(kinds(ofKind(rec[r]->about("a"), K::kTensorDone)).size(), 1u);
    EXPECT_TRUE(rts[r]->removeObserver(rec[r]));
    EXPECT_FALSE(rts[r]->removeObserver(rec[r]));
    // Every rank has unsubscribed before any rank's next request can reach rank 0's engine.
    removed.arrive_and_wait();
    const size_t before = rec[r]->events().size();
    rts[r]->allreduce(view(in, DataType::kFloat32), view(out, DataType::kFloat32), named("b"))->wait();
    EXPECT_EQ(rec[r]->events().size(), before);
    rts[r]->shutdown();
  });
}

}  // namespace
}  // namespace hvd::test
