// The GPU Adasum cases both GPU data paths run (tests/cpp/gpu_nccl, tests/cpp/gpu_staged): each
// rank of a job whose hosts hold `localSize` consecutive ranks each reduces CUDA tensors with
// op=Adasum and compares every element with a float64 reference computed here from the
// definition (not from the code under test): the average of each host's ranks, combined across
// hosts by the pairwise Adasum operator in a binary tree over the hosts (host order), per tensor,
// times the scale factors. The data path only provides the device copies (GpuIo).
#pragma once

#include <cfloat>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "horovod/horovod.h"

namespace hvd::test {

// Moves values to and from the data path's device (values exactly representable in every
// floating dtype, so the reference sees what the device holds).
struct GpuIo {
  // A device tensor of `dtype` holding `values` (shape {size}), alive until the rank exits.
  std::function<TensorView(const std::vector<double>& values, DataType dtype)> upload;
  std::function<std::vector<double>(const TensorView& tensor)> download;
};

// Rank r's element i of tensor t: multiples of 1/4 in [-2, 2] (exact in float16 and bfloat16),
// in a pattern that differs from rank to rank, so the hosts' vectors are neither equal nor
// orthogonal and the coefficients matter.
inline double adasumInput(int rank, int tensor, size_t i) {
  const int k = static_cast<int>(i);
  return static_cast<double>((rank * 7 + tensor * 3 + k * 5 + (rank + 1) * (k % 4)) % 17 - 8) / 4.0;
}

// adasum(a, b) = (1 - a.b / (2 |a|^2)) a + (1 - a.b / (2 |b|^2)) b, a coefficient being 1 where
// its |.|^2 is below sqrt(DBL_MIN).
inline std::vector<double> adasumPair(const std::vector<double>& a, const std::vector<double>& b) {
  double dot = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    dot += a[i] * b[i];
    aa += a[i] * a[i];
    bb += b[i] * b[i];
  }
  const double tiny = std::sqrt(DBL_MIN);
  const double ca = aa < tiny ? 1.0 : 1.0 - dot / (2 * aa), cb = bb < tiny ? 1.0 : 1.0 - dot / (2 * bb);
  std::vector<double> out(a.size());
  for (size_t i = 0; i < a.size(); ++i) out[i] = ca * a[i] + cb * b[i];
  return out;
}

// The expected result of tensor `tensor` (`count` elements) over `n` ranks, `localSize` per host.
inline std::vector<double> gpuAdasumReference(int n, int localSize, int tensor, size_t count, double prescale,
                                              double postscale) {
  const int hosts = n / localSize;
  std::vector<std::vector<double>> v(static_cast<size_t>(hosts), std::vector<double>(count, 0.0));
  for (int r = 0; r < n; ++r) {
    for (size_t i = 0; i < count; ++i) v[r / localSize][i] += prescale * adasumInput(r, tensor, i) / localSize;
  }
  for (int step = 1; step < hosts; step *= 2) {
    for (int h = 0; h + step < hosts; h += 2 * step) v[h] = adasumPair(v[h], v[h + step]);
  }
  for (double& x : v[0]) x *= postscale;
  return v[0];
}

inline bool adasumMatches(const std::vector<double>& got, const std::vector<double>& want, DataType dtype,
                          const std::string& what) {
  double largest = 1.0;
  for (double w : want) largest = std::max(largest, std::fabs(w));
  const double tolerance = dtype == DataType::kBFloat16  ? 0.03
                           : dtype == DataType::kFloat16 ? 0.004
                           : dtype == DataType::kFloat32 ? 1e-5
                                                         : 1e-12;
  if (got.size() != want.size()) {
    fprintf(stderr, "%s: %zu elements, expected %zu\n", what.c_str(), got.size(), want.size());
    return false;
  }
  for (size_t i = 0; i < got.size(); ++i) {
    if (!(std::fabs(got[i] - want[i]) <= tolerance * largest)) {
      fprintf(stderr, "%s: element %zu is %.9g, expected %.9g\n", what.c_str(), i, got[i], want[i]);
      return false;
    }
  }
  return true;
}

// How many collectives `backend` ran with `algorithm`.
inline uint64_t adasumCount(const std::string& backend, const std::string& algorithm) {
  uint64_t count = 0;
  for (const auto& c : engineCounters()) {
    if (c.backend == backend && c.algorithm == algorithm) count += c.count;
  }
  return count;
}

// Every floating dtype (one tensor of an odd element count, in place), then a grouped (so fused)
// response of float32 tensors of different sizes with prescale and postscale, each tensor with its
// own coefficients; both ran as `algorithm` of `backend`, the group as one collective. Returns 0
// when every value is right, 5 for a wrong value, 1 otherwise.
inline int gpuAdasumCases(int rank, int n, int localSize, const GpuIo& io, const std::string& backend,
                          const std::string& algorithm) {
  constexpr int kWrong = 5;
  const DataType dtypes[] = {DataType::kFloat16, DataType::kBFloat16, DataType::kFloat32, DataType::kFloat64};
  int tensor = 0;
  for (DataType dtype : dtypes) {
    const size_t count = 37;
    std::vector<double> x(count);
    for (size_t i = 0; i < count; ++i) x[i] = adasumInput(rank, tensor, i);
    TensorView t = io.upload(x, dtype);
    Options o;
    o.name = "adasum." + std::string(dataTypeName(dtype));
    o.op = ReduceOp::kAdasum;
    allreduce(t, t, o);
    if (!adasumMatches(io.download(t), gpuAdasumReference(n, localSize, tensor, count, 1.0, 1.0), dtype, o.name)) {
      return kWrong;
    }
    ++tensor;
  }
  const uint64_t before = adasumCount(backend, algorithm);
  if (before != 4) {
    fprintf(stderr, "rank %d: %s/%s ran %llu times, expected 4\n", rank, backend.c_str(), algorithm.c_str(),
            static_cast<unsigned long long>(before));
    return 1;
  }
  const std::vector<size_t> sizes = {1, 5, 37, 300, 1001};
  std::vector<TensorView> ins, outs;
  for (size_t k = 0; k < sizes.size(); ++k) {
    std::vector<double> x(sizes[k]);
    for (size_t i = 0; i < sizes[k]; ++i) x[i] = adasumInput(rank, tensor + static_cast<int>(k), i);
    ins.push_back(io.upload(x, DataType::kFloat32));
    outs.push_back(io.upload(std::vector<double>(sizes[k], 0.0), DataType::kFloat32));
  }
  Options o;
  o.name = "adasum.fused";
  o.op = ReduceOp::kAdasum;
  o.prescale = 2.0;
  o.postscale = 0.5;
  groupedAllreduceAsync(ins, outs, o)->wait();
  for (size_t k = 0; k < sizes.size(); ++k) {
    const auto want = gpuAdasumReference(n, localSize, tensor + static_cast<int>(k), sizes[k], 2.0, 0.5);
    if (!adasumMatches(io.download(outs[k]), want, DataType::kFloat32, "fused tensor " + std::to_string(k))) {
      return kWrong;
    }
  }
  if (adasumCount(backend, algorithm) != before + 1) {
    fprintf(stderr, "rank %d: the group ran as %llu collectives\n", rank,
            static_cast<unsigned long long>(adasumCount(backend, algorithm) - before));
    return 1;
  }
  return 0;
}

// The refusal every rank must see for Adasum on a set whose hosts do not allow it: the operation
// fails (not hangs) with a MismatchError holding `message`. Returns 0 when it did, 2 otherwise.
inline int gpuAdasumRefused(int rank, const GpuIo& io, const std::string& message) {
  TensorView t = io.upload(std::vector<double>(9, rank + 1.0), DataType::kFloat32);
  Options o;
  o.name = "adasum.refused";
  o.op = ReduceOp::kAdasum;
  try {
    allreduce(t, t, o);
  } catch (const MismatchError& e) {  // as the CPU Adasum's refusals by negotiation
    if (std::string(e.what()).find(message) != std::string::npos) return 0;
    fprintf(stderr, "rank %d: wrong message: %s\n", rank, e.what());
    return 2;
  } catch (const std::exception& e) {
    fprintf(stderr, "rank %d: wrong error: %s\n", rank, e.what());
    return 2;
  }
  fprintf(stderr, "rank %d: Adasum ran where it must be refused\n", rank);
  return 2;
}

}  // namespace hvd::test
