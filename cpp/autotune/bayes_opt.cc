#include "autotune/bayes_opt.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "horovod/errors.h"

namespace hvd::autotune {

BayesianOptimizer::BayesianOptimizer(size_t dims, BayesOptOptions options, Snap snap)
    : dims_(dims), options_(options), snap_(std::move(snap)), rng_(options.seed), gp_([&] {
        GaussianProcessOptions g;
        g.noise = options.noise;
        return g;
      }()) {}

void BayesianOptimizer::add(const std::vector<double>& x, double score) {
  if (x.size() != dims_) throw InvalidArgument("BayesianOptimizer::add: point of the wrong dimension");
  x_.push_back(x);
  y_.push_back(score);
}

std::vector<double> BayesianOptimizer::randomPoint() {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<double> p(dims_);
  for (auto& v : p) v = u(rng_);
  if (snap_) snap_(p);
  return p;
}

void BayesianOptimizer::refit() {
  if (fittedAt_ == x_.size()) return;
  gp_.fit(x_, y_);
  fittedAt_ = x_.size();
}

std::vector<double> BayesianOptimizer::suggest() {
  if (dims_ == 0) return {};
  if (static_cast<int>(x_.size()) < options_.initialRandom || x_.size() < 2) return randomPoint();
  refit();
  // The incumbent is the best posterior mean at a measured point: with noisy scores, the highest
  // raw score is partly luck.
  double best = -std::numeric_limits<double>::infinity();
  for (const auto& p : x_) best = std::max(best, gp_.predict(p).mean);
  double spread = 0;
  {
    const double mean = std::accumulate(y_.begin(), y_.end(), 0.0) / static_cast<double>(y_.size());
    for (double v : y_) spread += (v - mean) * (v - mean);
    spread = std::sqrt(spread / static_cast<double>(y_.size()));
  }
  const double xi = options_.xi * spread;

  // The best candidate by EI among those far enough from every measured point, and overall (the
  // fallback when every candidate is close to one).
  std::vector<double> chosen, chosenNear;
  double chosenEi = -1, chosenNearEi = -1;
  const double minDistance2 = options_.minDistance * options_.minDistance;
  auto consider = [&](std::vector<double> p) {
    if (snap_) snap_(p);
    const auto pred = gp_.predict(p);
    const double ei = expectedImprovement(pred.mean, pred.stddev, best, xi);
    double nearest = std::numeric_limits<double>::infinity();
    for (const auto& q : x_) {
      double d2 = 0;
      for (size_t i = 0; i < dims_; ++i) d2 += (p[i] - q[i]) * (p[i] - q[i]);
      nearest = std::min(nearest, d2);
    }
    if (nearest >= minDistance2) {
      if (ei > chosenEi) {
        chosenEi = ei;
        chosen = p;
      }
    } else if (ei > chosenNearEi) {
      chosenNearEi = ei;
      chosenNear = std::move(p);
    }
  };
  for (int i = 0; i < options_.uniformCandidates; ++i) consider(randomPoint());
  // Around the three best measured points.
  std::vector<size_t> order(x_.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return y_[a] > y_[b]; });
  std::normal_distribution<double> step(0.0, options_.localSpread);
  for (size_t k = 0; k < std::min<size_t>(3, order.size()); ++k) {
    for (int i = 0; i < options_.localCandidates; ++i) {
      std::vector<double> p = x_[order[k]];
      for (auto& v : p) v = std::clamp(v + step(rng_), 0.0, 1.0);
      consider(std::move(p));
    }
  }
  return chosen.empty() ? chosenNear : chosen;
}

size_t BayesianOptimizer::bestIndex() {
  if (x_.empty()) throw InvalidArgument("BayesianOptimizer::bestIndex: no points yet");
  if (x_.size() == 1) return 0;
  refit();
  size_t best = 0;
  double bestMean = -std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < x_.size(); ++i) {
    const double m = gp_.predict(x_[i]).mean;
    if (m > bestMean) {
      bestMean = m;
      best = i;
    }
  }
  return best;
}

}  // namespace hvd::autotune
