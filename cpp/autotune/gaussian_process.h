// Gaussian-process regression for the autotuner: a zero-mean GP on standardised scores over
// points of the unit cube [0,1]^d (knob coordinates, knob_space.h), with a Matern-5/2 kernel of
// one length scale for all coordinates and a fixed noise variance added to the diagonal.
//
// fit() standardises the scores (mean 0, variance 1), picks the length scale with the highest
// log marginal likelihood from a fixed list (no gradient search: with the tens of samples a tuner
// takes, a list is exact enough and cannot diverge), and factors the kernel matrix once
// (Cholesky). predict() is then O(n^2) per point. Plain value type; not thread-safe.
#pragma once

#include <cstddef>
#include <vector>

namespace hvd::autotune {

struct GaussianProcessOptions {
  // Noise variance on the standardised scores (HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE, in
  // [0, 1]); a tiny jitter is always added so that repeated points stay factorable.
  double noise = 0.8;
  // Candidate length scales (unit-cube units).
  std::vector<double> lengthScales = {0.05, 0.1, 0.15, 0.25, 0.4, 0.6, 1.0, 1.6};
};

class GaussianProcess {
 public:
  explicit GaussianProcess(GaussianProcessOptions options = {}) : options_(std::move(options)) {}

  // Fits the model to points x (each of the same dimension) with scores y. At least one point.
  void fit(const std::vector<std::vector<double>>& x, const std::vector<double>& y);
  bool fitted() const { return !x_.empty(); }

  struct Prediction {
    double mean = 0;    // in the units of y
    double stddev = 0;  // of the latent function (without the noise), in the units of y
  };
  Prediction predict(const std::vector<double>& point) const;

  double lengthScale() const { return lengthScale_; }
  // Log marginal likelihood of the standardised scores at the chosen length scale.
  double logLikelihood() const { return logLikelihood_; }

  // The kernel between two points at length scale `l` (unit signal variance).
  static double kernel(const std::vector<double>& a, const std::vector<double>& b, double l);

 private:
  // Factors K + noise I at length scale l into chol_ and solves alpha_; returns the log marginal
  // likelihood (-inf if the matrix is not positive definite).
  double factor(double l);

  GaussianProcessOptions options_;
  std::vector<std::vector<double>> x_;
  std::vector<double> yStd_;  // standardised scores
  double yMean_ = 0, yScale_ = 1;
  double lengthScale_ = 0.25;
  double logLikelihood_ = 0;
  std::vector<double> chol_;   // n x n lower factor, row major
  std::vector<double> alpha_;  // (K + noise I)^-1 yStd_
};

// Expected improvement of a point whose prediction is (mean, stddev) over `best`, for a
// maximisation, with exploration margin xi >= 0 (all in the units of the scores).
double expectedImprovement(double mean, double stddev, double best, double xi);

// Small dense linear algebra on row-major n x n matrices (exposed for tests).
// In place: the lower Cholesky factor of the symmetric positive definite `a`; false if it is not.
bool choleskyInPlace(std::vector<double>& a, size_t n);
// Solves L x = b (L lower triangular) and L^T x = b, in place on b.
void solveLower(const std::vector<double>& l, size_t n, std::vector<double>& b);
void solveLowerTransposed(const std::vector<double>& l, size_t n, std::vector<double>& b);

}  // namespace hvd::autotune
