#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "collectives/collectives.h"
#include "rank_threads.h"
#include "test_data.h"

namespace hvd::test {
namespace {

// Byte b of rank r's contribution: distinct per rank and position.
uint8_t pattern(int rank, size_t i, int salt = 0) { return static_cast<uint8_t>(rank * 37 + i * 11 + salt * 101 + 1); }

std::vector<RankOptions> transportVariants() {
  RankOptions shared;
  shared.sharedCapacity = 4096;  // many shared rounds for the larger cases
  RankOptions p2p;
  p2p.shared = false;
  return {shared, p2p};
}

TEST(Allgatherv, VaryingSizesIncludingZero) {
  for (const auto& options : transportVariants()) {
    for (int n = 1; n <= 8; ++n) {
      for (int pattern_ = 0; pattern_ < 4; ++pattern_) {
        std::vector<size_t> sizes(n);
        std::mt19937 rng(n * 10 + pattern_);
        for (int r = 0; r < n; ++r) {
          if (pattern_ == 0) sizes[r] = 0;
          if (pattern_ == 1) sizes[r] = (r % 2 == 0) ? 0 : 5 + r;
          if (pattern_ == 2) sizes[r] = rng() % 20000;
          if (pattern_ == 3) sizes[r] = r == n - 1 ? 100000 : 1;
        }
        SCOPED_TRACE("n=" + std::to_string(n) + " pattern=" + std::to_string(pattern_) +
                     (options.shared ? " shared" : " p2p"));
        size_t total = 0;
        for (size_t s : sizes) total += s;
        runRanks(n, options, [&](Communicator& comm) {
          const int r = comm.rank();
          std::vector<uint8_t> in(sizes[r]);
          for (size_t i = 0; i < in.size(); ++i) in[i] = pattern(r, i);
          std::vector<uint8_t> out(total + 1, 0xee);
          collectives::allgatherv(comm, in.data(), out.data(), sizes);
          size_t offset = 0;
          for (int j = 0; j < n; ++j) {
            for (size_t i = 0; i < sizes[j]; ++i)
              ASSERT_EQ(out[offset + i], pattern(j, i)) << "block " << j << " i " << i;
            offset += sizes[j];
          }
          ASSERT_EQ(out[total], 0xee) << "wrote past the end";
          // In place: the input already sits at this rank's offset in the output.
          std::vector<uint8_t> inplace(total + 1, 0);
          size_t mine = 0;
          for (int j = 0; j < r; ++j) mine += sizes[j];
          if (!in.empty()) std::memcpy(inplace.data() + mine, in.data(), in.size());
          collectives::allgatherv(comm, inplace.data() + mine, inplace.data(), sizes);
          ASSERT_EQ(0, std::memcmp(inplace.data(), out.data(), total));
        });
        if (HasFatalFailure()) return;
      }
    }
  }
}

TEST(Broadcast, EveryRootAndSize) {
  for (const auto& options : transportVariants()) {
    for (int n = 1; n <= 8; ++n) {
      for (size_t bytes : {size_t(0), size_t(1), size_t(1000), size_t(300000), size_t(3u << 20) + 5}) {
        if (bytes > 300000 && n != 3) continue;  // the pipelined chain: one odd size is enough
        if (bytes == 300000 && n > 5) continue;
        SCOPED_TRACE("n=" + std::to_string(n) + " bytes=" + std::to_string(bytes) +
                     (options.shared ? " shared" : " p2p"));
        runRanks(n, options, [&](Communicator& comm) {
          std::vector<uint8_t> buf(bytes);
          for (int root = 0; root < n; ++root) {
            for (size_t i = 0; i < bytes; ++i) buf[i] = pattern(comm.rank(), i, root);
            collectives::broadcast(comm, buf.data(), bytes, root);
            for (size_t i = 0; i < bytes; ++i)
              ASSERT_EQ(buf[i], pattern(root, i, root)) << "root " << root << " i " << i;
          }
        });
        if (HasFatalFailure()) return;
      }
    }
  }
}

TEST(Broadcast, RejectsBadRoot) {
  RankOptions options;
  runRanks(2, options, [&](Communicator& comm) {
    uint8_t x = 0;
    EXPECT_THROW(collectives::broadcast(comm, &x, 1, 2), InvalidArgument);
    EXPECT_THROW(collectives::broadcast(comm, &x, 1, -1), InvalidArgument);
  });
}

TEST(Alltoallv, RandomSplitsIncludingZeros) {
  for (const auto& options : transportVariants()) {
    for (int n = 1; n <= 8; ++n) {
      for (int trial = 0; trial < 3; ++trial) {
        // bytes[from][to], shared by all ranks.
        std::vector<std::vector<size_t>> matrix(n, std::vector<size_t>(n));
        std::mt19937 rng(n * 100 + trial);
        for (auto& row : matrix) {
          for (auto& v : row) v = (rng() % 3 == 0) ? 0 : rng() % (trial == 2 ? 50000 : 100);
        }
        SCOPED_TRACE("n=" + std::to_string(n) + " trial=" + std::to_string(trial));
        runRanks(n, options, [&](Communicator& comm) {
          const int r = comm.rank();
          std::vector<size_t> sendBytes = matrix[r], recvBytes(n);
          for (int j = 0; j < n; ++j) recvBytes[j] = matrix[j][r];
          std::vector<uint8_t> in;
          for (int to = 0; to < n; ++to) {
            for (size_t i = 0; i < sendBytes[to]; ++i) in.push_back(pattern(r, i, to));
          }
          size_t total = 0;
          for (size_t v : recvBytes) total += v;
          std::vector<uint8_t> out(total);
          collectives::alltoallv(comm, in.data(), sendBytes, out.data(), recvBytes);
          size_t offset = 0;
          for (int from = 0; from < n; ++from) {
            for (size_t i = 0; i < recvBytes[from]; ++i) {
              ASSERT_EQ(out[offset + i], pattern(from, i, r)) << "from " << from << " i " << i;
            }
            offset += recvBytes[from];
          }
        });
        if (HasFatalFailure()) return;
      }
    }
  }
}

// Horovod's partition of d rows over n ranks: the first d % n ranks get one more.
std::vector<size_t> specPartition(size_t rows, int n, size_t rowElems) {
  std::vector<size_t> counts(n);
  for (int r = 0; r < n; ++r) counts[r] = (rows / n + (static_cast<size_t>(r) < rows % n ? 1 : 0)) * rowElems;
  return counts;
}

TEST(Reducescatter, SpecPartition) {
  for (const auto& options : transportVariants()) {
    for (int n = 1; n <= 8; ++n) {
      for (size_t rows : {size_t(0), size_t(1), size_t(5), size_t(17), size_t(1000)}) {
        for (DataType t : {DataType::kFloat32, DataType::kInt32, DataType::kFloat16, DataType::kBFloat16,
                           DataType::kUInt8, DataType::kFloat64}) {
          for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
            const size_t rowElems = 3;
            std::vector<size_t> counts = specPartition(rows, n, rowElems);
            const size_t total = rows * rowElems, elem = dataTypeSize(t);
            SCOPED_TRACE("n=" + std::to_string(n) + " rows=" + std::to_string(rows) + " " +
                         std::string(dataTypeName(t)) + " " + opName(op) + (options.shared ? " shared" : " p2p"));
            std::vector<std::vector<uint8_t>> inputs;
            for (int r = 0; r < n; ++r) inputs.push_back(makeInput(t, op, r, total, 3));
            std::vector<std::vector<uint8_t>> outputs(n);
            runRanks(n, options, [&](Communicator& comm) {
              std::vector<uint8_t> out(counts[comm.rank()] * elem + 1);
              collectives::reducescatter(comm, inputs[comm.rank()].data(), out.data(), counts, t, op);
              outputs[comm.rank()] = std::move(out);
            });
            size_t start = 0;
            for (int r = 0; r < n; ++r) {
              for (size_t i = 0; i < counts[r]; ++i) {
                // checkReduced indexes inputs by global element; shift the result pointer.
                const uint8_t* shifted = outputs[r].data() - start * elem;
                ASSERT_EQ("", checkReduced(t, op, inputs, shifted, start + i)) << "rank " << r;
              }
              start += counts[r];
            }
          }
        }
      }
    }
  }
}

TEST(Reducescatter, LargeAndInPlace) {
  for (const auto& options : transportVariants()) {
    const int n = 3;
    const size_t total = (size_t(3) << 20) / 4 + 7;  // several ring rounds / shared rounds
    std::vector<size_t> counts = {total / 3 + 1, total / 3 + 1, total - 2 * (total / 3 + 1)};
    runRanks(n, options, [&](Communicator& comm) {
      std::vector<int32_t> in(total);
      for (size_t i = 0; i < total; ++i) in[i] = static_cast<int32_t>(i * (comm.rank() + 1));
      size_t start = 0;
      for (int j = 0; j < comm.rank(); ++j) start += counts[j];
      // In place: out is this rank's block of in.
      collectives::reducescatter(comm, in.data(), in.data() + start, counts, DataType::kInt32, ReduceOp::kSum);
      for (size_t i = 0; i < counts[comm.rank()]; ++i) {
        ASSERT_EQ(in[start + i], static_cast<int32_t>((start + i) * 6)) << i;
      }
    });
  }
}

TEST(Barrier, AllRanksArriveBeforeAnyLeaves) {
  for (const auto& options : transportVariants()) {
    for (int n = 1; n <= 8; ++n) {
      std::atomic<int> arrived{0};
      runRanks(n, options, [&](Communicator& comm) {
        for (int round = 1; round <= 20; ++round) {
          if (comm.rank() == round % n) std::this_thread::sleep_for(std::chrono::microseconds(200));
          arrived.fetch_add(1);
          collectives::barrier(comm);
          ASSERT_GE(arrived.load(), round * n) << "left round " << round << " early";
          collectives::barrier(comm);  // nobody starts the next round before all checked
        }
      });
    }
  }
}

// Collectives of different kinds back to back share the double-buffered shared halves.
TEST(Mixed, InterleavedCollectives) {
  RankOptions options;
  options.sharedCapacity = 1024;
  const int n = 5;
  runRanks(n, options, [&](Communicator& comm) {
    for (int iter = 0; iter < 50; ++iter) {
      std::vector<float> v(333, static_cast<float>(comm.rank() + iter));
      collectives::allreduce(comm, v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum);
      ASSERT_EQ(v[332], static_cast<float>(10 + 5 * iter));
      std::vector<uint8_t> b(777, static_cast<uint8_t>(comm.rank() == iter % n ? iter : 0));
      collectives::broadcast(comm, b.data(), b.size(), iter % n);
      ASSERT_EQ(b[776], static_cast<uint8_t>(iter));
      std::vector<size_t> sizes(n, 100);
      std::vector<uint8_t> g(100 * n), mine(100, static_cast<uint8_t>(comm.rank() + iter));
      collectives::allgatherv(comm, mine.data(), g.data(), sizes);
      for (int j = 0; j < n; ++j) ASSERT_EQ(g[j * 100 + 99], static_cast<uint8_t>(j + iter));
      std::vector<size_t> counts(n, 50);
      std::vector<int32_t> in(50 * n, comm.rank() + iter), out(50);
      collectives::reducescatter(comm, in.data(), out.data(), counts, DataType::kInt32, ReduceOp::kSum);
      ASSERT_EQ(out[49], 10 + 5 * iter);
      collectives::barrier(comm);
    }
  });
}

}  // namespace
}  // namespace hvd::test
