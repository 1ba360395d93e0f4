// Bayesian optimisation over the unit cube [0,1]^d, maximising a noisy score: the first points
// are spread at random, then each suggestion maximises the expected improvement (EI) of a
// Gaussian process fitted to every score so far (gaussian_process.h), over random candidates
// (uniform ones plus perturbations of the best points so far).
//
// Deterministic for a given seed and sequence of add() calls. A `snap` callback maps a
// candidate to the point that would really be measured (integer or on/off knobs), so the model
// sees the points as applied. Not thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include "autotune/gaussian_process.h"

namespace hvd::autotune {

struct BayesOptOptions {
  double noise = 0.8;      // the GP's noise variance on standardised scores
  uint64_t seed = 1;
  int initialRandom = 4;   // points suggested at random before the model is used
  int uniformCandidates = 1500;
  int localCandidates = 150;  // per each of the best three points so far
  double localSpread = 0.1;   // standard deviation of those perturbations
  double xi = 0.01;           // exploration margin, in standard deviations of the scores
  // Candidates closer than this (Euclidean, unit-cube units) to a measured point are passed over
  // while farther ones exist: EI alone tends to re-measure the incumbent's neighbourhood when
  // the model is sure of it, which spends the sample budget without learning anything.
  double minDistance = 0.03;
};

class BayesianOptimizer {
 public:
  using Snap = std::function<void(std::vector<double>&)>;
  BayesianOptimizer(size_t dims, BayesOptOptions options = {}, Snap snap = {});

  size_t dims() const { return dims_; }
  size_t size() const { return y_.size(); }
  // Records a measured point (coordinates in [0,1]).
  void add(const std::vector<double>& x, double score);
  // The next point to measure.
  std::vector<double> suggest();
  // Index (in add() order) of the measured point the model believes best: the highest posterior
  // mean among measured points (with no noise, the highest score). At least one point.
  size_t bestIndex();
  const std::vector<std::vector<double>>& points() const { return x_; }
  const std::vector<double>& scores() const { return y_; }

 private:
  std::vector<double> randomPoint();
  void refit();

  size_t dims_;
  BayesOptOptions options_;
  Snap snap_;
  std::mt19937_64 rng_;
  std::vector<std::vector<double>> x_;
  std::vector<double> y_;
  GaussianProcess gp_;
  size_t fittedAt_ = 0;  // number of points the model was fitted to
};

}  // namespace hvd::autotune
