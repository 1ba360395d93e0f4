// The collectives over the real shared-memory transport (ranks as threads, MemoryStore): the
// shared-space algorithms on ShmSpace, and the point-to-point ones streaming through bounded
// rings (messages larger than the ring).
#include <gtest/gtest.h>

#include <unistd.h>

#include <barrier>
#include <cstring>
#include <numeric>
#include <thread>

#include "collectives/collectives.h"
#include "collectives/reduce.h"
#include "collectives/stream_copy.h"
#include "store/memory_store.h"
#include "test_data.h"
#include "transport/shm/shm_transport.h"

namespace hvd::test {
namespace {

void runShmRanks(int n, const std::string& algorithm, const std::function<void(Communicator&)>& body) {
  static std::atomic<int> counter{0};
  auto store = std::make_shared<MemoryStore>();
  std::string job = "coll-shm-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
  std::barrier done(n);
  std::vector<std::exception_ptr> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        TransportContext context;
        context.rank = r;
        context.size = n;
        context.hostOf.assign(n, "host");
        context.store = store;
        context.jobId = job;
        context.timeout = std::chrono::milliseconds(20000);
        shm::ShmOptions options;
        options.ringBytes = 64 << 10;  // far below the 1 MiB ring segments: messages stream
        options.mailboxBytes = 16 << 10;
        options.spaceBytes = 256 << 10;
        shm::ShmTransport transport(context, options);
        std::vector<int> members(n);
        std::iota(members.begin(), members.end(), 0);
        Communicator comm(transport, members, std::chrono::milliseconds(20000));
        comm.setAllreduceAlgorithm(algorithm);
        body(comm);
        done.arrive_and_wait();  // nobody tears down its segments while others still work
      } catch (...) {
        errors[r] = std::current_exception();
        done.arrive_and_drop();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

TEST(ShmTransportCollectives, AllreduceEveryAlgorithm) {
  for (const char* algo : {"shm_direct", "shm_slices", "recursive_doubling", "ring"}) {
    for (int n : {2, 3, 4}) {
      for (size_t count : {size_t(1), size_t(1000), size_t(300001)}) {
        SCOPED_TRACE(std::string(algo) + " n=" + std::to_string(n) + " count=" + std::to_string(count));
        std::vector<std::vector<uint8_t>> inputs, outputs(n);
        for (int r = 0; r < n; ++r) inputs.push_back(makeInput(DataType::kFloat32, ReduceOp::kSum, r, count, 4));
        runShmRanks(n, algo, [&](Communicator& comm) {
          std::vector<uint8_t> out(inputs[comm.rank()].size());
          collectives::allreduce(comm, inputs[comm.rank()].data(), out.data(), count, DataType::kFloat32,
                                 ReduceOp::kSum);
          outputs[comm.rank()] = std::move(out);
        });
        for (int r = 1; r < n; ++r) ASSERT_EQ(outputs[0], outputs[r]) << "rank " << r;
        for (size_t i = 0; i < count; ++i) {
          ASSERT_EQ("", checkReduced(DataType::kFloat32, ReduceOp::kSum, inputs, outputs[0].data(), i));
        }
      }
    }
  }
}

// A fused allreduce over pieces (collectives::allreducePieces): the shared-memory algorithms run
// over the pieces where they lie, bitwise equal to the allreduce of their concatenation; the
// others decline (false) and leave every output untouched. Pieces of zero elements, pieces that
// straddle the algorithms' tiles and chunks (the shared half is 128 KiB here), in place and not.
TEST(ShmTransportCollectives, AllreducePiecesMatchesConcatenation) {
  const std::vector<size_t> counts = {0, 1, 5000, 0, 33000, 7, 70001, 4096, 0, 12345};
  const size_t total = std::accumulate(counts.begin(), counts.end(), size_t(0));
  for (const char* algo : {"shm_direct", "shm_slices", "ring", ""}) {
    for (int n : {2, 3}) {
      SCOPED_TRACE(std::string("algo=") + algo + " n=" + std::to_string(n));
      std::vector<std::vector<uint8_t>> inputs;
      for (int r = 0; r < n; ++r) inputs.push_back(makeInput(DataType::kFloat32, ReduceOp::kSum, r, total, 9));
      std::vector<std::vector<uint8_t>> expected(n), gotOut(n), gotInPlace(n);
      std::vector<int> taken(n, -1);
      runShmRanks(n, algo, [&](Communicator& comm) {
        const int r = comm.rank();
        expected[r].resize(total * 4);
        collectives::allreduce(comm, inputs[r].data(), expected[r].data(), total, DataType::kFloat32, ReduceOp::kSum);
        // Every piece in its own allocation, outputs pre-filled to see what is written.
        std::vector<std::vector<float>> ins, outs;
        std::vector<collectives::Piece> pieces;
        size_t at = 0;
        for (size_t c : counts) {
          ins.emplace_back(c);
          if (c > 0) std::memcpy(ins.back().data(), inputs[r].data() + at * 4, c * 4);  // empty: data() is null
          outs.emplace_back(c, -1.0f);
          at += c;
        }
        for (size_t i = 0; i < counts.size(); ++i) pieces.push_back({ins[i].data(), outs[i].data(), counts[i]});
        const bool ran = collectives::allreducePieces(comm, pieces, DataType::kFloat32, ReduceOp::kSum);
        taken[r] = ran;
        for (auto& o : outs) gotOut[r].insert(gotOut[r].end(), (uint8_t*)o.data(), (uint8_t*)(o.data() + o.size()));
        for (size_t i = 0; i < counts.size(); ++i) pieces[i] = {ins[i].data(), ins[i].data(), counts[i]};
        if (ran) {
          ASSERT_TRUE(collectives::allreducePieces(comm, pieces, DataType::kFloat32, ReduceOp::kSum));
        }
        for (auto& o : ins)
          gotInPlace[r].insert(gotInPlace[r].end(), (uint8_t*)o.data(), (uint8_t*)(o.data() + o.size()));
      });
      const bool shared = std::string(algo) != "ring";
      for (int r = 0; r < n; ++r) {
        ASSERT_EQ(taken[r], shared ? 1 : 0) << "rank " << r;
        if (!shared) {
          std::vector<float> untouched(total, -1.0f);
          ASSERT_EQ(0, std::memcmp(gotOut[r].data(), untouched.data(), total * 4))
              << "declined, yet outputs were written";
          continue;
        }
        ASSERT_EQ(gotOut[r], expected[0]) << "rank " << r << ": pieces differ from the concatenation";
        ASSERT_EQ(gotInPlace[r], expected[0]) << "rank " << r << ": in-place pieces differ";
      }
    }
  }
}

// A postscale (Average = Sum with 1/n) gives bitwise what scaleBuffer() makes of the sum, whether
// the algorithm folds it into its reduction (the shared-memory ones) or the dispatcher scales
// afterwards; contiguous, in place and over pieces; and for outputs large enough to be written
// with streaming stores (collectives/stream_copy.h). A dtype that cannot be scaled fails on every
// rank before anything is sent: the next allreduce still works.
TEST(ShmTransportCollectives, AllreducePostscaleEqualsScaledSum) {
  const double post = 1.0 / 3.0;
  auto check = [&](const char* algo, DataType t, int n, size_t count) {
    SCOPED_TRACE(std::string(algo) + " " + std::string(dataTypeName(t)) + " n=" + std::to_string(n) +
                 " count=" + std::to_string(count));
    const size_t bytes = count * dataTypeSize(t);
    std::vector<std::vector<uint8_t>> inputs;
    for (int r = 0; r < n; ++r) inputs.push_back(makeInput(t, ReduceOp::kSum, r, count, 5));
    std::vector<std::string> failures(n);
    runShmRanks(n, algo, [&](Communicator& comm) {
      const int r = comm.rank();
      std::vector<uint8_t> expected(bytes), out(bytes), inPlace(inputs[r].begin(), inputs[r].begin() + bytes);
      collectives::allreduce(comm, inputs[r].data(), expected.data(), count, t, ReduceOp::kSum);
      scaleBuffer(expected.data(), count, t, post);
      collectives::allreduce(comm, inputs[r].data(), out.data(), count, t, ReduceOp::kSum, post);
      collectives::allreduce(comm, inPlace.data(), count, t, ReduceOp::kSum, post);
      std::vector<uint8_t> viaPieces(bytes);
      const size_t cut = count / 3 + 1;
      std::vector<collectives::Piece> pieces = {
          {inputs[r].data(), viaPieces.data(), cut},
          {inputs[r].data() + cut * dataTypeSize(t), viaPieces.data() + cut * dataTypeSize(t), count - cut}};
      const bool ran = collectives::allreducePieces(comm, pieces, t, ReduceOp::kSum, post);
      if (out != expected) failures[r] += " out-of-place";
      if (inPlace != expected) failures[r] += " in-place";
      if (ran && viaPieces != expected) failures[r] += " pieces";
    });
    for (int r = 0; r < n; ++r) ASSERT_EQ(failures[r], "") << "rank " << r << " differs from scaleBuffer(sum)";
  };
  for (const char* algo : {"shm_direct", "shm_slices", "recursive_doubling", "ring"}) {
    for (DataType t :
         {DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16, DataType::kInt32, DataType::kFloat64}) {
      check(algo, t, 3, 70001);  // several chunks and tiles of the 128 KiB shared half
      if (HasFatalFailure()) return;
    }
  }
  // Streamed outputs (>= 8 MiB), an odd count so the last slice ends off a vector boundary.
  for (int n : {2, 3}) {
    for (DataType t : {DataType::kFloat32, DataType::kBFloat16}) {
      check("shm_slices", t, n, collectives::kStreamOutputBytes / dataTypeSize(t) + 4099);
      if (HasFatalFailure()) return;
    }
  }
  runShmRanks(2, "", [&](Communicator& comm) {
    std::vector<uint8_t> flags(1000, 1);
    try {
      collectives::allreduce(comm, flags.data(), flags.size(), DataType::kBool, ReduceOp::kSum, 0.5);
      ADD_FAILURE() << "a bool postscale did not throw";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("not supported by ScaleBufferCPUImpl"), std::string::npos) << e.what();
    }
    std::vector<float> x(1000, float(comm.rank() + 1));
    collectives::allreduce(comm, x.data(), x.size(), DataType::kFloat32, ReduceOp::kSum, 0.5);
    ASSERT_EQ(x[999], 1.5f);
  });
}

TEST(ShmTransportCollectives, OtherCollectives) {
  const int n = 3;
  runShmRanks(n, "", [&](Communicator& comm) {
    const int r = comm.rank();
    // Allgatherv larger than the shared half: several rounds.
    std::vector<size_t> sizes = {200000, 0, 333333};
    std::vector<uint8_t> mine(sizes[r], static_cast<uint8_t>(r + 1)), all(533333);
    collectives::allgatherv(comm, mine.data(), all.data(), sizes);
    ASSERT_EQ(all[0], 1);
    ASSERT_EQ(all[199999], 1);
    ASSERT_EQ(all[200000], 3);
    ASSERT_EQ(all[533332], 3);
    // Broadcast from each root.
    for (int root = 0; root < n; ++root) {
      std::vector<uint8_t> b(500000, static_cast<uint8_t>(r == root ? 7 + root : 0));
      collectives::broadcast(comm, b.data(), b.size(), root);
      ASSERT_EQ(b[0], 7 + root);
      ASSERT_EQ(b[499999], 7 + root);
    }
    // Alltoallv with a 1 MiB block (streams through the 64 KiB ring).
    std::vector<size_t> send(n, 1 << 20), recv(n, 1 << 20);
    std::vector<uint8_t> in(3 << 20), out(3 << 20);
    for (int p = 0; p < n; ++p) std::memset(in.data() + (size_t(p) << 20), 10 * r + p, 1 << 20);
    collectives::alltoallv(comm, in.data(), send, out.data(), recv);
    for (int p = 0; p < n; ++p) ASSERT_EQ(out[(size_t(p) << 20) + 12345], 10 * p + r);
    // Reducescatter with the spec partition.
    std::vector<size_t> counts = {100001, 100000, 100000};
    std::vector<int32_t> x(300001, r + 1), y(counts[r]);
    collectives::reducescatter(comm, x.data(), y.data(), counts, DataType::kInt32, ReduceOp::kSum);
    ASSERT_EQ(y[0], 6);
    ASSERT_EQ(y[counts[r] - 1], 6);
    collectives::barrier(comm);
  });
}

// Outputs of >= 8 MiB take the streaming-store copies (collectives/stream_copy.h): outputs at odd
// addresses, sizes that are no multiple of anything, in place and not; bitwise equal on all ranks.
TEST(ShmTransportCollectives, LargeOutputsStream) {
  for (int n : {2, 3}) {
    SCOPED_TRACE("n=" + std::to_string(n));
    const size_t count = (size_t(9) << 20) / 4 + 3;  // int32, just over 9 MiB
    std::vector<std::vector<uint8_t>> results(n);
    runShmRanks(n, "shm_slices", [&](Communicator& comm) {
      const int r = comm.rank();
      // Allreduce out of place into an output 4 bytes off 16-byte alignment, then in place.
      std::vector<int32_t> in(count);
      for (size_t i = 0; i < count; ++i) in[i] = static_cast<int32_t>((r + 1) * (i % 1013) - r);
      std::vector<uint8_t> outBytes(count * 4 + 64);
      auto* out = reinterpret_cast<int32_t*>(outBytes.data() + 4);
      collectives::allreduce(comm, in.data(), out, count, DataType::kInt32, ReduceOp::kSum);
      const int32_t tri = n * (n + 1) / 2, offs = n * (n - 1) / 2;
      for (size_t i = 0; i < count; ++i) {
        ASSERT_EQ(out[i], static_cast<int32_t>(tri * (i % 1013) - offs)) << "allreduce element " << i;
      }
      collectives::allreduce(comm, in.data(), count, DataType::kInt32, ReduceOp::kSum);
      ASSERT_EQ(0, std::memcmp(in.data(), out, count * 4)) << "in place differs from out of place";
      results[r].assign(outBytes.begin() + 4, outBytes.begin() + 4 + count * 4);

      // Allgatherv of uneven blocks into an output at an odd address, then in place.
      std::vector<size_t> sizes;
      for (int j = 0; j < n; ++j) sizes.push_back((size_t(5) << 20) + 7 * j + 1);
      const size_t total = std::accumulate(sizes.begin(), sizes.end(), size_t(0));
      std::vector<uint8_t> mine(sizes[r]);
      for (size_t i = 0; i < mine.size(); ++i) mine[i] = static_cast<uint8_t>(i * 7 + r * 31);
      std::vector<uint8_t> gathered(total + 1);
      collectives::allgatherv(comm, mine.data(), gathered.data() + 1, sizes);
      size_t at = 1;
      for (int j = 0; j < n; ++j) {
        for (size_t i = 0; i < sizes[j]; i += 997) {
          ASSERT_EQ(gathered[at + i], static_cast<uint8_t>(i * 7 + j * 31)) << "block " << j << " byte " << i;
        }
        ASSERT_EQ(gathered[at + sizes[j] - 1], static_cast<uint8_t>((sizes[j] - 1) * 7 + j * 31));
        at += sizes[j];
      }
      std::vector<uint8_t> inplace(total);
      size_t myOffset = std::accumulate(sizes.begin(), sizes.begin() + r, size_t(0));
      std::memcpy(inplace.data() + myOffset, mine.data(), mine.size());
      collectives::allgatherv(comm, inplace.data() + myOffset, inplace.data(), sizes);
      ASSERT_EQ(0, std::memcmp(inplace.data(), gathered.data() + 1, total));

      // Broadcast of 9 MiB + 5 at an odd address from the last rank.
      const size_t bytes = (size_t(9) << 20) + 5;
      std::vector<uint8_t> b(bytes + 3);
      for (size_t i = 0; i < bytes; ++i) b[3 + i] = static_cast<uint8_t>(r == n - 1 ? i * 13 + 1 : 0);
      collectives::broadcast(comm, b.data() + 3, bytes, n - 1);
      for (size_t i = 0; i < bytes; ++i) {
        if (b[3 + i] != static_cast<uint8_t>(i * 13 + 1)) FAIL() << "broadcast byte " << i;
      }
    });
    for (int r = 1; r < n; ++r) ASSERT_EQ(results[0], results[r]) << "rank " << r;
  }
}

}  // namespace
}  // namespace hvd::test
