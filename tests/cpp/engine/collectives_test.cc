// Allgather, broadcast, alltoall, reducescatter and barrier through the engine.
#include <gtest/gtest.h>

#include <chrono>
#include <numeric>

#include "cluster.h"
#include "engine/fused_layout.h"
#include "typed.h"

namespace hvd::test {
namespace {

class BySize : public ::testing::TestWithParam<int> {};

// Variable first dims (incl. 0 rows), every dtype; output in set-rank order.
TEST_P(BySize, AllgatherVariableRows) {
  const int n = GetParam();
  Cluster cluster(n);
  cluster.run([&](int rank, engine::Runtime& rt) {
    const int64_t rowsOf[] = {17, 0, 81, 12, 15};
    for (DataType dtype : allDataTypes()) {
      int64_t rows = rowsOf[rank];
      Buffer in(dtype, {rows, 3});
      for (size_t i = 0; i < in.count(); ++i) in.set(i, (rank + 1) * (dtype == DataType::kBool ? 1 : 1 + i % 4));
      auto work = rt.allgather(in.view(), named("ag." + std::string(dataTypeName(dtype))));
      work->wait();
      const OwnedTensor& out = work->outputs().at(0);
      int64_t total = 0;
      for (int r = 0; r < n; ++r) total += rowsOf[r];
      ASSERT_EQ(out.view.shape, (std::vector<int64_t>{total, 3}));
      ASSERT_EQ(out.view.dtype, dtype);
      size_t idx = 0;
      for (int r = 0; r < n; ++r) {
        for (size_t i = 0; i < static_cast<size_t>(rowsOf[r] * 3); ++i, ++idx) {
          double want = (r + 1) * (dtype == DataType::kBool ? 1 : 1 + i % 4);
          if (dtype == DataType::kBool) want = 1;
          ASSERT_EQ(Buffer::load(out.view.data, dtype, idx), want) << dataTypeName(dtype) << " rank block " << r;
        }
      }
    }
  });
}

TEST_P(BySize, BroadcastEveryRoot) {
  const int n = GetParam();
  Cluster cluster(n);
  cluster.run([&](int rank, engine::Runtime& rt) {
    for (int root = 0; root < n; ++root) {
      for (DataType dtype : {DataType::kUInt8, DataType::kInt32, DataType::kFloat16, DataType::kFloat64}) {
        Buffer t(dtype, {4, 5});
        for (size_t i = 0; i < t.count(); ++i) t.set(i, rank * 10 + i % 7);
        Options o = named("bc." + std::to_string(root) + std::string(dataTypeName(dtype)));
        o.root = root;
        rt.broadcast(t.view(), o)->wait();
        for (size_t i = 0; i < t.count(); ++i) ASSERT_EQ(t.get(i), root * 10 + i % 7);
      }
    }
  });
}

TEST_P(BySize, AlltoallWithSplits) {
  const int n = GetParam();
  Cluster cluster(n);
  cluster.run([&](int rank, engine::Runtime& rt) {
    // Rank r sends (p + 1) rows valued p to each rank p: every receiver gets only its own rank.
    std::vector<int32_t> splits(n);
    int64_t rows = 0;
    for (int p = 0; p < n; ++p) {
      splits[p] = p + 1;
      rows += p + 1;
    }
    std::vector<float> in(static_cast<size_t>(rows * 2));
    size_t k = 0;
    for (int p = 0; p < n; ++p) {
      for (int i = 0; i < (p + 1) * 2; ++i) in[k++] = static_cast<float>(p);
    }
    Options o = named("a2a");
    o.splits = splits;
    auto work = rt.alltoall(view(in, DataType::kFloat32, {rows, 2}), o);
    work->wait();
    const OwnedTensor& out = work->outputs().at(0);
    ASSERT_EQ(out.view.shape, (std::vector<int64_t>{static_cast<int64_t>(n) * (rank + 1), 2}));
    for (int64_t i = 0; i < out.view.numElements(); ++i) ASSERT_EQ(static_cast<float*>(out.view.data)[i], rank);
    std::vector<int32_t> want(n, rank + 1);
    EXPECT_EQ(work->receivedSplits(), want);

    // Equal split (no splits given); int64 payload from sender rank.
    std::vector<int64_t> eq(static_cast<size_t>(n * 3), rank);
    auto w2 = rt.alltoall(view(eq, DataType::kInt64, {static_cast<int64_t>(n * 3)}), named("a2a.eq"));
    w2->wait();
    const auto* got = static_cast<const int64_t*>(w2->outputs()[0].view.data);
    for (int p = 0; p < n; ++p) {
      for (int i = 0; i < 3; ++i) ASSERT_EQ(got[p * 3 + i], p);
    }
  });
}

// Horovod's rule: splits may sum to fewer rows than the tensor has; the rows past the sum are
// not sent (rank r's tensor holds n rows for the others, then r + 1 rows that stay home).
TEST_P(BySize, AlltoallLeavesTheRowsPastTheSplitsUnsent) {
  const int n = GetParam();
  Cluster cluster(n);
  cluster.run([&](int rank, engine::Runtime& rt) {
    const int64_t rows = n + rank + 1;
    std::vector<float> in(static_cast<size_t>(rows));
    for (int64_t i = 0; i < rows; ++i) in[i] = i < n ? static_cast<float>(rank * 100 + i) : -1.0f;
    Options o = named("a2a.short");
    o.splits.assign(static_cast<size_t>(n), 1);
    auto work = rt.alltoall(view(in, DataType::kFloat32, {rows}), o);
    work->wait();
    const OwnedTensor& out = work->outputs().at(0);
    ASSERT_EQ(out.view.shape, (std::vector<int64_t>{n}));
    for (int p = 0; p < n; ++p) EXPECT_EQ(static_cast<const float*>(out.view.data)[p], p * 100 + rank);
    EXPECT_EQ(work->receivedSplits(), std::vector<int32_t>(static_cast<size_t>(n), 1));
  });
}

TEST_P(BySize, ReducescatterUnevenRows) {
  const int n = GetParam();
  Cluster cluster(n);
  cluster.run([&](int rank, engine::Runtime& rt) {
    for (int64_t rows : {int64_t(4) * n, int64_t(7), int64_t(1), int64_t(0)}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
        std::vector<double> in(static_cast<size_t>(rows * 2));
        for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<double>(i) + rank;
        int64_t mine = engine::reducescatterRows(rows, n, rank);
        int64_t first = 0;
        for (int r = 0; r < rank; ++r) first += engine::reducescatterRows(rows, n, r);
        std::vector<double> out(static_cast<size_t>(mine * 2) + 1);
        TensorView ov = view(out, DataType::kFloat64, {mine, 2});
        rt.reducescatter(view(in, DataType::kFloat64, {rows, 2}), ov,
                         named("rs." + std::to_string(rows) + "." + std::to_string(int(op)), op))
            ->wait();
        for (int64_t i = 0; i < mine * 2; ++i) {
          double sum = n * static_cast<double>(first * 2 + i) + n * (n - 1) / 2.0;
          double want = op == ReduceOp::kAverage ? sum * (1.0 / n) : sum;
          ASSERT_NEAR(out[i], want, 1e-9) << "rows " << rows << " rank " << rank;
        }
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Sizes, BySize, ::testing::Values(1, 2, 3, 5));

TEST(Collectives, FusedAllgatherAndReducescatter) {
  Cluster cluster(3);
  cluster.run([&](int rank, engine::Runtime& rt) {
    const int kT = 12;
    std::vector<std::vector<int32_t>> in(kT);
    std::vector<WorkPtr> works;
    for (int t = 0; t < kT; ++t) {
      in[t].assign(static_cast<size_t>((rank + 1) * (t % 3 + 1) * 2), rank * 100 + t);
      works.push_back(
          rt.allgather(view(in[t], DataType::kInt32, {(rank + 1) * (t % 3 + 1), 2}), named("fag" + std::to_string(t))));
    }
    std::vector<std::vector<float>> rin(kT), rout(kT);
    std::vector<WorkPtr> rworks;
    for (int t = 0; t < kT; ++t) {
      int64_t rows = 5 + t;
      rin[t].assign(static_cast<size_t>(rows), static_cast<float>(rank + t));
      rout[t].resize(static_cast<size_t>(engine::reducescatterRows(rows, 3, rank)) + 1);
      Options o = named("frs" + std::to_string(t));
      o.prescale = 2.0;
      rworks.push_back(rt.reducescatter(view(rin[t], DataType::kFloat32, {rows}),
                                        view(rout[t], DataType::kFloat32, {engine::reducescatterRows(rows, 3, rank)}),
                                        o));
    }
    for (int t = 0; t < kT; ++t) {
      works[t]->wait();
      const OwnedTensor& out = works[t]->outputs()[0];
      const auto* p = static_cast<const int32_t*>(out.view.data);
      size_t k = 0;
      for (int r = 0; r < 3; ++r) {
        for (int i = 0; i < (r + 1) * (t % 3 + 1) * 2; ++i) ASSERT_EQ(p[k++], r * 100 + t);
      }
      ASSERT_EQ(static_cast<int64_t>(k), out.view.numElements());
      rworks[t]->wait();
      for (int64_t i = 0; i < engine::reducescatterRows(5 + t, 3, rank); ++i) {
        ASSERT_FLOAT_EQ(rout[t][i], 2.0f * (3 * t + 3));
      }
    }
  });
}

TEST(Collectives, GroupedAllgatherAndReducescatter) {
  Cluster cluster(2);
  cluster.run([&](int rank, engine::Runtime& rt) {
    std::vector<uint8_t> a(3, static_cast<uint8_t>(rank + 1)), b(2, static_cast<uint8_t>(rank + 7));
    auto w = rt.groupedAllgather({view(a, DataType::kUInt8), view(b, DataType::kUInt8)}, named("gag"));
    w->wait();
    ASSERT_EQ(w->outputs().size(), 2u);
    EXPECT_EQ(w->outputs()[0].view.shape, std::vector<int64_t>{6});
    EXPECT_EQ(w->outputs()[1].view.shape, std::vector<int64_t>{4});
    const auto* p = static_cast<const uint8_t*>(w->outputs()[1].view.data);
    EXPECT_EQ(p[0], 7);
    EXPECT_EQ(p[3], 8);
    std::vector<int32_t> x(4, rank + 1), y(6, 10), ox(2), oy(3);
    rt.groupedReducescatter({view(x, DataType::kInt32), view(y, DataType::kInt32)},
                            {view(ox, DataType::kInt32), view(oy, DataType::kInt32)}, named("grs"))
        ->wait();
    EXPECT_EQ(ox, (std::vector<int32_t>{3, 3}));
    EXPECT_EQ(oy, (std::vector<int32_t>{20, 20, 20}));
  });
}

TEST(Collectives, BarrierHoldsUntilAllArrive) {
  Cluster cluster(3);
  std::atomic<int> arrived{0};
  cluster.run([&](int rank, engine::Runtime& rt) {
    if (rank == 0) std::this_thread::sleep_for(std::chrono::milliseconds(300));
    arrived++;
    auto start = std::chrono::steady_clock::now();
    rt.barrier(0)->wait();
    EXPECT_EQ(arrived.load(), 3);
    if (rank != 0) {
      EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(200));
    }
  });
}

}  // namespace
}  // namespace hvd::test

namespace hvd::test {
namespace {

TEST(Collectives, AlltoallAndReducescatterEveryDtype) {
  Cluster cluster(3);
  cluster.run([&](int rank, engine::Runtime& rt) {
    for (DataType dtype : allDataTypes()) {
      std::string tag = std::string(dataTypeName(dtype));
      // Alltoall: rank r sends value r*10+p (row p) to rank p.
      Buffer in(dtype, {3, 2});
      for (int p = 0; p < 3; ++p) {
        for (int c = 0; c < 2; ++c)
          in.set(static_cast<size_t>(p * 2 + c), dtype == DataType::kBool ? 1 : rank * 10 + p);
      }
      auto w = rt.alltoall(in.view(), named("a2a." + tag));
      w->wait();
      const OwnedTensor& out = w->outputs()[0];
      ASSERT_EQ(out.view.shape, (std::vector<int64_t>{3, 2}));
      for (int p = 0; p < 3; ++p) {
        double want = dtype == DataType::kBool ? 1 : p * 10 + rank;
        ASSERT_EQ(Buffer::load(out.view.data, dtype, static_cast<size_t>(p * 2)), want) << tag;
      }
      // Reducescatter Sum: 5 rows over 3 ranks -> 2, 2, 1.
      if (dtype == DataType::kBool) continue;
      Buffer rin(dtype, {5, 2});
      for (size_t i = 0; i < rin.count(); ++i) rin.set(i, static_cast<double>(i % 4 + rank));
      int64_t mine = engine::reducescatterRows(5, 3, rank);
      Buffer rout(dtype, {mine, 2});
      rt.reducescatter(rin.view(), rout.view(), named("rs." + tag))->wait();
      int64_t first = rank == 0 ? 0 : (rank == 1 ? 2 : 4);
      for (size_t i = 0; i < rout.count(); ++i) {
        size_t global = static_cast<size_t>(first * 2) + i;
        double want = 3.0 * (global % 4) + 3.0;
        ASSERT_NEAR(rout.get(i), want, 1e-2 * want) << tag << " element " << i;
      }
    }
  });
}

// Several user threads of one rank enqueue at once (the API is thread-safe).
TEST(Collectives, ConcurrentEnqueueFromManyThreads) {
  Cluster cluster(2);
  cluster.run([&](int rank, engine::Runtime& rt) {
    const int kThreads = 4, kOps = 50;
    std::vector<std::thread> threads;
    std::atomic<int> wrong{0};
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        for (int i = 0; i < kOps; ++i) {
          std::vector<int32_t> a(8, t * 1000 + i + rank), b(8);
          rt.allreduce(view(a, DataType::kInt32), view(b, DataType::kInt32),
                       named("mt." + std::to_string(t) + "." + std::to_string(i)))
              ->wait();
          if (b[0] != 2 * (t * 1000 + i) + 1) wrong++;
        }
      });
    }
    for (auto& th : threads) th.join();
    EXPECT_EQ(wrong.load(), 0);
  });
}

}  // namespace
}  // namespace hvd::test
