#include "autotune/gaussian_process.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

#include "horovod/errors.h"

namespace hvd::autotune {
namespace {

constexpr double kJitter = 1e-8;

}  // namespace

bool choleskyInPlace(std::vector<double>& a, size_t n) {
  for (size_t j = 0; j < n; ++j) {
    double d = a[j * n + j];
    for (size_t k = 0; k < j; ++k) d -= a[j * n + k] * a[j * n + k];
    if (!(d > 0)) return false;
    const double root = std::sqrt(d);
    a[j * n + j] = root;
    for (size_t i = j + 1; i < n; ++i) {
      double s = a[i * n + j];
      for (size_t k = 0; k < j; ++k) s -= a[i * n + k] * a[j * n + k];
      a[i * n + j] = s / root;
    }
    for (size_t k = j + 1; k < n; ++k) a[j * n + k] = 0;  // keep only the lower triangle
  }
  return true;
}

void solveLower(const std::vector<double>& l, size_t n, std::vector<double>& b) {
  for (size_t i = 0; i < n; ++i) {
    double s = b[i];
    for (size_t k = 0; k < i; ++k) s -= l[i * n + k] * b[k];
    b[i] = s / l[i * n + i];
  }
}

void solveLowerTransposed(const std::vector<double>& l, size_t n, std::vector<double>& b) {
  for (size_t i = n; i-- > 0;) {
    double s = b[i];
    for (size_t k = i + 1; k < n; ++k) s -= l[k * n + i] * b[k];
    b[i] = s / l[i * n + i];
  }
}

double GaussianProcess::kernel(const std::vector<double>& a, const std::vector<double>& b, double l) {
  double d2 = 0;
  for (size_t i = 0; i < a.size(); ++i) d2 += (a[i] - b[i]) * (a[i] - b[i]);
  const double r = std::sqrt(5.0 * d2) / l;  // sqrt(5) |a - b| / l
  return (1.0 + r + r * r / 3.0) * std::exp(-r);
}

double GaussianProcess::factor(double l) {
  const size_t n = x_.size();
  chol_.assign(n * n, 0.0);
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j <= i; ++j) {
      const double k = kernel(x_[i], x_[j], l);
      chol_[i * n + j] = k;
      chol_[j * n + i] = k;
    }
    chol_[i * n + i] += options_.noise + kJitter;
  }
  if (!choleskyInPlace(chol_, n)) return -std::numeric_limits<double>::infinity();
  alpha_ = yStd_;
  solveLower(chol_, n, alpha_);
  // log p(y) = -y^T K^-1 y / 2 - log det L - n log(2 pi) / 2, with y^T K^-1 y = |L^-1 y|^2.
  double fitTerm = 0, logDet = 0;
  for (size_t i = 0; i < n; ++i) {
    fitTerm += alpha_[i] * alpha_[i];
    logDet += std::log(chol_[i * n + i]);
  }
  solveLowerTransposed(chol_, n, alpha_);
  return -0.5 * fitTerm - logDet - 0.5 * static_cast<double>(n) * std::log(2 * std::numbers::pi);
}

void GaussianProcess::fit(const std::vector<std::vector<double>>& x, const std::vector<double>& y) {
  if (x.empty() || x.size() != y.size())
    throw InvalidArgument("GaussianProcess::fit: need as many scores as points (>= 1)");
  if (!(options_.noise >= 0)) throw InvalidArgument("GaussianProcess: noise must be >= 0");
  x_ = x;
  const double n = static_cast<double>(y.size());
  yMean_ = 0;
  for (double v : y) yMean_ += v / n;
  double var = 0;
  for (double v : y) var += (v - yMean_) * (v - yMean_) / n;
  // Equal scores (or one point): keep the scale of the scores themselves so predictions are finite.
  yScale_ = var > 0 ? std::sqrt(var) : (std::abs(yMean_) > 0 ? std::abs(yMean_) : 1.0);
  yStd_.resize(y.size());
  for (size_t i = 0; i < y.size(); ++i) yStd_[i] = (y[i] - yMean_) / yScale_;

  double bestLl = -std::numeric_limits<double>::infinity();
  double bestL = options_.lengthScales.empty() ? 0.25 : options_.lengthScales.front();
  for (double l : options_.lengthScales) {
    const double ll = factor(l);
    if (ll > bestLl) {
      bestLl = ll;
      bestL = l;
    }
  }
  lengthScale_ = bestL;
  logLikelihood_ = factor(bestL);
  if (!std::isfinite(logLikelihood_)) throw Error("GaussianProcess::fit: kernel matrix not positive definite");
}

GaussianProcess::Prediction GaussianProcess::predict(const std::vector<double>& point) const {
  const size_t n = x_.size();
  std::vector<double> k(n);
  for (size_t i = 0; i < n; ++i) k[i] = kernel(point, x_[i], lengthScale_);
  double mean = 0;
  for (size_t i = 0; i < n; ++i) mean += k[i] * alpha_[i];
  solveLower(chol_, n, k);  // v = L^-1 k*
  double var = 1.0;
  for (double v : k) var -= v * v;
  Prediction p;
  p.mean = yMean_ + yScale_ * mean;
  p.stddev = yScale_ * std::sqrt(std::max(var, 1e-12));
  return p;
}

double expectedImprovement(double mean, double stddev, double best, double xi) {
  const double gain = mean - best - xi;
  if (stddev <= 0) return std::max(gain, 0.0);
  const double z = gain / stddev;
  const double cdf = 0.5 * std::erfc(-z / std::numbers::sqrt2);
  const double pdf = std::exp(-0.5 * z * z) / std::sqrt(2 * std::numbers::pi);
  return gain * cdf + stddev * pdf;
}

}  // namespace hvd::autotune
