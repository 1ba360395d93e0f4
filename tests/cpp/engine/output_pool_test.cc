// OutputPool (engine/output_pool.h): reuse of released blocks, the byte budget, outputs that
// outlive the Work (and the engine) that made them.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include "cluster.h"
#include "engine/output_pool.h"
#include "transport/peer_memory.h"
#include "typed.h"

namespace hvd::test {
namespace {

using engine::OutputPool;

constexpr size_t kMiB = size_t(1) << 20;

TEST(OutputPool, ReusesAReleasedBlock) {
  auto pool = std::make_shared<OutputPool>(16 * kMiB);
  void* first;
  {
    auto a = pool->acquire(3 * kMiB + 5);
    first = a.get();
    std::memset(a.get(), 1, 3 * kMiB + 5);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(first) % OutputPool::kHugePage, 0u) << "huge blocks are 2 MiB aligned";
    EXPECT_EQ(pool->cachedBytes(), 0u);
  }
  EXPECT_EQ(pool->cachedBytes(), 4 * kMiB) << "released block kept, rounded to huge pages";
  auto b = pool->acquire(3 * kMiB);
  EXPECT_EQ(b.get(), first) << "same size class: the cached block comes back";
  EXPECT_EQ(pool->cachedBytes(), 0u);
  EXPECT_EQ(pool->blocksMapped(), 1u);
}

TEST(OutputPool, SteadyLoopMapsTwoBlocks) {
  // The pattern of a training loop: the next output is allocated while the previous is held.
  auto pool = std::make_shared<OutputPool>(16 * kMiB);
  std::shared_ptr<void> held;
  for (int i = 0; i < 20; ++i) {
    auto next = pool->acquire(8 * kMiB);
    std::memset(next.get(), i, 8 * kMiB);
    held = std::move(next);
  }
  EXPECT_EQ(pool->blocksMapped(), 2u);
  EXPECT_EQ(pool->cachedBytes(), 8 * kMiB);
}

TEST(OutputPool, BudgetBoundsWhatIsKept) {
  auto pool = std::make_shared<OutputPool>(8 * kMiB);
  {
    auto big = pool->acquire(10 * kMiB);
  }
  EXPECT_EQ(pool->cachedBytes(), 0u) << "a block over the budget is unmapped at once";
  {
    auto a = pool->acquire(4 * kMiB);
    auto b = pool->acquire(4 * kMiB);
    auto c = pool->acquire(2 * kMiB);
    void* pa = a.get();
    a.reset();
    b.reset();
    EXPECT_EQ(pool->cachedBytes(), 8 * kMiB);
    c.reset();  // over budget: the oldest (a) goes
    EXPECT_EQ(pool->cachedBytes(), 6 * kMiB);
    auto d = pool->acquire(4 * kMiB);
    EXPECT_NE(d.get(), pa);
  }
  auto none = std::make_shared<OutputPool>(0);
  {
    auto x = none->acquire(1 * kMiB);
  }
  EXPECT_EQ(none->cachedBytes(), 0u);
  pool->trim();
  EXPECT_EQ(pool->cachedBytes(), 0u);
}

TEST(OutputPool, DoesNotHandOutAFarLargerBlock) {
  auto pool = std::make_shared<OutputPool>(64 * kMiB);
  {
    auto big = pool->acquire(32 * kMiB);
  }
  auto small = pool->acquire(1 * kMiB);
  EXPECT_EQ(pool->cachedBytes(), 32 * kMiB) << "a 1 MiB request does not take the 32 MiB block";
  EXPECT_EQ(pool->blocksMapped(), 2u);
}

TEST(OutputPool, SharedBlocksAreSharedBuffersCachedApart) {
  auto pool = std::make_shared<OutputPool>(16 * kMiB);
  void* sharedBase;
  {
    auto a = pool->acquire(3 * kMiB, /*shared=*/true);
    sharedBase = a.get();
    EXPECT_TRUE(findSharedBuffer(a.get(), 3 * kMiB)) << "peers can map it";
    std::memset(a.get(), 1, 3 * kMiB);
  }
  EXPECT_EQ(pool->cachedBytes(), 4 * kMiB);
  {
    auto priv = pool->acquire(3 * kMiB);
    EXPECT_NE(priv.get(), sharedBase) << "a private request does not get the cached shared block";
    EXPECT_FALSE(findSharedBuffer(priv.get(), 3 * kMiB));
  }
  auto again = pool->acquire(3 * kMiB, true);
  EXPECT_EQ(again.get(), sharedBase) << "the cached shared block comes back";
  auto small = pool->acquire(4096, true);
  EXPECT_FALSE(findSharedBuffer(small.get(), 4096)) << "below kMinPooledBytes: the C heap";
  auto big = pool->acquire(20 * kMiB, true);
  EXPECT_FALSE(findSharedBuffer(big.get(), 20 * kMiB)) << "over the budget: a private block";
  again.reset();
  pool->trim();
  EXPECT_FALSE(findSharedBuffer(sharedBase, 4096)) << "trimmed: the shared buffer is gone";
}

// Blocks keep the pool alive; once closed (the runtime shut down) it caches nothing.
TEST(OutputPool, ClosedPoolCachesNothingAndOutlivesItsOwner) {
  auto pool = std::make_shared<OutputPool>(16 * kMiB);
  std::weak_ptr<OutputPool> watch = pool;
  auto a = pool->acquire(3 * kMiB);
  auto b = pool->acquire(3 * kMiB);
  {
    auto c = pool->acquire(3 * kMiB);
  }
  EXPECT_EQ(pool->cachedBytes(), 4 * kMiB);
  pool->close();
  EXPECT_EQ(pool->cachedBytes(), 0u) << "close() trims";
  a.reset();
  EXPECT_EQ(pool->cachedBytes(), 0u) << "released after close(): unmapped";
  pool.reset();
  EXPECT_FALSE(watch.expired()) << "a block still out holds the pool";
  std::memset(b.get(), 1, 3 * kMiB);
  b.reset();
  EXPECT_TRUE(watch.expired());
}

TEST(OutputPool, SmallRequestsAndReleaseFromOtherThreads) {
  auto pool = std::make_shared<OutputPool>(16 * kMiB);
  auto tiny = pool->acquire(0);
  ASSERT_NE(tiny.get(), nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(tiny.get()) % 64, 0u);
  std::shared_ptr<void> blocks[4];
  for (auto& b : blocks) b = pool->acquire(kMiB);
  std::thread t([&] {
    for (auto& b : blocks) b.reset();
  });
  t.join();
  EXPECT_EQ(pool->cachedBytes(), 4 * kMiB);
}

// Outputs of engine allgathers stay valid after their Work and the engine are gone, and
// repeated allgathers of one size reuse pooled storage.
TEST(OutputPoolEngine, AllgatherOutputsOutliveWorkAndEngine) {
  const int n = 2;
  std::vector<OwnedTensor> kept(n);
  {
    Cluster cluster(n);
    cluster.run([&](int rank, engine::Runtime& rt) {
      const int64_t rows = 300000;  // 1.2 MB per rank: pooled
      Buffer in(DataType::kInt32, {rows});
      for (int iter = 0; iter < 6; ++iter) {
        for (int64_t i = 0; i < rows; ++i) in.set(static_cast<size_t>(i), rank * 1000 + iter + i % 7);
        OwnedTensor out;
        {
          auto work = rt.allgather(in.view(), named("pool->ag"));
          work->wait();
          out = work->outputs().at(0);
        }  // the Work is gone; `out` holds the storage
        for (int r = 0; r < n; ++r) {
          for (int64_t i : {int64_t(0), rows / 2, rows - 1}) {
            ASSERT_EQ(Buffer::load(out.view.data, DataType::kInt32, static_cast<size_t>(r * rows + i)),
                      r * 1000 + iter + i % 7);
          }
        }
        kept[rank] = out;
      }
    });
  }
  // The engines are shut down; the last outputs are still readable, and release afterwards.
  for (int r = 0; r < n; ++r) {
    ASSERT_EQ(Buffer::load(kept[r].view.data, DataType::kInt32, 300000 + 5), 1000 + 5 + 5 % 7);
  }
  kept.clear();
}

}  // namespace
}  // namespace hvd::test

namespace hvd::test {
namespace {

// Memory target: a job whose tensors never exceed 1 MiB never maps a 128 MiB buffer (the fusion
// buffer grows to what fusion actually needs, not to HOROVOD_FUSION_THRESHOLD).
TEST(EngineMemory, SmallTensorsNeverMapTheFusionThreshold) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "the sanitizer maps terabytes of shadow memory itself";
#endif
  const int n = 2;
  Cluster cluster(n);
  cluster.run([&](int rank, engine::Runtime& rt) {
    for (int step = 0; step < 3; ++step) {
      std::vector<Buffer> bufs;
      std::vector<WorkPtr> works;
      for (int i = 0; i < 12; ++i) bufs.emplace_back(DataType::kFloat32, int64_t(1) << (8 + i % 11));  // 1 KiB..1 MiB
      for (int i = 0; i < 12; ++i) {
        for (size_t k = 0; k < bufs[i].count(); ++k) bufs[i].set(k, rank + 1);
        works.push_back(rt.allreduce(bufs[i].view(), bufs[i].view(), named("mem.t" + std::to_string(i))));
      }
      for (auto& w : works) w->wait();
      for (auto& b : bufs) ASSERT_EQ(b.get(b.count() - 1), 3.0);
      Buffer g(DataType::kUInt8, int64_t(1) << 20);
      rt.allgather(g.view(), named("mem.ag"))->wait();
    }
    EXPECT_LE(rt.stats().fusionBufferBytes, size_t(16) << 20) << "fusion buffer sized by use";
  });
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    unsigned long begin = 0, end = 0;
    char perms[8] = {};
    ASSERT_EQ(std::sscanf(line.c_str(), "%lx-%lx %7s", &begin, &end, perms), 3);
    if (std::string(perms).substr(0, 3) == "---") continue;  // a reservation, not memory
    EXPECT_LT(end - begin, 128ul << 20) << "a mapping of 128 MiB or more: " << line;
  }
}

}  // namespace
}  // namespace hvd::test
