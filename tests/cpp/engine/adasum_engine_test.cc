// Adasum through the Runtime and the CPU backend: a single tensor and a fused group (each tensor
// its own coefficients) equal the pairwise formula, prescale and postscale apply, a rank that
// joined contributes zeros (which change nothing), and a set of 3 ranks is refused on every rank.
#include <gtest/gtest.h>

#include <cmath>

#include "cluster.h"
#include "horovod/errors.h"

namespace hvd::test {
namespace {

// adasum(a, b) of the formula, in double.
std::vector<double> pair(const std::vector<double>& a, const std::vector<double>& b) {
  double dot = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size(); ++i) dot += a[i] * b[i], aa += a[i] * a[i], bb += b[i] * b[i];
  std::vector<double> out(a.size());
  for (size_t i = 0; i < a.size(); ++i) out[i] = (1 - dot / (2 * aa)) * a[i] + (1 - dot / (2 * bb)) * b[i];
  return out;
}

std::vector<double> input(int rank, size_t n, int salt) {
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = std::sin(static_cast<double>(i * (rank + 2) + salt)) + 0.3 * rank;
  return v;
}

TEST(AdasumEngine, SingleAndFusedTensorsMatchTheFormula) {
  Cluster cluster(2);
  cluster.run([&](int rank, engine::Runtime& rt) {
    for (int step = 0; step < 3; ++step) {  // later steps hit the response cache
      std::vector<double> x = input(rank, 37, 0), y = input(rank, 5, 1), z = input(rank, 300, 2);
      std::vector<double> ox(37), oy(5), oz(300);
      Options single = named("single", ReduceOp::kAdasum);
      single.prescale = 2.0;
      single.postscale = 0.25;
      auto w = rt.allreduce(view(x, DataType::kFloat64), view(ox, DataType::kFloat64), single);
      auto g = rt.groupedAllreduce({view(y, DataType::kFloat64), view(z, DataType::kFloat64)},
                                   {view(oy, DataType::kFloat64), view(oz, DataType::kFloat64)},
                                   named("group", ReduceOp::kAdasum));
      w->wait();
      g->wait();
      const auto ex = pair(input(0, 37, 0), input(1, 37, 0));
      const auto ey = pair(input(0, 5, 1), input(1, 5, 1));
      const auto ez = pair(input(0, 300, 2), input(1, 300, 2));
      for (size_t i = 0; i < ex.size(); ++i) ASSERT_NEAR(0.5 * ex[i], ox[i], 1e-12) << i;
      for (size_t i = 0; i < ey.size(); ++i) ASSERT_NEAR(ey[i], oy[i], 1e-12) << i;
      for (size_t i = 0; i < ez.size(); ++i) ASSERT_NEAR(ez[i], oz[i], 1e-12) << i;
    }
  });
}

TEST(AdasumEngine, JoinedRankContributesZeros) {
  Cluster cluster(2);
  cluster.run([&](int rank, engine::Runtime& rt) {
    if (rank == 1) {
      rt.join()->wait();
      return;
    }
    std::vector<float> x = {1, 2, 3}, out(3);
    rt.allreduce(view(x, DataType::kFloat32), view(out, DataType::kFloat32), named("x", ReduceOp::kAdasum))->wait();
    EXPECT_EQ(x, out);
    rt.join()->wait();
  });
}

TEST(AdasumEngine, ThreeRanksAreRefusedOnEveryRank) {
  Cluster cluster(3);
  cluster.run([&](int, engine::Runtime& rt) {
    std::vector<float> x(4, 1.0f), out(4);
    auto w = rt.allreduce(view(x, DataType::kFloat32), view(out, DataType::kFloat32), named("x", ReduceOp::kAdasum));
    expectThrowWith<MismatchError>([&] { w->wait(); }, "Running Adasum with non-power of 2 ranks is not supported yet");
  });
}

}  // namespace
}  // namespace hvd::test
