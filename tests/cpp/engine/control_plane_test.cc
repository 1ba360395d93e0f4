// The cached steady state of the control plane: ready cache hits travel as one bit vector in the
// response list and every rank derives the same fused responses from its cache replica
// (Coordinator::build -> ResponseList::hits -> cachedResponses). Pure functions first, then end
// to end over several process sets, with evictions and mismatches.
#include <gtest/gtest.h>

#include <algorithm>

#include "cluster.h"
#include "engine/coordinator.h"
#include "engine/fusion.h"
#include "engine/message.h"
#include "engine/response_cache.h"

namespace hvd::test {
namespace {

using engine::CacheEntry;
using engine::CacheReplica;
using engine::Coordinator;
using engine::Kind;
using engine::Request;
using engine::RequestList;
using engine::Response;
using engine::ResponseList;

Request request(const std::string& name, int processSet, DataType dtype, int64_t elements) {
  Request r;
  r.params.kind = Kind::kAllreduce;
  r.params.processSet = processSet;
  r.name = name;
  r.params.dtype = dtype;
  r.shape = {elements};
  return r;
}

// What every rank does with a list's cache bookkeeping (Runtime::processList), minus execution.
void applyInserts(const ResponseList& list, CacheReplica& replica) {
  for (const auto& r : list.items) {
    for (const auto& t : r.tensors) {
      if (t.cacheInsert) replica.insert(t.cacheId, CacheEntry::fromResponse(r, t));
    }
    if (r.params.kind == Kind::kEvict) {
      for (const auto& t : r.tensors) replica.erase(t.cacheId);
    }
  }
}

ResponseList roundTrip(const ResponseList& list, size_t* bytes = nullptr) {
  std::vector<uint8_t> wire;
  engine::encode(list, wire);
  if (bytes) *bytes = wire.size();
  return engine::decodeResponseList(wire);
}

// A coordinator for two ranks with a response cache of `capacity` entries, fusing up to 1 MiB.
Coordinator::Options twoRanks(int64_t capacity) {
  Coordinator::Options options;
  options.size = 2;
  options.cacheCapacity = capacity;
  options.fusion.threshold = 1 << 20;
  return options;
}

TEST(ControlPlane, HitsTravelAsOneBitPerTensor) {
  ResponseList list;
  list.seq = 123456;
  for (uint32_t i = 0; i < 160; ++i) list.hits.push_back(40 + i);
  size_t bytes = 0;
  ResponseList back = roundTrip(list, &bytes);
  EXPECT_EQ(back.hits, list.hits);
  EXPECT_EQ(back.seq, list.seq);
  EXPECT_TRUE(back.items.empty());
  EXPECT_LE(bytes, 160u / 8 + 12) << "160 ids must cost ~1 bit each plus a small header";

  // Sparse ids fall back to deltas and still decode ascending.
  list.hits = {3, 1000, 70000};
  EXPECT_EQ(roundTrip(list).hits, (std::vector<uint32_t>{3, 1000, 70000}));

  // Requests: unsorted hits (drain order) decode as the same set, ascending.
  RequestList rl;
  rl.hits = {9, 7, 8, 10};
  std::vector<uint8_t> wire;
  engine::encode(rl, wire);
  EXPECT_EQ(engine::decodeRequestList(wire).hits, (std::vector<uint32_t>{7, 8, 9, 10}));
}

// Two ranks, two process sets (0 = {0,1}, 1 = {1}); a name becomes ready from hits only when every
// member reported it, and every rank's derivation gives the same fused responses.
TEST(ControlPlane, CoordinatorAnswersHitsWithIdsAndRanksDeriveSameFusion) {
  const Coordinator::Options options = twoRanks(100);
  Coordinator coordinator(options);
  coordinator.addProcessSet(1, {1});
  CacheReplica replicas[2];

  // Step 1: full requests; set 0 has float32 a, b and a float64 c in between; set 1 has d.
  auto step1 = [&](int rank) {
    RequestList l;
    l.requests.push_back(request("a", 0, DataType::kFloat32, 4));
    l.requests.push_back(request("c", 0, DataType::kFloat64, 4));
    l.requests.push_back(request("b", 0, DataType::kFloat32, 8));
    if (rank == 1) l.requests.push_back(request("d", 1, DataType::kFloat32, 2));
    return l;
  };
  RequestList r0 = step1(0), r1 = step1(1);
  coordinator.ingest(0, r0);
  coordinator.ingest(1, r1);
  ResponseList first = roundTrip(coordinator.build());
  EXPECT_TRUE(first.hits.empty());
  for (auto& replica : replicas) applyInserts(first, replica);
  ASSERT_EQ(replicas[0].size(), 4u);

  // Step 2: hits. Rank 0's alone complete nothing of set 0.
  auto hitsOf = [&](int rank) {
    RequestList l;
    l.lastSeq = first.seq;
    for (const char* name : {"a", "c", "b", "d"}) {
      int ps = name[0] == 'd' ? 1 : 0;
      if (ps == 1 && rank != 1) continue;
      Request q = request(name, ps, name[0] == 'c' ? DataType::kFloat64 : DataType::kFloat32,
                          name[0] == 'b'   ? 8
                          : name[0] == 'd' ? 2
                                           : 4);
      uint32_t id = replicas[rank].lookup(q, ps == 1 ? 0 : rank);
      EXPECT_NE(id, engine::kNoCacheId) << name;
      l.hits.push_back(id);
    }
    return l;
  };
  RequestList h0 = hitsOf(0);
  coordinator.ingest(0, h0);
  EXPECT_FALSE(coordinator.hasWork());
  RequestList h1 = hitsOf(1);
  coordinator.ingest(1, h1);
  ASSERT_TRUE(coordinator.hasWork());
  size_t bytes = 0;
  ResponseList second = roundTrip(coordinator.build(), &bytes);
  EXPECT_EQ(second.hits.size(), 4u);
  EXPECT_TRUE(second.items.empty()) << "a cached step sends no full responses";
  EXPECT_LE(bytes, 12u);

  std::vector<Response> derived[2];
  for (int r = 0; r < 2; ++r) {
    engine::cachedResponses(second.hits, replicas[r], options.fusion, derived[r]);
  }
  // a+b fused (c skipped by the look-ahead), then c, then d (another set).
  ASSERT_EQ(derived[0].size(), 3u);
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(derived[r].size(), derived[0].size());
    for (size_t i = 0; i < derived[r].size(); ++i) {
      const Response& x = derived[r][i];
      EXPECT_TRUE(x.cachedForm);
      std::vector<std::string> names;
      for (const auto& t : x.tensors) names.push_back(t.data().name);
      if (i == 0) {
        EXPECT_EQ(names, (std::vector<std::string>{"a", "b"}));
      } else if (i == 1) {
        EXPECT_EQ(names, (std::vector<std::string>{"c"}));
      } else {
        EXPECT_EQ(names, (std::vector<std::string>{"d"}));
        EXPECT_EQ(x.params.processSet, 1);
      }
      EXPECT_EQ(x.params.dtype, derived[0][i].params.dtype);
      EXPECT_EQ(x.tensors.size(), derived[0][i].tensors.size());
    }
  }

  // Without fusion every hit is its own response; an id missing from a replica is an error.
  engine::FusionOptions none;
  engine::cachedResponses(second.hits, replicas[0], none, derived[0]);
  EXPECT_EQ(derived[0].size(), 4u);
  replicas[1].erase(second.hits[0]);
  EXPECT_THROW(engine::cachedResponses(second.hits, replicas[1], options.fusion, derived[1]), hvd::Error);
}

// A hit that stays pending while many steps complete (rank 1 never sends "x" as a hit): the
// coordinator's hit log is compacted along the way, and rank 0's pending hit still turns into a
// request when rank 1 finally sends a full request for the name, so "x" negotiates.
TEST(ControlPlane, LongPendingHitSurvivesManySteps) {
  Coordinator coordinator(twoRanks(1000));
  CacheReplica replica;
  std::vector<std::string> names;
  for (int i = 0; i < 100; ++i) names.push_back("n" + std::to_string(i));
  names.push_back("x");
  for (int rank = 0; rank < 2; ++rank) {
    RequestList l;
    for (const auto& name : names) l.requests.push_back(request(name, 0, DataType::kFloat32, 4));
    coordinator.ingest(rank, l);
  }
  ResponseList first = roundTrip(coordinator.build());
  applyInserts(first, replica);
  const uint32_t x = replica.lookup(request("x", 0, DataType::kFloat32, 4), 0);
  ASSERT_NE(x, engine::kNoCacheId);

  RequestList pending;
  pending.hits.push_back(x);
  coordinator.ingest(0, pending);
  for (int step = 0; step < 100; ++step) {  // 20000 hits: several compactions of the log
    for (int rank = 0; rank < 2; ++rank) {
      RequestList l;
      for (int i = 0; i < 100; ++i) l.hits.push_back(replica.lookup(request(names[i], 0, DataType::kFloat32, 4), rank));
      coordinator.ingest(rank, l);
    }
    ResponseList list = roundTrip(coordinator.build());
    ASSERT_EQ(list.hits.size(), 100u) << "step " << step;
    ASSERT_TRUE(std::find(list.hits.begin(), list.hits.end(), x) == list.hits.end());
  }
  RequestList full;
  full.requests.push_back(request("x", 0, DataType::kFloat32, 4));
  coordinator.ingest(1, full);
  ResponseList last = roundTrip(coordinator.build());
  ASSERT_EQ(last.items.size(), 1u) << "rank 0's pending hit on x was lost";
  ASSERT_EQ(last.items[0].params.kind, Kind::kAllreduce);
  ASSERT_EQ(last.items[0].tensors.size(), 1u);
  EXPECT_EQ(last.items[0].tensors[0].name, "x");
}

// End to end: steady-state steps over the global set and two subsets with hits in all of them,
// an LRU-evicting cache (capacity below the names per set, so hits keep crossing evictions), and
// fusion; results must equal the exact sums every step, and a mismatch on a cached name must
// still surface with Horovod's message.
TEST(ControlPlane, SeveralProcessSetsWithEvictionsStayCorrect) {
  for (const char* capacity : {"1024", "3"}) {
    SCOPED_TRACE(std::string("cache capacity ") + capacity);
    Cluster cluster(3, {{"HOROVOD_CACHE_CAPACITY", capacity}}, InitOptions{{{0, 2}, {1, 2}}, false});
    cluster.run([&](int rank, engine::Runtime& rt) {
      std::vector<int> sets = {0};
      if (rank != 1) sets.push_back(1);
      if (rank != 0) sets.push_back(2);
      for (int step = 0; step < 8; ++step) {
        std::vector<std::vector<float>> in, out;
        std::vector<std::pair<int, int>> what;  // (set, tensor)
        std::vector<WorkPtr> works;
        in.reserve(32);
        out.reserve(32);
        for (int set : sets) {
          for (int t = 0; t < 5; ++t) {
            in.emplace_back(static_cast<size_t>(3 + t), static_cast<float>(rank + 1 + step + t));
            out.emplace_back(in.back().size());
            works.push_back(
                rt.allreduce(view(in.back(), DataType::kFloat32), view(out.back(), DataType::kFloat32),
                             named("g" + std::to_string(set) + "." + std::to_string(t), ReduceOp::kSum, set)));
            what.emplace_back(set, t);
          }
        }
        for (auto& w : works) w->wait();
        for (size_t i = 0; i < what.size(); ++i) {
          auto [set, t] = what[i];
          std::vector<int> members = set == 0   ? std::vector<int>{0, 1, 2}
                                     : set == 1 ? std::vector<int>{0, 2}
                                                : std::vector<int>{1, 2};
          float expected = 0;
          for (int m : members) expected += static_cast<float>(m + 1 + step + t);
          for (float v : out[i]) ASSERT_EQ(v, expected) << "set " << set << " tensor " << t << " step " << step;
        }
      }
      if (std::string(capacity) == "1024") {
        EXPECT_GT(rt.stats().cachedTensors, 0u);
        EXPECT_GT(rt.stats().hitsSent, 0u);
      }
      // A cached name now differs between the members of set 1: the mismatch, on both members.
      if (rank != 1) {
        std::vector<float> a(rank == 0 ? 3 : 4, 1.0f), b(a.size());
        auto w =
            rt.allreduce(view(a, DataType::kFloat32), view(b, DataType::kFloat32), named("g1.0", ReduceOp::kSum, 1));
        expectThrowWith<MismatchError>([&] { w->wait(); }, "Mismatched ALLREDUCE tensor shapes");
      }
    });
  }
}

}  // namespace
}  // namespace hvd::test

namespace hvd::test {
namespace {

// Burst gathering off (every drain sent at once) and on: same results, and the knob is validated.
TEST(ControlPlane, BurstWindowIsAnOptimizationOnly) {
  for (const char* quiet : {"0", "50"}) {
    SCOPED_TRACE(std::string("HOROVOD_BURST_QUIET_US=") + quiet);
    Cluster cluster(2, {{"HOROVOD_BURST_QUIET_US", quiet}});
    cluster.run([&](int rank, engine::Runtime& rt) {
      for (int step = 0; step < 5; ++step) {
        std::vector<std::vector<float>> in(20), out(20);
        std::vector<WorkPtr> works;
        for (int t = 0; t < 20; ++t) {
          in[t].assign(static_cast<size_t>(1 + t), static_cast<float>(rank + step + t));
          out[t].resize(in[t].size());
          works.push_back(rt.allreduce(view(in[t], DataType::kFloat32), view(out[t], DataType::kFloat32),
                                       named("b." + std::to_string(t))));
        }
        for (int t = 0; t < 20; ++t) {
          works[t]->wait();
          for (float v : out[t]) ASSERT_EQ(v, static_cast<float>(1 + 2 * (step + t)));
        }
      }
      EXPECT_GT(rt.stats().cachedTensors, 0u);
    });
  }
  EXPECT_THROW(engine::Config::fromEnvironment(mapEnvironment({{"HOROVOD_BURST_QUIET_US", "-1"}})), InvalidArgument);
}

}  // namespace
}  // namespace hvd::test
