// Adasum over a Communicator (collectives/adasum.h), ranks as threads: the identities (equal
// vectors -> that vector, orthogonal vectors -> their sum, a zero vector adds nothing), random
// fused tensors against an independent reference (the pairwise formula over the rank tree, in
// double, per tensor), bitwise-equal results on every rank, extreme magnitudes, and the refusals.
#include "collectives/adasum.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "collectives/adasum_hosts.h"
#include "collectives/collectives.h"
#include "horovod/errors.h"
#include "rank_threads.h"
#include "test_data.h"

namespace hvd::test {
namespace {

const std::vector<DataType> kFloatTypes = {DataType::kFloat16, DataType::kBFloat16, DataType::kFloat32,
                                           DataType::kFloat64};

using Vector = std::vector<double>;

// adasum(a, b) as the formula reads, in double (coefficient 1 for |x|^2 < sqrt(DBL_MIN)).
Vector pairReference(const Vector& a, const Vector& b) {
  double dot = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size(); ++i) dot += a[i] * b[i], aa += a[i] * a[i], bb += b[i] * b[i];
  const double tiny = std::sqrt(2.2250738585072014e-308);
  const double ca = aa < tiny ? 1.0 : 1.0 - dot / (2 * aa), cb = bb < tiny ? 1.0 : 1.0 - dot / (2 * bb);
  Vector out(a.size());
  for (size_t i = 0; i < a.size(); ++i) out[i] = ca * a[i] + cb * b[i];
  return out;
}

// The rank tree ((x0 + x1) + (x2 + x3)) + ..., one tensor at a time.
Vector treeReference(std::vector<Vector> v) {
  for (size_t level = 1; level < v.size(); level *= 2) {
    for (size_t i = 0; i + level < v.size(); i += 2 * level) v[i] = pairReference(v[i], v[i + level]);
  }
  return v[0];
}

struct AdasumRun {
  std::vector<std::vector<uint8_t>> inputs, outputs;
};

// Runs adasum on n ranks over buffers made by fill(rank, element index) and returns them.
template <typename Fill>
AdasumRun runAdasum(int n, const std::vector<size_t>& counts, DataType t, Fill fill) {
  size_t total = 0;
  for (size_t c : counts) total += c;
  AdasumRun run;
  run.outputs.resize(n);
  for (int r = 0; r < n; ++r) {
    std::vector<uint8_t> buf(total * dataTypeSize(t));
    for (size_t i = 0; i < total; ++i) storeFloat(t, buf.data(), i, fill(r, i));
    run.inputs.push_back(std::move(buf));
  }
  runRanks(n, {}, [&](Communicator& comm) {
    std::vector<uint8_t> buf = run.inputs[comm.rank()], scratch;
    collectives::CommunicatorExchange peers(comm);
    collectives::adasum(peers, buf.data(), counts, t, scratch);
    run.outputs[comm.rank()] = std::move(buf);
  });
  return run;
}

double tolerance(DataType t) {
  switch (t) {
    case DataType::kFloat16: return 1e-2;
    case DataType::kBFloat16: return 5e-2;
    case DataType::kFloat32: return 1e-5;
    default: return 1e-12;
  }
}

// Every rank's output is bitwise rank 0's, and rank 0's matches the reference tensor by tensor
// (relative to the tensor's largest input).
void expectMatchesReference(const AdasumRun& run, const std::vector<size_t>& counts, DataType t) {
  const int n = static_cast<int>(run.inputs.size());
  for (int r = 1; r < n; ++r) ASSERT_EQ(run.outputs[0], run.outputs[r]) << "rank " << r << " differs from rank 0";
  size_t offset = 0;
  for (size_t k = 0; k < counts.size(); ++k) {
    std::vector<Vector> v(n, Vector(counts[k]));
    double scale = 0;
    for (int r = 0; r < n; ++r) {
      for (size_t i = 0; i < counts[k]; ++i) {
        v[r][i] = loadFloat(t, run.inputs[r].data(), offset + i);
        scale = std::max(scale, std::fabs(v[r][i]));
      }
    }
    const Vector expected = treeReference(v);
    for (size_t i = 0; i < counts[k]; ++i) {
      const double got = loadFloat(t, run.outputs[0].data(), offset + i);
      ASSERT_NEAR(expected[i], got, tolerance(t) * scale)
          << "tensor " << k << " element " << i << " dtype " << dataTypeName(t) << " ranks " << n;
    }
    offset += counts[k];
  }
}

TEST(Adasum, EqualVectorsGiveThatVector) {
  for (int n : {1, 2, 4, 8}) {
    for (DataType t : kFloatTypes) {
      const std::vector<size_t> counts = {5, 100};
      AdasumRun run = runAdasum(n, counts, t, [](int, size_t i) { return 0.25 * static_cast<double>(i % 13) - 1.0; });
      for (int r = 0; r < n; ++r) EXPECT_EQ(run.inputs[0], run.outputs[r]) << "n=" << n << " " << dataTypeName(t);
    }
  }
}

TEST(Adasum, OrthogonalVectorsGiveTheirSum) {
  for (int n : {2, 4, 8}) {
    for (DataType t : kFloatTypes) {
      // Rank r is non-zero only on the elements i with i % n == r: every subtree's vectors are
      // orthogonal to every other's, so the tree is the plain sum.
      const std::vector<size_t> counts = {64, 3, 33};
      AdasumRun run = runAdasum(n, counts, t, [n](int r, size_t i) {
        return static_cast<int>(i % n) == r ? 1.0 + static_cast<double>(i % 7) : 0.0;
      });
      for (size_t i = 0; i < 100; ++i) {
        double sum = 0;
        for (int r = 0; r < n; ++r) sum += loadFloat(t, run.inputs[r].data(), i);
        ASSERT_EQ(sum, loadFloat(t, run.outputs[0].data(), i)) << "n=" << n << " " << dataTypeName(t) << " i=" << i;
      }
    }
  }
}

TEST(Adasum, RandomFusedTensorsMatchTheTreeOfPairs) {
  for (int n : {2, 4, 8}) {
    for (DataType t : kFloatTypes) {
      // Tensors of 0 and 1 elements, and ones split unevenly by the halving.
      const std::vector<size_t> counts = {1, 7, 0, 1000, 33, 4097};
      std::mt19937_64 gen(static_cast<uint64_t>(n) * 31 + static_cast<uint64_t>(t));
      std::vector<std::vector<double>> values(n);
      for (auto& v : values) {
        std::normal_distribution<double> normal(0.5, 1.0);  // correlated across ranks via the mean
        for (size_t i = 0; i < 5138; ++i) v.push_back(normal(gen));
      }
      AdasumRun run = runAdasum(n, counts, t, [&](int r, size_t i) { return values[r][i]; });
      expectMatchesReference(run, counts, t);
      if (HasFatalFailure()) return;
    }
  }
}

TEST(Adasum, ZeroVectorsProduceNoNaN) {
  for (DataType t : kFloatTypes) {
    // All zero: zero.
    AdasumRun zeros = runAdasum(4, {10}, t, [](int, size_t) { return 0.0; });
    for (size_t i = 0; i < 10; ++i) EXPECT_EQ(0.0, loadFloat(t, zeros.outputs[0].data(), i));
    // One rank (a joined one, say) contributes zeros: the others' combination is unchanged.
    AdasumRun one = runAdasum(2, {10}, t, [](int r, size_t i) { return r == 1 ? 0.0 : 1.0 + static_cast<double>(i); });
    EXPECT_EQ(one.inputs[0], one.outputs[0]) << dataTypeName(t);
  }
}

TEST(Adasum, ExtremeMagnitudesStayFinite) {
  // Values whose squares overflow or underflow float64 (and float32 near its limits): the result
  // is finite and equals the formula (computed here on scaled copies). Squared norms below
  // sqrt(DBL_MIN) (1e-300 values) take coefficient 1, as in Horovod: the vectors are summed.
  struct Case {
    DataType t;
    double magnitude;
    bool summed = false;
  };
  for (const Case& c :
       {Case{DataType::kFloat64, 1e300}, Case{DataType::kFloat64, 1e-300, true}, Case{DataType::kFloat64, 1e-70},
        Case{DataType::kFloat32, 3e38}, Case{DataType::kFloat32, 1e-38}, Case{DataType::kFloat16, 60000.0},
        Case{DataType::kFloat16, 1e-4}, Case{DataType::kBFloat16, 1e38}}) {
    for (int n : {2, 4}) {
      AdasumRun run = runAdasum(n, {257}, c.t, [&](int r, size_t i) {
        return c.magnitude * (0.5 + 0.25 * static_cast<double>((i * 7 + static_cast<size_t>(r) * 3) % 5) / 4.0);
      });
      std::vector<Vector> scaled(n, Vector(257));
      for (int r = 0; r < n; ++r) {
        for (size_t i = 0; i < 257; ++i) scaled[r][i] = loadFloat(c.t, run.inputs[r].data(), i) / c.magnitude;
      }
      Vector expected = treeReference(scaled);
      if (c.summed) {
        for (size_t i = 0; i < 257; ++i) {
          expected[i] = 0;
          for (int r = 0; r < n; ++r) expected[i] += scaled[r][i];
        }
      }
      for (size_t i = 0; i < 257; ++i) {
        const double got = loadFloat(c.t, run.outputs[0].data(), i);
        ASSERT_TRUE(std::isfinite(got)) << dataTypeName(c.t) << " " << c.magnitude << " element " << i;
        ASSERT_NEAR(expected[i], got / c.magnitude, 4 * tolerance(c.t))
            << dataTypeName(c.t) << " " << c.magnitude << " element " << i;
      }
    }
  }
}

// Vectors split over a ShardGroup (the GPU Adasum's host stage): 8 ranks as 4 "hosts" of 2 (ranks
// 2h, 2h + 1); rank 2h + i holds shard i of host h's vector (adasumShardCounts: one tensor wholly
// in each shard, one across both, padding) and runs Adasum with shard i of the other hosts. Every
// tensor gets the coefficients of the whole tensor: the shards put together are the tree of pairs
// over the hosts' whole vectors (per-shard coefficients, without the group, are not).
TEST(Adasum, ShardsOfOneVectorGetTheWholeTensorsCoefficients) {
  class ShardPeers final : public collectives::PairExchange {
   public:
    ShardPeers(Communicator& comm, int shard) : comm_(comm), shard_(shard) {}
    int rank() const override { return comm_.rank() / 2; }
    int size() const override { return comm_.size() / 2; }
    void sendRecv(int peer, const void* send, size_t sendBytes, void* recv, size_t recvBytes) override {
      comm_.sendRecv(2 * peer + shard_, send, sendBytes, 2 * peer + shard_, recv, recvBytes, comm_.deadline());
    }

   private:
    Communicator& comm_;
    int shard_;
  };
  class HostPair final : public collectives::ShardGroup {
   public:
    explicit HostPair(Communicator& comm) : local_(comm.subset({comm.rank() / 2 * 2, comm.rank() / 2 * 2 + 1})) {}
    int size() const override { return 2; }
    void allgather(const double* mine, size_t count, double* all) override {
      collectives::allgatherv(local_, mine, all, std::vector<size_t>(2, count * sizeof(double)));
    }

   private:
    Communicator& local_;
  };
  constexpr int kHosts = 4;
  const std::vector<size_t> counts = {3, 10, 1, 7};  // 21 elements: shards of 11, one padded
  const size_t shard = collectives::adasumShardLength(21, 2);
  for (DataType t : {DataType::kFloat32, DataType::kFloat64}) {
    std::mt19937_64 gen(static_cast<uint64_t>(t));
    std::normal_distribution<double> normal(0.3, 1.0);
    std::vector<Vector> hostVectors(kHosts, Vector(2 * shard, 0.0));
    for (auto& v : hostVectors) {
      for (size_t i = 0; i < 21; ++i) v[i] = static_cast<double>(static_cast<float>(normal(gen)));
    }
    std::vector<std::vector<uint8_t>> outputs(2 * kHosts);
    runRanks(2 * kHosts, {}, [&](Communicator& comm) {
      const int host = comm.rank() / 2, index = comm.rank() % 2;
      std::vector<uint8_t> buf(shard * dataTypeSize(t)), scratch;
      for (size_t i = 0; i < shard; ++i) storeFloat(t, buf.data(), i, hostVectors[host][index * shard + i]);
      ShardPeers peers(comm, index);
      HostPair group(comm);
      collectives::adasum(peers, buf.data(), collectives::adasumShardCounts(counts, shard, index), t, scratch, &group);
      outputs[comm.rank()] = std::move(buf);
    });
    size_t offset = 0;
    for (size_t k = 0; k < counts.size(); ++k) {
      std::vector<Vector> v(kHosts);
      for (int h = 0; h < kHosts; ++h)
        v[h].assign(hostVectors[h].begin() + offset, hostVectors[h].begin() + offset + counts[k]);
      const Vector expected = treeReference(v);
      for (size_t i = 0; i < counts[k]; ++i) {
        const size_t at = offset + i;
        for (int h = 0; h < kHosts; ++h) {  // every host's holder of that element has the result
          const double got = loadFloat(t, outputs[2 * h + static_cast<int>(at / shard)].data(), at % shard);
          ASSERT_NEAR(expected[i], got, tolerance(t) * 4) << "tensor " << k << " element " << i << " host " << h;
        }
      }
      offset += counts[k];
    }
  }
}

TEST(Adasum, RefusesOtherRankCountsAndTypes) {
  EXPECT_FALSE(collectives::adasumRankCountSupported(3));
  EXPECT_TRUE(collectives::adasumRankCountSupported(8));
  EXPECT_THROW(runAdasum(3, {4}, DataType::kFloat32, [](int, size_t) { return 1.0; }), InvalidArgument);
  runRanks(2, {}, [&](Communicator& comm) {
    std::vector<int32_t> buf(4, 1);
    std::vector<uint8_t> scratch;
    collectives::CommunicatorExchange peers(comm);
    EXPECT_THROW(collectives::adasum(peers, buf.data(), {4}, DataType::kInt32, scratch), InvalidArgument);
  });
}

}  // namespace
}  // namespace hvd::test
