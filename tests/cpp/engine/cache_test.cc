// Response cache: steady state goes through cache ids, results equal the uncached ones, a
// changed parameter renegotiates (and can still raise the mismatch error), LRU eviction keeps
// working.
#include <gtest/gtest.h>

#include "cluster.h"
#include "engine/response_cache.h"
#include "typed.h"

namespace hvd::test {
namespace {

// Runs `steps` training-like steps of `tensors` allreduces + an allgather; returns the results
// of the last step on this rank.
std::vector<float> trainSteps(engine::Runtime& rt, int rank, int steps, int tensors) {
  std::vector<std::vector<float>> in(tensors), out(tensors);
  std::vector<float> last;
  for (int s = 0; s < steps; ++s) {
    std::vector<WorkPtr> works;
    for (int t = 0; t < tensors; ++t) {
      in[t].assign(static_cast<size_t>(8 + t), static_cast<float>(rank + s + t * 0.5));
      out[t].resize(in[t].size());
      works.push_back(rt.allreduce(view(in[t], DataType::kFloat32), view(out[t], DataType::kFloat32),
                                   named("grad." + std::to_string(t), ReduceOp::kAverage)));
    }
    std::vector<int32_t> g(static_cast<size_t>(rank + 1), s);
    auto ag = rt.allgather(view(g, DataType::kInt32), named("ag"));
    for (auto& w : works) w->wait();
    ag->wait();
    last.clear();
    for (auto& o : out) last.insert(last.end(), o.begin(), o.end());
    const auto* p = static_cast<const int32_t*>(ag->outputs()[0].view.data);
    for (int64_t i = 0; i < ag->outputs()[0].view.numElements(); ++i) last.push_back(static_cast<float>(p[i]));
  }
  return last;
}

TEST(Cache, SteadyStateUsesIdsAndMatchesUncached) {
  std::vector<std::vector<float>> cached(3), uncached(3);
  {
    Cluster cluster(3);
    cluster.run([&](int rank, engine::Runtime& rt) {
      cached[rank] = trainSteps(rt, rank, 6, 10);
      auto stats = rt.stats();
      EXPECT_GT(stats.hitsSent, 40u) << "rank " << rank;
      EXPECT_GT(stats.cachedTensors, 40u) << "rank " << rank;
    });
  }
  {
    Cluster cluster(3, {{"HOROVOD_CACHE_CAPACITY", "0"}});
    cluster.run([&](int rank, engine::Runtime& rt) {
      uncached[rank] = trainSteps(rt, rank, 6, 10);
      EXPECT_EQ(rt.stats().hitsSent, 0u);
    });
  }
  for (int r = 0; r < 3; ++r) EXPECT_EQ(cached[r], uncached[r]);
}

TEST(Cache, ChangedShapeRenegotiatesAndMismatchStillRaised) {
  Cluster cluster(2);
  cluster.run([&](int rank, engine::Runtime& rt) {
    for (int i = 0; i < 3; ++i) {
      std::vector<float> a(4, 1.0f), b(4);
      rt.allreduce(view(a, DataType::kFloat32), view(b, DataType::kFloat32), named("x"))->wait();
      ASSERT_EQ(b[0], 2.0f);
    }
    EXPECT_GT(rt.stats().hitsSent, 0u);
    // Every rank changes the shape: renegotiated, works.
    std::vector<float> c(8, 2.0f), d(8);
    rt.allreduce(view(c, DataType::kFloat32), view(d, DataType::kFloat32), named("x"))->wait();
    for (float f : d) ASSERT_EQ(f, 4.0f);
    // Now the ranks disagree on the cached name: the mismatch error, on both ranks.
    std::vector<float> e(rank == 0 ? 8 : 4, 1.0f), f(e.size());
    auto w = rt.allreduce(view(e, DataType::kFloat32), view(f, DataType::kFloat32), named("x"));
    expectThrowWith<MismatchError>([&] { w->wait(); }, "Mismatched ALLREDUCE tensor shapes");
    // And a changed dtype on one rank.
    for (int i = 0; i < 2; ++i) {
      std::vector<float> g(8, 1.0f), h(8);
      rt.allreduce(view(g, DataType::kFloat32), view(h, DataType::kFloat32), named("y"))->wait();
    }
    Buffer gi(rank == 1 ? DataType::kFloat64 : DataType::kFloat32, 8),
        ho(rank == 1 ? DataType::kFloat64 : DataType::kFloat32, 8);
    auto w2 = rt.allreduce(gi.view(), ho.view(), named("y"));
    expectThrowWith<MismatchError>([&] { w2->wait(); }, "Mismatched data types");
    // Scale factors changed on one rank of a cached allreduce.
    Options o = named("y");
    if (rank == 0) o.postscale = 3.0;
    std::vector<float> s(8, 1.0f), t(8);
    auto w3 = rt.allreduce(view(s, DataType::kFloat32), view(t, DataType::kFloat32), o);
    expectThrowWith<MismatchError>([&] { w3->wait(); }, "Mismatched prescale and/or postscale factors");
    // The name still works afterwards.
    rt.allreduce(view(s, DataType::kFloat32), view(t, DataType::kFloat32), named("y"))->wait();
    EXPECT_EQ(t[0], 2.0f);
  });
}

TEST(Cache, AllgatherFirstDimChangeInvalidates) {
  Cluster cluster(3);
  cluster.run([&](int rank, engine::Runtime& rt) {
    for (int step = 0; step < 6; ++step) {
      int64_t rows = (step < 3) ? rank + 1 : (step % 2 ? 2 : rank + 2);
      std::vector<int16_t> in(static_cast<size_t>(rows), static_cast<int16_t>(rank));
      auto w = rt.allgather(view(in, DataType::kInt16), named("agc"));
      w->wait();
      int64_t total = 0;
      for (int r = 0; r < 3; ++r) total += (step < 3) ? r + 1 : (step % 2 ? 2 : r + 2);
      ASSERT_EQ(w->outputs()[0].view.shape[0], total) << "step " << step;
      const auto* p = static_cast<const int16_t*>(w->outputs()[0].view.data);
      int64_t k = 0;
      for (int r = 0; r < 3; ++r) {
        int64_t rr = (step < 3) ? r + 1 : (step % 2 ? 2 : r + 2);
        for (int64_t i = 0; i < rr; ++i) ASSERT_EQ(p[k++], r);
      }
    }
  });
}

TEST(Cache, TinyCapacityEvictsAndStaysCorrect) {
  Cluster cluster(3, {{"HOROVOD_CACHE_CAPACITY", "2"}});
  cluster.run([&](int rank, engine::Runtime& rt) {
    for (int step = 0; step < 8; ++step) {
      std::vector<std::vector<int32_t>> in(5), out(5);
      std::vector<WorkPtr> works;
      // Ranks enqueue in different orders so hits and full requests interleave.
      for (int k = 0; k < 5; ++k) {
        int t = (k + rank + step) % 5;
        in[t].assign(3, t + rank);
        out[t].resize(3);
        works.push_back(rt.allreduce(view(in[t], DataType::kInt32), view(out[t], DataType::kInt32),
                                     named("e" + std::to_string(t))));
      }
      for (auto& w : works) w->wait();
      for (int t = 0; t < 5; ++t) ASSERT_EQ(out[t][0], 3 * t + 3);
    }
  });
}

// The coordinator evicts exactly the least recently used entry of the set, also after hits and
// evictions by renegotiation have reordered the entries (hits only stamp an entry; eviction
// catches up).
TEST(CoordinatorCacheLru, EvictsTheLeastRecentlyUsed) {
  engine::CoordinatorCache cache(4);
  std::vector<uint32_t> evicted;
  auto insert = [&](const std::string& name, int32_t processSet = 0) {
    engine::CacheEntry e;
    e.params.processSet = processSet;
    e.tensor.name = name;
    return cache.insert(std::move(e), 1, evicted);
  };
  uint32_t a = insert("a"), b = insert("b"), c = insert("c"), x = insert("x");
  insert("other set", 1);  // another process set's capacity is its own
  cache.touch(a);
  cache.touch(b);
  cache.evict(x, 1);  // renegotiated: room for one more without evicting
  uint32_t d = insert("d");
  EXPECT_TRUE(evicted.empty());
  cache.touch(c);
  insert("e");  // uses: a, b, d, c -> a goes
  EXPECT_EQ(evicted, std::vector<uint32_t>{a});
  insert("f");  // b, d, c, e -> b
  EXPECT_EQ(evicted, (std::vector<uint32_t>{a, b}));
  cache.touch(d);
  insert("g");  // c, e, f, d -> c
  EXPECT_EQ(evicted, (std::vector<uint32_t>{a, b, c}));
  uint32_t e = cache.liveId(0, "e"), f = cache.liveId(0, "f");
  cache.touch(e);
  insert("h");  // f, d, g, e -> f (d and e were queued earlier but used since)
  EXPECT_EQ(evicted, (std::vector<uint32_t>{a, b, c, f}));
  EXPECT_EQ(cache.liveId(0, "d"), d);
  EXPECT_EQ(cache.liveId(0, "a"), engine::kNoCacheId);
  EXPECT_NE(cache.liveId(1, "other set"), engine::kNoCacheId);
}

// Unnamed operations (a generated name, new every call) are negotiated in full and never cached:
// with room for two entries, the two names that recur every step keep theirs and hit from the
// second step on, however many unnamed operations run beside them.
TEST(Cache, UnnamedOperationsStayOutOfTheCache) {
  Cluster cluster(3, {{"HOROVOD_CACHE_CAPACITY", "2"}});
  const int kSteps = 6;
  cluster.run([&](int rank, engine::Runtime& rt) {
    for (int step = 0; step < kSteps; ++step) {
      std::vector<std::vector<int32_t>> in(5, std::vector<int32_t>(3, rank + step)), out(5);
      std::vector<WorkPtr> works;
      for (int k = 0; k < 5; ++k) {
        out[k].resize(3);
        Options options;  // k = 2, 3: unnamed
        if (k < 2) options = named("recurring." + std::to_string(k));
        if (k == 4) {  // a name generated by a binding, flagged as bindings do
          options = named("python.noname." + std::to_string(step));
          options.oneOffName = true;
        }
        works.push_back(rt.allreduce(view(in[k], DataType::kInt32), view(out[k], DataType::kInt32), options));
      }
      for (auto& w : works) w->wait();
      for (int k = 0; k < 5; ++k) ASSERT_EQ(out[k][0], 3 * step + 3) << "tensor " << k;
      // Allgather takes the cache too; an unnamed one stays out of it as well.
      std::vector<int32_t> g(2, rank);
      rt.allgather(view(g, DataType::kInt32), Options{})->wait();
    }
    auto stats = rt.stats();
    EXPECT_EQ(stats.cachedTensors, uint64_t(2 * (kSteps - 1))) << "rank " << rank;
    EXPECT_EQ(stats.hitsSent, uint64_t(2 * (kSteps - 1))) << "rank " << rank;
  });
}

// Coordination cost of a cached step: a worker sends about one bit per tensor.
TEST(Cache, ControlBytesPerCachedStep) {
  Cluster cluster(2);
  const int kTensors = 160;
  cluster.run([&](int rank, engine::Runtime& rt) {
    std::vector<std::vector<float>> bufs(kTensors, std::vector<float>(4, 1.0f));
    auto step = [&] {
      std::vector<TensorView> views;
      for (auto& b : bufs) views.push_back(view(b, DataType::kFloat32));
      // One grouped call enqueues all tensors atomically, like a framework's backward pass would
      // in the best case; names are stable across steps.
      rt.groupedAllreduce(views, views, named("layer"))->wait();
    };
    for (int i = 0; i < 3; ++i) step();
    rt.barrier(0)->wait();
    auto before = rt.stats();
    const int kSteps = 20;
    for (int i = 0; i < kSteps; ++i) step();
    auto after = rt.stats();
    if (rank == 1) {
      double bytesPerStep = double(after.controlBytesSent - before.controlBytesSent) / kSteps;
      EXPECT_LT(bytesPerStep, 64.0) << "worker control bytes per cached 160-tensor step";
    } else {
      double bytesPerStep = double(after.controlBytesSent - before.controlBytesSent) / kSteps;
      EXPECT_LT(bytesPerStep, 400.0) << "coordinator control bytes per cached 160-tensor step";
    }
    EXPECT_EQ(after.cachedTensors - before.cachedTensors, uint64_t(kSteps) * kTensors);
  });
}

}  // namespace
}  // namespace hvd::test
