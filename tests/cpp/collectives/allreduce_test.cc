#include <gtest/gtest.h>

#include <cstring>
#include <mutex>

#include "collectives/algorithms.h"
#include "collectives/collectives.h"
#include "rank_threads.h"
#include "test_data.h"

namespace hvd::test {
namespace {

// Runs one allreduce on n ranks and checks: every rank's output is bitwise identical, and equals
// the reference (exact for integers and Min/Max, within rounding for float sums and products).
void checkAllreduce(int n, size_t count, DataType t, ReduceOp op, const RankOptions& options, uint64_t seed = 1) {
  SCOPED_TRACE("n=" + std::to_string(n) + " count=" + std::to_string(count) + " dtype=" + std::string(dataTypeName(t)) +
               " op=" + opName(op) + " algo=" + options.algorithm + (options.shared ? " shared" : " p2p"));
  std::vector<std::vector<uint8_t>> inputs, outputs(n);
  for (int r = 0; r < n; ++r) inputs.push_back(makeInput(t, op, r, count, seed));
  runRanks(n, options, [&](Communicator& comm) {
    std::vector<uint8_t> buf = inputs[comm.rank()];
    collectives::allreduce(comm, buf.data(), count, t, op);
    outputs[comm.rank()] = std::move(buf);
  });
  const size_t bytes = count * dataTypeSize(t);
  for (int r = 1; r < n; ++r) {
    ASSERT_EQ(0, std::memcmp(outputs[0].data(), outputs[r].data(), bytes)) << "rank " << r << " differs from rank 0";
  }
  for (size_t i = 0; i < count; ++i) {
    std::string error = checkReduced(t, op, inputs, outputs[0].data(), i);
    ASSERT_EQ("", error);
  }
}

const std::vector<std::string> kAlgorithms = {"shm_direct", "shm_slices", "recursive_doubling", "ring"};

// Full grid for small counts: every size 1..8, dtype, op and algorithm (shared capacity small
// enough that the shared algorithms run several chunks).
TEST(Allreduce, GridSmallCounts) {
  for (int n = 1; n <= 8; ++n) {
    for (size_t count : {size_t(0), size_t(1), size_t(7), size_t(1000)}) {
      for (DataType t : allDataTypes()) {
        for (ReduceOp op : allReduceOps()) {
          for (const auto& algo : kAlgorithms) {
            RankOptions options;
            options.algorithm = algo;
            options.sharedCapacity = 2048;
            checkAllreduce(n, count, t, op, options);
            if (HasFatalFailure()) return;
          }
        }
      }
    }
  }
}

// 65537 elements (odd, not a multiple of anything): every dtype and op, every algorithm, on a
// power of two and two non-powers of two.
TEST(Allreduce, GridMediumCounts) {
  int rotation = 0;
  for (int n : {2, 3, 5}) {
    for (DataType t : allDataTypes()) {
      for (ReduceOp op : allReduceOps()) {
        for (const auto& algo : kAlgorithms) {
          // Every algorithm on 3 ranks; on 2 and 5 ranks one algorithm per (dtype, op), rotating.
          if (n != 3 && (rotation++ % kAlgorithms.size()) != 0) continue;
          RankOptions options;
          options.algorithm = algo;
          options.sharedCapacity = 64 << 10;
          checkAllreduce(n, 65537, t, op, options);
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

// ~1M elements: float32 and float16 sums over the default choice, shared and point-to-point,
// so chunking/segmenting is exercised with many segments.
TEST(Allreduce, LargeFloat) {
  const size_t count = (size_t(1) << 20) + 3;
  for (int n : {2, 3, 8}) {
    for (DataType t : {DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16}) {
      for (bool shared : {true, false}) {
        if (n == 8 && t == DataType::kBFloat16) continue;
        RankOptions options;
        options.shared = shared;
        options.sharedCapacity = 1 << 20;
        checkAllreduce(n, count, t, ReduceOp::kSum, options, 7);
        if (HasFatalFailure()) return;
      }
    }
  }
  RankOptions options;
  options.shared = false;
  options.algorithm = "recursive_doubling";
  checkAllreduce(6, count, DataType::kInt32, ReduceOp::kSum, options);
}

// The same inputs give the same bits on every run, whatever the thread timing.
TEST(Allreduce, DeterministicAcrossRuns) {
  for (const auto& algo : kAlgorithms) {
    for (DataType t : {DataType::kFloat32, DataType::kFloat16}) {
      const int n = 7;
      const size_t count = 30001;
      std::vector<uint8_t> first;
      for (int run = 0; run < 3; ++run) {
        std::vector<std::vector<uint8_t>> outputs(n);
        RankOptions options;
        options.algorithm = algo;
        options.sharedCapacity = 16 << 10;
        runRanks(n, options, [&](Communicator& comm) {
          std::vector<uint8_t> buf = makeInput(t, ReduceOp::kSum, comm.rank(), count, 99);
          collectives::allreduce(comm, buf.data(), count, t, ReduceOp::kSum);
          outputs[comm.rank()] = std::move(buf);
        });
        for (int r = 1; r < n; ++r) ASSERT_EQ(outputs[0], outputs[r]) << algo << " rank " << r;
        if (run == 0) first = outputs[0];
        ASSERT_EQ(first, outputs[0]) << algo << " run " << run;
      }
    }
  }
}

// Out of place: same bits as in place, input untouched, for every algorithm.
TEST(Allreduce, OutOfPlaceMatchesInPlace) {
  for (const auto& algo : kAlgorithms) {
    for (int n : {1, 2, 3, 4}) {
      for (size_t count : {size_t(1), size_t(1000), size_t(65537)}) {
        for (auto [t, op] :
             {std::pair{DataType::kFloat32, ReduceOp::kSum}, std::pair{DataType::kFloat16, ReduceOp::kMax},
              std::pair{DataType::kInt64, ReduceOp::kProduct}}) {
          SCOPED_TRACE(algo + " n=" + std::to_string(n) + " count=" + std::to_string(count));
          RankOptions options;
          options.algorithm = algo;
          options.sharedCapacity = 8192;
          runRanks(n, options, [&](Communicator& comm) {
            const std::vector<uint8_t> input = makeInput(t, op, comm.rank(), count, 21);
            std::vector<uint8_t> in = input, out(input.size(), 0xcd), inPlace = input;
            collectives::allreduce(comm, in.data(), out.data(), count, t, op);
            collectives::allreduce(comm, inPlace.data(), count, t, op);
            ASSERT_EQ(in, input) << "input modified";
            ASSERT_EQ(0, std::memcmp(out.data(), inPlace.data(), count * dataTypeSize(t)));
          });
          if (HasFatalFailure()) return;
        }
      }
    }
  }
}

// NaNs with different payloads (and signed zeros) meeting on different ranks: every rank still
// ends with the same bits, whatever the algorithm.
TEST(Allreduce, NaNsAndSignedZerosAgreeAcrossRanks) {
  const size_t count = 3000;
  for (const auto& algo : kAlgorithms) {
    for (int n : {2, 3, 5}) {
      for (DataType t : {DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16}) {
        for (ReduceOp op : allReduceOps()) {
          std::vector<std::vector<uint8_t>> outputs(n);
          RankOptions options;
          options.algorithm = algo;
          options.sharedCapacity = 4096;
          runRanks(n, options, [&](Communicator& comm) {
            std::vector<uint8_t> buf = makeInput(t, op, comm.rank(), count, 8);
            for (size_t i = comm.rank() % 3; i < count; i += 3) {
              if (t == DataType::kFloat32) {
                uint32_t bits = 0x7fc00000u | static_cast<uint32_t>(comm.rank() * 977 + i);  // payload per rank
                std::memcpy(buf.data() + i * 4, &bits, 4);
              } else {
                uint16_t bits = t == DataType::kFloat16
                                    ? static_cast<uint16_t>(0x7e00 | ((comm.rank() * 31 + i) & 0x1ff))
                                    : static_cast<uint16_t>(0x7fc0 | ((comm.rank() * 7 + i) & 0x3f));
                std::memcpy(buf.data() + i * 2, &bits, 2);
              }
            }
            for (size_t i = 1; i < count; i += 7) storeFloat(t, buf.data(), i, comm.rank() % 2 ? -0.0 : 0.0);
            collectives::allreduce(comm, buf.data(), count, t, op);
            outputs[comm.rank()] = std::move(buf);
          });
          for (int r = 1; r < n; ++r) {
            ASSERT_EQ(outputs[0], outputs[r]) << algo << " n=" << n << " " << dataTypeName(t) << " " << opName(op);
          }
        }
      }
    }
  }
}

// Many collectives back to back on one communicator (double-buffered shared halves, scratch
// reuse), alternating sizes that pick different algorithms.
TEST(Allreduce, ManyCallsInSequence) {
  const int n = 4;
  RankOptions options;
  options.sharedCapacity = 8 << 10;
  runRanks(n, options, [&](Communicator& comm) {
    for (int iter = 0; iter < 200; ++iter) {
      size_t count = (iter % 3 == 0) ? 5000 : (iter % 3 == 1 ? 3 : 700);
      std::vector<int32_t> buf(count);
      for (size_t i = 0; i < count; ++i) buf[i] = static_cast<int32_t>(comm.rank() * 1000 + i + iter);
      collectives::allreduce(comm, buf.data(), count, DataType::kInt32, ReduceOp::kSum);
      for (size_t i = 0; i < count; ++i) {
        int32_t expected = 0;
        for (int r = 0; r < n; ++r) expected += static_cast<int32_t>(r * 1000 + i + iter);
        ASSERT_EQ(expected, buf[i]) << "iter " << iter << " i " << i;
      }
    }
  });
}

TEST(Allreduce, RejectsUnsupportedOps) {
  RankOptions options;
  runRanks(2, options, [&](Communicator& comm) {
    float x = 1;
    EXPECT_THROW(collectives::allreduce(comm, &x, 1, DataType::kFloat32, ReduceOp::kAverage), InvalidArgument);
    EXPECT_THROW(collectives::allreduce(comm, &x, 1, DataType::kFloat32, ReduceOp::kAdasum), InvalidArgument);
  });
}

TEST(Allreduce, AlgorithmTable) {
  using collectives::chooseAllreduce;
  EXPECT_STREQ("shm_direct", chooseAllreduce("", 1024, 8, true).name);
  EXPECT_STREQ("shm_direct", chooseAllreduce("", 64 << 10, 2, true).name);
  EXPECT_STREQ("shm_slices", chooseAllreduce("", 64 << 10, 3, true).name);  // rule scales with peers
  EXPECT_STREQ("shm_slices", chooseAllreduce("", 64 << 20, 2, true).name);
  EXPECT_STREQ("recursive_doubling", chooseAllreduce("", 1024, 8, false).name);
  EXPECT_STREQ("ring", chooseAllreduce("", 64 << 20, 2, false).name);
  EXPECT_STREQ("ring", chooseAllreduce("ring", 1, 2, true).name);
  // A shared algorithm requested without shared memory falls back to the size rule.
  EXPECT_STREQ("ring", chooseAllreduce("shm_slices", 64 << 20, 2, false).name);
  EXPECT_THROW(chooseAllreduce("no_such_algo", 1, 2, true), InvalidArgument);
  // Shared outputs the members agreed on go first, even over a requested name; without the
  // agreement, or without shared memory, that algorithm is never chosen.
  EXPECT_STREQ("shm_inplace", chooseAllreduce("", 1024, 2, true, false, true).name);
  EXPECT_STREQ("shm_inplace", chooseAllreduce("ring", 64 << 20, 2, true, false, true).name);
  EXPECT_STREQ("shm_slices", chooseAllreduce("shm_inplace", 64 << 20, 2, true).name);
  EXPECT_STREQ("ring", chooseAllreduce("", 64 << 20, 2, false, false, true).name);
  for (const auto& algo : collectives::allreduceAlgorithms()) {
    EXPECT_GT(std::strlen(algo.description), 10u) << algo.name;
    EXPECT_NE(algo.run == nullptr, algo.attempt == nullptr) << algo.name << ": run or attempt, not both";
  }
  for (const auto& algo : collectives::allgatherAlgorithms()) {
    EXPECT_GT(std::strlen(algo.description), 10u) << algo.name;
    EXPECT_NE(algo.run == nullptr, algo.attempt == nullptr) << algo.name << ": run or attempt, not both";
  }
  EXPECT_EQ(std::string("HOROVOD_ALLREDUCE_ALGO"), collectives::allreduceAlgorithmParam().name());
}

}  // namespace
}  // namespace hvd::test
