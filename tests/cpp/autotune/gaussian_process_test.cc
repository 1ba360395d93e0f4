// The Gaussian process, expected improvement and the Bayesian optimiser on known functions:
// exact linear algebra, interpolation, a 1-D and a 2-D maximum found within a fixed number of
// samples, and determinism for a seed.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "autotune/bayes_opt.h"
#include "autotune/gaussian_process.h"

namespace hvd::autotune {
namespace {

TEST(LinearAlgebra, CholeskyReproducesTheMatrixAndSolves) {
  // A = M M^T for a fixed M: symmetric positive definite.
  const size_t n = 3;
  std::vector<double> a = {4, 2, 0.6, 2, 5, 1.5, 0.6, 1.5, 3};
  std::vector<double> l = a;
  ASSERT_TRUE(choleskyInPlace(l, n));
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j < n; ++j) {
      double s = 0;
      for (size_t k = 0; k < n; ++k) s += l[i * n + k] * l[j * n + k];
      EXPECT_NEAR(s, a[i * n + j], 1e-12) << i << "," << j;
    }
  }
  // Solve A x = b through L L^T.
  std::vector<double> b = {1, 2, 3}, x = b;
  solveLower(l, n, x);
  solveLowerTransposed(l, n, x);
  for (size_t i = 0; i < n; ++i) {
    double s = 0;
    for (size_t k = 0; k < n; ++k) s += a[i * n + k] * x[k];
    EXPECT_NEAR(s, b[i], 1e-12);
  }
  std::vector<double> notPd = {1, 2, 2, 1};
  EXPECT_FALSE(choleskyInPlace(notPd, 2));
}

TEST(GaussianProcess, InterpolatesWithLittleNoiseAndIsUnsureFarAway) {
  GaussianProcessOptions o;
  o.noise = 1e-6;
  GaussianProcess gp(o);
  std::vector<std::vector<double>> x;
  std::vector<double> y;
  for (double t : {0.0, 0.2, 0.4, 0.6, 0.8, 1.0}) {
    x.push_back({t});
    y.push_back(std::sin(6 * t));
  }
  gp.fit(x, y);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(gp.predict(x[i]).mean, y[i], 1e-3);
  // Between samples: close to the function, and less sure than at a sample.
  EXPECT_NEAR(gp.predict({0.5}).mean, std::sin(3.0), 0.1);
  EXPECT_GT(gp.predict({0.5}).stddev, gp.predict({0.4}).stddev);
}

TEST(GaussianProcess, NoiseSmoothsRepeatedPoints) {
  GaussianProcessOptions o;
  o.noise = 0.5;
  GaussianProcess gp(o);
  // The same point measured three times: the mean there is their average, not one of them.
  gp.fit({{0.5}, {0.5}, {0.5}, {0.0}}, {1.0, 2.0, 3.0, 2.0});
  EXPECT_NEAR(gp.predict({0.5}).mean, 2.0, 0.3);
}

TEST(ExpectedImprovement, Properties) {
  // Certain and below the incumbent: nothing to gain. Certain and above: exactly the gain.
  EXPECT_DOUBLE_EQ(expectedImprovement(1.0, 0.0, 2.0, 0.0), 0.0);
  EXPECT_DOUBLE_EQ(expectedImprovement(3.0, 0.0, 2.0, 0.0), 1.0);
  // More uncertainty, more expected improvement at the same mean; a higher mean, more too.
  EXPECT_GT(expectedImprovement(1.0, 1.0, 2.0, 0.0), expectedImprovement(1.0, 0.5, 2.0, 0.0));
  EXPECT_GT(expectedImprovement(1.5, 0.5, 2.0, 0.0), expectedImprovement(1.0, 0.5, 2.0, 0.0));
  EXPECT_GT(expectedImprovement(1.0, 0.5, 2.0, 0.0), 0.0);
}

// Runs the optimiser for `samples` evaluations of f and returns the best value measured.
template <typename F>
double optimise(size_t dims, F f, int samples, uint64_t seed, double noise, std::vector<double>* bestPoint = nullptr) {
  BayesOptOptions o;
  o.seed = seed;
  o.noise = noise;
  o.initialRandom = 3;
  BayesianOptimizer bo(dims, o);
  double best = -1e300;
  for (int i = 0; i < samples; ++i) {
    std::vector<double> x = bo.suggest();
    const double y = f(x);
    bo.add(x, y);
    if (y > best) {
      best = y;
      if (bestPoint) *bestPoint = x;
    }
  }
  return best;
}

TEST(BayesianOptimizer, FindsTheMaximumOfA1DFunction) {
  // Peak 1.0 at x = 0.73, with a lesser bump at 0.2 to mislead a greedy search.
  auto f = [](const std::vector<double>& x) {
    return std::exp(-std::pow((x[0] - 0.73) / 0.08, 2)) + 0.5 * std::exp(-std::pow((x[0] - 0.2) / 0.1, 2));
  };
  std::vector<double> at;
  const double best = optimise(1, f, 15, 7, 0.01, &at);
  EXPECT_GT(best, 0.97);
  EXPECT_NEAR(at[0], 0.73, 0.03);
}

TEST(BayesianOptimizer, FindsTheMaximumOfA2DFunctionWithinTwentySamples) {
  auto f = [](const std::vector<double>& x) {
    const double dx = x[0] - 0.3, dy = x[1] - 0.8;
    return 10.0 - 20.0 * (dx * dx + 2 * dy * dy) + 0.5 * std::sin(8 * x[0]);
  };
  // The grid's best on a fine grid, as the reference.
  double reference = -1e300;
  for (int i = 0; i <= 200; ++i) {
    for (int j = 0; j <= 200; ++j) reference = std::max(reference, f({i / 200.0, j / 200.0}));
  }
  for (uint64_t seed : {1, 2, 3}) {
    const double best = optimise(2, f, 20, seed, 0.01);
    EXPECT_GT(best, reference - 0.05 * std::abs(reference)) << "seed " << seed;
  }
}

TEST(BayesianOptimizer, IsDeterministicForASeedAndSnapsCandidates) {
  auto run = [](uint64_t seed) {
    BayesOptOptions o;
    o.seed = seed;
    // Second coordinate is an on/off switch.
    BayesianOptimizer bo(2, o, [](std::vector<double>& x) { x[1] = x[1] >= 0.5 ? 1.0 : 0.0; });
    std::vector<std::vector<double>> seen;
    for (int i = 0; i < 10; ++i) {
      auto x = bo.suggest();
      EXPECT_TRUE(x[1] == 0.0 || x[1] == 1.0);
      bo.add(x, x[0] * (x[1] + 1));
      seen.push_back(x);
    }
    return seen;
  };
  EXPECT_EQ(run(5), run(5));
  EXPECT_NE(run(5), run(6));
}

TEST(BayesianOptimizer, BestIndexPrefersTheModelOverOneLuckyScore) {
  BayesOptOptions o;
  o.noise = 0.8;
  BayesianOptimizer bo(1, o);
  // A cluster of good points around 0.8, one lucky spike at 0.1 among poor neighbours.
  bo.add({0.05}, 1.0);
  bo.add({0.1}, 5.2);
  bo.add({0.15}, 1.0);
  bo.add({0.75}, 5.0);
  bo.add({0.8}, 5.0);
  bo.add({0.85}, 5.0);
  const size_t best = bo.bestIndex();
  EXPECT_GE(best, 3u);
}

}  // namespace
}  // namespace hvd::autotune
