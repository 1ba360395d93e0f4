// Allreduce through the whole engine: ranks as threads, every dtype and reduce op, scaling,
// in place, fusion, ordering freedom.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "cluster.h"
#include "typed.h"

namespace hvd::test {
namespace {

double inputValue(int rank, size_t i) { return static_cast<double>((rank + 1) + static_cast<int>(i % 5)); }

double expected(ReduceOp op, int n, size_t i, DataType dtype) {
  double acc = op == ReduceOp::kProduct ? 1 : (op == ReduceOp::kMin ? 1e300 : (op == ReduceOp::kMax ? -1e300 : 0));
  for (int r = 0; r < n; ++r) {
    double v = inputValue(r, i);
    if (dtype == DataType::kBool) v = v != 0;
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAverage: acc += v; break;
      case ReduceOp::kMin: acc = std::min(acc, v); break;
      case ReduceOp::kMax: acc = std::max(acc, v); break;
      case ReduceOp::kProduct: acc *= v; break;
      default: break;
    }
  }
  if (dtype == DataType::kBool) return acc != 0;
  if (op == ReduceOp::kAverage) {
    acc *= 1.0 / n;  // the engine scales by 1/size in double, then truncates integers
    if (!isFloatingPoint(dtype)) acc = std::trunc(acc);
  }
  return acc;
}

class AllreduceBySize : public ::testing::TestWithParam<int> {};

TEST_P(AllreduceBySize, EveryDtypeAndOp) {
  const int n = GetParam();
  Cluster cluster(n);
  cluster.run([&](int rank, engine::Runtime& rt) {
    for (DataType dtype : allDataTypes()) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct}) {
        bool scaled = op == ReduceOp::kAverage;
        if (scaled && (dtype == DataType::kUInt16 || dtype == DataType::kInt16 || dtype == DataType::kBool)) continue;
        if (op == ReduceOp::kProduct && (dtype == DataType::kUInt8 || dtype == DataType::kInt8) && n > 2) continue;
        const size_t count = 37;
        Buffer in(dtype, static_cast<int64_t>(count)), out(dtype, static_cast<int64_t>(count));
        for (size_t i = 0; i < count; ++i) in.set(i, inputValue(rank, i));
        std::string name = "t." + std::string(dataTypeName(dtype)) + "." + std::to_string(static_cast<int>(op));
        rt.allreduce(in.view(), out.view(), named(name, op))->wait();
        for (size_t i = 0; i < count; ++i) {
          double want = expected(op, n, i, dtype);
          double tol = (dtype == DataType::kFloat16 || dtype == DataType::kBFloat16) ? std::abs(want) * 1e-2 : 1e-9;
          ASSERT_NEAR(out.get(i), want, tol) << name << " element " << i << " rank " << rank;
          ASSERT_EQ(in.get(i), dtype == DataType::kBool ? 1.0 : inputValue(rank, i)) << "input modified";
        }
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Sizes, AllreduceBySize, ::testing::Values(1, 2, 3, 4, 5));

TEST(Allreduce, InPlaceAndScaling) {
  Cluster cluster(3);
  cluster.run([&](int rank, engine::Runtime& rt) {
    std::vector<float> x(100, static_cast<float>(rank + 1));
    TensorView v = view(x, DataType::kFloat32);
    Options o = named("inplace");
    o.prescale = 2.0;
    o.postscale = 0.5;
    rt.allreduce(v, v, o)->wait();
    for (float f : x) ASSERT_FLOAT_EQ(f, 6.0f);  // 0.5 * (2*1 + 2*2 + 2*3)
    // Integer average truncates toward zero: sum 5 over 2 -> 2, of -5 -> -2.
    std::vector<int32_t> ints = {rank == 0 ? 2 : 0, rank == 0 ? -2 : 0, rank == 1 ? 3 : 0, rank == 1 ? -3 : 0};
    std::vector<int32_t> res(4);
    rt.allreduce(view(ints, DataType::kInt32), view(res, DataType::kInt32), named("intavg", ReduceOp::kAverage))
        ->wait();
    // sums 2,-2,3,-3 over 3 ranks -> 0,0,1,-1
    EXPECT_EQ(res, (std::vector<int32_t>{0, 0, 1, -1}));
  });
}

TEST(Allreduce, ZeroElementsAndScalars) {
  Cluster cluster(2);
  cluster.run([&](int rank, engine::Runtime& rt) {
    std::vector<float> empty;
    TensorView e;
    e.data = nullptr;
    e.dtype = DataType::kFloat32;
    e.shape = {0, 4};
    rt.allreduce(e, e, named("empty"))->wait();
    std::vector<double> s = {static_cast<double>(rank + 1)}, o(1);
    TensorView sv = view(s, DataType::kFloat64, {});
    sv.shape.clear();
    TensorView ov = view(o, DataType::kFloat64);
    ov.shape.clear();
    rt.allreduce(sv, ov, named("scalar"))->wait();
    EXPECT_EQ(o[0], 3.0);
  });
}

// Many small tensors enqueued asynchronously fuse into few collectives and equal the unfused
// results; the same run with fusion off gives identical numbers.
TEST(Allreduce, FusionMatchesUnfused) {
  for (const char* threshold : {"0", "134217728", "4096"}) {
    Cluster cluster(3, {{"HOROVOD_FUSION_THRESHOLD", threshold}});
    cluster.run([&](int rank, engine::Runtime& rt) {
      const int kTensors = 64;
      std::vector<std::vector<float>> in(kTensors), out(kTensors);
      std::vector<WorkPtr> works;
      for (int t = 0; t < kTensors; ++t) {
        in[t].resize(static_cast<size_t>(1 + t * 7));
        for (size_t i = 0; i < in[t].size(); ++i) in[t][i] = static_cast<float>(rank * 100 + t + i * 0.25);
        out[t].resize(in[t].size());
        works.push_back(rt.allreduce(view(in[t], DataType::kFloat32), view(out[t], DataType::kFloat32),
                                     named("g" + std::to_string(t), ReduceOp::kAverage)));
      }
      for (auto& w : works) w->wait();
      for (int t = 0; t < kTensors; ++t) {
        for (size_t i = 0; i < out[t].size(); ++i) {
          ASSERT_NEAR(out[t][i], 100.0f + t + i * 0.25f, 1e-3) << "threshold " << threshold;
        }
      }
      auto stats = rt.stats();
      if (std::string(threshold) == "0") {
        EXPECT_EQ(stats.responses, stats.tensors);
      }
    });
  }
}

// Different ranks enqueue the same async ops in different orders; all complete.
TEST(Allreduce, OrderingFreedom) {
  Cluster cluster(4);
  cluster.run([&](int rank, engine::Runtime& rt) {
    const int kTensors = 20;
    std::vector<std::vector<int64_t>> in(kTensors, std::vector<int64_t>(10)), out(kTensors, std::vector<int64_t>(10));
    std::vector<int> order(kTensors);
    for (int i = 0; i < kTensors; ++i) order[i] = i;
    std::rotate(order.begin(), order.begin() + (rank * 5) % kTensors, order.end());
    if (rank % 2 == 1) std::reverse(order.begin(), order.end());
    std::vector<WorkPtr> works(kTensors);
    for (int t : order) {
      std::fill(in[t].begin(), in[t].end(), t + rank);
      works[t] =
          rt.allreduce(view(in[t], DataType::kInt64), view(out[t], DataType::kInt64), named("o" + std::to_string(t)));
    }
    for (int t = 0; t < kTensors; ++t) {
      works[t]->wait();
      for (auto v : out[t]) ASSERT_EQ(v, 4 * t + 6);
    }
  });
}

TEST(Allreduce, GroupedAllreduce) {
  Cluster cluster(3, {{"HOROVOD_DISABLE_GROUP_FUSION", "1"}});
  cluster.run([&](int rank, engine::Runtime& rt) {
    std::vector<std::vector<float>> in(5), out(5);
    std::vector<TensorView> ins, outs;
    for (int t = 0; t < 5; ++t) {
      in[t].assign(static_cast<size_t>(3 + t), static_cast<float>(rank + t));
      out[t].resize(in[t].size());
      ins.push_back(view(in[t], DataType::kFloat32));
      outs.push_back(view(out[t], DataType::kFloat32));
    }
    rt.groupedAllreduce(ins, outs, named("grp"))->wait();
    for (int t = 0; t < 5; ++t) {
      for (float f : out[t]) ASSERT_FLOAT_EQ(f, static_cast<float>(3 + 3 * t));
    }
  });
}

TEST(Allreduce, LargeTensorBeyondThreshold) {
  Cluster cluster(3, {{"HOROVOD_FUSION_THRESHOLD", "1024"}});
  cluster.run([&](int rank, engine::Runtime& rt) {
    std::vector<double> a(5000, rank + 1.0), b(3, rank + 1.0), oa(5000), ob(3);
    auto w1 = rt.allreduce(view(a, DataType::kFloat64), view(oa, DataType::kFloat64), named("big"));
    auto w2 = rt.allreduce(view(b, DataType::kFloat64), view(ob, DataType::kFloat64), named("small"));
    w1->wait();
    w2->wait();
    for (double v : oa) ASSERT_EQ(v, 6.0);
    for (double v : ob) ASSERT_EQ(v, 6.0);
  });
}

}  // namespace
}  // namespace hvd::test
