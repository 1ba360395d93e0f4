// Join (semantics.md §8.5, python-api.md §8 items 31-32) and process sets (§13).
#include <gtest/gtest.h>

#include "cluster.h"
#include "typed.h"

namespace hvd::test {
namespace {

class JoinBySize : public ::testing::TestWithParam<int> {};

// For every choice of first-joining rank, with and without the names cached beforehand: the
// non-joined ranks' Average is x*(size-1)/size (integers truncate), join returns the same rank
// everywhere, never the first joiner.
TEST_P(JoinBySize, AverageWithJoinedRankContributingZeros) {
  const int n = GetParam();
  Cluster cluster(n);
  cluster.run([&](int rank, engine::Runtime& rt) {
    for (int firstJoiner = 0; firstJoiner < n; ++firstJoiner) {
      for (bool cachedBefore : {false, true}) {
        std::string suffix = std::to_string(firstJoiner) + (cachedBefore ? "c" : "u");
        if (cachedBefore) {
          for (int i = 0; i < 2; ++i) {
            std::vector<float> f(6, 3.0f), fo(6);
            std::vector<int32_t> k(6, 7), ko(6);
            rt.allreduce(view(f, DataType::kFloat32), view(fo, DataType::kFloat32),
                         named("jf" + suffix, ReduceOp::kAverage))
                ->wait();
            rt.allreduce(view(k, DataType::kInt32), view(ko, DataType::kInt32),
                         named("ji" + suffix, ReduceOp::kAverage))
                ->wait();
          }
        }
        int last;
        if (rank == firstJoiner) {
          auto jw = rt.join();
          jw->wait();
          last = jw->joinResult();
        } else {
          std::vector<float> f(6, 3.0f), fo(6);
          std::vector<int32_t> k(6, 7), ko(6);
          auto w1 = rt.allreduce(view(f, DataType::kFloat32), view(fo, DataType::kFloat32),
                                 named("jf" + suffix, ReduceOp::kAverage));
          auto w2 = rt.allreduce(view(k, DataType::kInt32), view(ko, DataType::kInt32),
                                 named("ji" + suffix, ReduceOp::kAverage));
          w1->wait();
          w2->wait();
          for (float v : fo) ASSERT_NEAR(v, 3.0f * (n - 1) / n, 1e-6);
          for (int32_t v : ko) ASSERT_EQ(v, static_cast<int32_t>(7.0 * (n - 1) * (1.0 / n)));
          auto jw = rt.join();
          jw->wait();
          last = jw->joinResult();
        }
        if (n > 1) {
          EXPECT_NE(last, firstJoiner);
        }
        // Same value on every rank.
        std::vector<int32_t> v = {last, -last}, m(2);
        rt.allreduce(view(v, DataType::kInt32), view(m, DataType::kInt32), named("jmax" + suffix, ReduceOp::kMax))
            ->wait();
        EXPECT_EQ(m[0], last);
        EXPECT_EQ(m[1], -last);
      }
    }
  });
}

TEST_P(JoinBySize, UnevenStepsAndLastJoinedRank) {
  const int n = GetParam();
  Cluster cluster(n);
  std::vector<int> results(n, -2);
  cluster.run([&](int rank, engine::Runtime& rt) {
    // Rank r runs r+1 steps; at step k the ranks r >= k take part, the others have joined.
    for (int k = 0; k <= rank; ++k) {
      std::vector<int64_t> one(5, 1), out(5);
      rt.allreduce(view(one, DataType::kInt64), view(out, DataType::kInt64), named("step"))->wait();
      for (auto v : out) ASSERT_EQ(v, n - k) << "rank " << rank << " step " << k;
    }
    auto w = rt.join();
    w->wait();
    results[rank] = w->joinResult();
    // State reset: a normal op and another join round work.
    std::vector<int64_t> one(2, 1), out(2);
    rt.allreduce(view(one, DataType::kInt64), view(out, DataType::kInt64), named("after"))->wait();
    EXPECT_EQ(out[0], n);
    rt.join()->wait();
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(results[r], n - 1);
}

INSTANTIATE_TEST_SUITE_P(Sizes, JoinBySize, ::testing::Values(1, 2, 3, 5));

TEST(Join, AllgatherAndBroadcastWithJoinedRankFail) {
  Cluster cluster(3);
  cluster.run([&](int rank, engine::Runtime& rt) {
    if (rank == 0) {
      auto jw = rt.join();
      jw->wait();
      EXPECT_GE(jw->joinResult(), 1);
      return;
    }
    std::vector<float> g(2);
    auto w = rt.allgather(view(g, DataType::kFloat32), named("jag"));
    expectThrowWith<MismatchError>([&] { w->wait(); }, "Allgather is not supported with Join at this time.");
    Options o = named("jbc");
    o.root = 1;
    auto w2 = rt.broadcast(view(g, DataType::kFloat32), o);
    expectThrowWith<MismatchError>([&] { w2->wait(); }, "Broadcast is not supported with Join at this time.");
    std::vector<float> rs(3), ro(1);
    auto w3 = rt.reducescatter(view(rs, DataType::kFloat32), view(ro, DataType::kFloat32), named("jrs"));
    expectThrowWith<MismatchError>([&] { w3->wait(); }, "Reducescatter is not supported with Join at this time.");
    rt.join()->wait();
  });
}

TEST(ProcessSets, StaticSetsAndSameNameConcurrently) {
  Cluster cluster(4, {}, InitOptions{{{0, 1}, {1, 2, 3}, {3, 1}}, false});
  cluster.run([&](int rank, engine::Runtime& rt) {
    EXPECT_EQ(rt.processSetIds(), (std::vector<int>{0, 1, 2, 3}));
    EXPECT_EQ(rt.processSetRanks(3), (std::vector<int>{1, 3}));
    std::vector<WorkPtr> works;
    std::vector<std::vector<int32_t>> in(4, std::vector<int32_t>(3, rank + 1)), out(4, std::vector<int32_t>(3));
    for (int ps = 0; ps < 4; ++ps) {
      auto ranks = rt.processSetRanks(ps);
      if (std::find(ranks.begin(), ranks.end(), rank) == ranks.end()) continue;
      works.push_back(rt.allreduce(view(in[ps], DataType::kInt32), view(out[ps], DataType::kInt32),
                                   named("same", ReduceOp::kSum, ps)));
    }
    for (auto& w : works) w->wait();
    for (int ps = 0; ps < 4; ++ps) {
      auto ranks = rt.processSetRanks(ps);
      if (std::find(ranks.begin(), ranks.end(), rank) == ranks.end()) continue;
      int want = 0;
      for (int r : ranks) want += r + 1;
      EXPECT_EQ(out[ps][0], want) << "set " << ps;
    }
    // Allgather in set order, broadcast with a global root inside a set.
    if (rank == 1 || rank == 3) {
      std::vector<int8_t> mine(1, static_cast<int8_t>(rank));
      auto w = rt.allgather(view(mine, DataType::kInt8), named("psag", ReduceOp::kSum, 3));
      w->wait();
      const auto* p = static_cast<const int8_t*>(w->outputs()[0].view.data);
      EXPECT_EQ(p[0], 1);
      EXPECT_EQ(p[1], 3);
      Options o = named("psbc", ReduceOp::kSum, 3);
      o.root = 3;
      std::vector<int8_t> b(2, static_cast<int8_t>(rank * 10));
      rt.broadcast(view(b, DataType::kInt8), o)->wait();
      EXPECT_EQ(b[0], 30);
      rt.barrier(3)->wait();
    }
  });
}

TEST(ProcessSets, DynamicAddRemove) {
  Cluster cluster(3, {{"HOROVOD_DYNAMIC_PROCESS_SETS", "1"}});
  cluster.run([&](int rank, engine::Runtime& rt) {
    int even = rt.addProcessSet({2, 0});
    EXPECT_EQ(even, 1);
    int odd = rt.addProcessSet({1});
    EXPECT_EQ(odd, 2);
    EXPECT_EQ(rt.processSetRanks(even), (std::vector<int>{0, 2}));
    expectThrowWith<InvalidArgument>([&] { rt.addProcessSet({0, 2}); },
                                     "Attempted to add a duplicate process set: [0, 2]");
    int mySet = rank == 1 ? odd : even;
    std::vector<float> a(4, 1.0f), b(4);
    rt.allreduce(view(a, DataType::kFloat32), view(b, DataType::kFloat32), named("ev", ReduceOp::kSum, mySet))->wait();
    EXPECT_EQ(b[0], rank == 1 ? 1.0f : 2.0f);
    EXPECT_TRUE(rt.removeProcessSet(even));
    EXPECT_FALSE(rt.removeProcessSet(0));
    EXPECT_FALSE(rt.removeProcessSet(42));
    EXPECT_EQ(rt.processSetIds(), (std::vector<int>{0, 2}));
    expectThrowWith<InvalidArgument>(
        [&] {
          rt.allreduce(view(a, DataType::kFloat32), view(b, DataType::kFloat32), named("gone", ReduceOp::kSum, even));
        },
        "Allreduce: Process set provided does not exist, or has not been registered.");
    int again = rt.addProcessSet({0, 2});
    EXPECT_EQ(again, 3);
  });
}

TEST(ProcessSets, DynamicRequiresOptIn) {
  Cluster cluster(2);
  cluster.run([&](int rank, engine::Runtime& rt) {
    expectThrowWith<InvalidArgument>([&] { rt.addProcessSet({0}); },
                                     "Set HOROVOD_DYNAMIC_PROCESS_SETS=1 to allow adding process sets after Horovod "
                                     "initialization.");
    expectThrowWith<InvalidArgument>([&] { rt.removeProcessSet(1); },
                                     "Set HOROVOD_DYNAMIC_PROCESS_SETS=1 to allow removing process sets after Horovod "
                                     "initialization.");
  });
}

TEST(ProcessSets, StaticSetsMustMatchAcrossRanks) {
  auto store = std::make_shared<MemoryStore>();
  std::vector<std::string> errors(2);
  runRankThreads(2, [&](int r) {
    auto config = engine::Config::fromEnvironment(mapEnvironment(rankEnv(r, 2, {})));
    engine::Runtime rt(config, store);
    InitOptions options;
    options.processSets = r == 0 ? std::vector<std::vector<int>>{{0, 1}, {0}} : std::vector<std::vector<int>>{{1}};
    // {0, 1} on rank 0 is the global set's ranks: also refused.
    options.processSets = r == 0 ? std::vector<std::vector<int>>{{0}} : std::vector<std::vector<int>>{{1}};
    try {
      rt.init(options);
    } catch (const InvalidArgument& e) {
      errors[r] = e.what();
    }
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(errors[r].find("Process sets given to init() differ between ranks"), std::string::npos) << errors[r];
  }
}

}  // namespace
}  // namespace hvd::test
