// Hierarchical collectives over the composite transport: ranks are threads, hosts are faked
// through hostOf, the in-process "local" transport stands in for shared memory inside a host and
// real TCP connects the hosts (the real shm+tcp pairing is tests/multiproc/hierarchical_test.cc).
// Checks: which algorithm runs for a placement, results against a reference, bitwise equality
// across ranks, several chunks, out-of-place, process sets sharing a host's space.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <numeric>
#include <thread>

#include "collectives/algorithms.h"
#include "collectives/collectives.h"
#include "collectives/reduce.h"
#include "store/memory_store.h"
#include "test_data.h"
#include "transport/composite.h"
#include "transport/local/local_transport.h"

namespace hvd::test {
namespace {

using namespace std::chrono_literals;

// "local" with small shared buffers, so that the hierarchical stages run many chunks.
constexpr size_t kSmallCapacity = 8192;
const bool kSmallLocalRegistered = [] {
  registerTransport("local-small", [](const TransportContext& context) -> std::unique_ptr<Transport> {
    LocalTransportOptions options;
    options.connectTimeout = context.timeout;
    options.sharedCapacity = kSmallCapacity;
    return std::make_unique<LocalTransport>(context.jobId, context.rank, context.size, options);
  });
  return true;
}();

// "local-slow": like local-small, but the member at index 1 of every shared space lingers after
// each barrier, so a collective that reuses a buffer half too early corrupts what it reads.
class SlowSpace : public SharedSpace {
 public:
  explicit SlowSpace(SharedSpace* inner) : inner_(inner) {}
  const std::vector<int>& members() const override { return inner_->members(); }
  int memberIndex() const override { return inner_->memberIndex(); }
  size_t capacity() const override { return inner_->capacity(); }
  void* buffer(int memberIndex) override { return inner_->buffer(memberIndex); }
  void barrier(Deadline deadline) override {
    inner_->barrier(deadline);
    if (inner_->memberIndex() == 1) std::this_thread::sleep_for(std::chrono::microseconds(300));
  }
  void publish(uint64_t value) override { inner_->publish(value); }
  void awaitPublished(int memberIndex, uint64_t value, Deadline deadline) override {
    inner_->awaitPublished(memberIndex, value, deadline);
    if (inner_->memberIndex() == 1) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }

 private:
  SharedSpace* inner_;
};
class SlowLocalTransport : public LocalTransport {
 public:
  using LocalTransport::LocalTransport;
  SharedSpace* sharedSpace(const std::vector<int>& ranks, Deadline deadline) override {
    SharedSpace* inner = LocalTransport::sharedSpace(ranks, deadline);
    if (inner == nullptr) return nullptr;
    auto& slow = spaces_[inner];
    if (!slow) slow = std::make_unique<SlowSpace>(inner);
    return slow.get();
  }

 private:
  std::map<SharedSpace*, std::unique_ptr<SlowSpace>> spaces_;
};
void registerSlow(const std::string& name, size_t capacity) {
  registerTransport(name, [capacity](const TransportContext& context) -> std::unique_ptr<Transport> {
    LocalTransportOptions options;
    options.connectTimeout = context.timeout;
    options.sharedCapacity = capacity;
    return std::make_unique<SlowLocalTransport>(context.jobId, context.rank, context.size, options);
  });
}
const bool kSlowLocalRegistered = [] {
  registerSlow("local-slow", kSmallCapacity);
  registerSlow("local-slow-1m", size_t(1) << 20);  // halves large enough for streamed broadcasts
  return true;
}();

struct Placement {
  Placement(std::vector<std::string> hosts, std::string local = "local", std::string algo = "")
      : hostOf(std::move(hosts)), localBackend(std::move(local)), algorithm(std::move(algo)) {}
  std::vector<std::string> hostOf;
  std::string localBackend;  // stands in for shared memory inside a host
  std::string algorithm;     // allreduce override
};

std::string describe(const Placement& p) {
  std::string s;
  for (const auto& h : p.hostOf) s += h;
  return s + "/" + p.localBackend + (p.algorithm.empty() ? "" : "/" + p.algorithm);
}

// Runs body(comm) on every rank of a composite transport (localBackend + tcp) with a
// Communicator over `members` (all ranks when empty); ranks outside `members` only build the
// transport. Rethrows the first failure.
void runHosts(const Placement& placement, const std::function<void(Communicator&)>& body,
              std::vector<int> members = {}) {
  static std::atomic<int> job{0};
  const int n = static_cast<int>(placement.hostOf.size());
  if (members.empty()) {
    members.resize(n);
    std::iota(members.begin(), members.end(), 0);
  }
  auto store = std::make_shared<MemoryStore>();
  const std::string jobId = "hier-" + std::to_string(job++);
  std::vector<std::exception_ptr> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        TransportContext context;
        context.rank = r;
        context.size = n;
        context.hostOf = placement.hostOf;
        context.store = store;
        context.jobId = jobId;
        context.secret = "hier-secret";
        context.timeout = 20000ms;
        CompositeTransport transport(context, placement.localBackend, "tcp");
        if (std::find(members.begin(), members.end(), r) != members.end()) {
          Communicator comm(transport, members, 20000ms);
          comm.setAllreduceAlgorithm(placement.algorithm);
          body(comm);
        }
        // Leave together: a departing rank must not look like a lost peer to a slower one.
        uint8_t token = 0;
        for (int s = 1; s < n; ++s) {
          transport.sendRecv((r + s) % n, &token, 1, (r - s + n) % n, &token, 1, Deadline::after(20s));
        }
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

struct Case {
  DataType dtype;
  ReduceOp op;
  size_t count;
  bool outOfPlace;
};

// Runs every case as one allreduce on every member; checks the chosen algorithm, equality of
// all ranks' bits and the reference.
void checkAllreduces(const Placement& placement, const std::vector<Case>& cases, const std::string& expectAlgo) {
  SCOPED_TRACE(describe(placement));
  const int n = static_cast<int>(placement.hostOf.size());
  std::vector<std::vector<std::vector<uint8_t>>> outputs(cases.size(), std::vector<std::vector<uint8_t>>(n));
  std::vector<std::string> chosen(n);
  runHosts(placement, [&](Communicator& comm) {
    chosen[comm.rank()] = collectives::allreduceChoice(comm, 4096).name;
    for (size_t k = 0; k < cases.size(); ++k) {
      const Case& c = cases[k];
      std::vector<uint8_t> in = makeInput(c.dtype, c.op, comm.rank(), c.count, k + 1);
      if (c.outOfPlace) {
        const std::vector<uint8_t> copy = in;
        std::vector<uint8_t> out(in.size(), 0xcd);
        collectives::allreduce(comm, in.data(), out.data(), c.count, c.dtype, c.op);
        ASSERT_EQ(in, copy) << "out-of-place allreduce modified its input";
        outputs[k][comm.rank()] = std::move(out);
      } else {
        collectives::allreduce(comm, in.data(), c.count, c.dtype, c.op);
        outputs[k][comm.rank()] = std::move(in);
      }
    }
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(chosen[r], expectAlgo) << "rank " << r;
  for (size_t k = 0; k < cases.size(); ++k) {
    const Case& c = cases[k];
    SCOPED_TRACE("count=" + std::to_string(c.count) + " dtype=" + std::string(dataTypeName(c.dtype)) +
                 " op=" + opName(c.op) + (c.outOfPlace ? " out-of-place" : ""));
    const size_t bytes = c.count * dataTypeSize(c.dtype);
    for (int r = 1; r < n; ++r) {
      ASSERT_EQ(0, std::memcmp(outputs[k][0].data(), outputs[k][r].data(), bytes)) << "rank " << r << " differs";
    }
    std::vector<std::vector<uint8_t>> inputs;
    for (int r = 0; r < n; ++r) inputs.push_back(makeInput(c.dtype, c.op, r, c.count, k + 1));
    for (size_t i = 0; i < c.count; ++i) {
      std::string error = checkReduced(c.dtype, c.op, inputs, outputs[k][0].data(), i);
      ASSERT_EQ("", error);
    }
  }
}

std::vector<Case> gridCases() {
  std::vector<Case> cases;
  int rotation = 0;
  for (DataType t : allDataTypes()) {
    for (ReduceOp op : allReduceOps()) {
      for (size_t count : {size_t(1), size_t(7), size_t(1000)}) cases.push_back({t, op, count, false});
      // One larger count per (dtype, op), alternating in place and out of place.
      cases.push_back({t, op, 5000 + static_cast<size_t>(rotation), rotation % 2 == 1});
      rotation++;
    }
  }
  return cases;
}

TEST(Hierarchical, AllreduceTwoHostsTwoRanks) {
  // Interleaved placement: hosts' members are not contiguous set ranks.
  checkAllreduces({{"a", "b", "a", "b"}}, gridCases(), "hierarchical");
}

TEST(Hierarchical, AllreduceShapesAndManyChunks) {
  std::vector<Case> cases = {
      {DataType::kFloat32, ReduceOp::kSum, 1, false},      {DataType::kFloat32, ReduceOp::kSum, 33, true},
      {DataType::kFloat32, ReduceOp::kSum, 100003, false}, {DataType::kFloat16, ReduceOp::kSum, 20001, true},
      {DataType::kFloat64, ReduceOp::kMin, 9999, false},   {DataType::kInt32, ReduceOp::kProduct, 12345, false},
      {DataType::kBFloat16, ReduceOp::kMax, 777, false}};
  // 2 x 3 and 3 x 2, blocks and interleaved; small shared buffers (many chunks).
  checkAllreduces({{"a", "a", "a", "b", "b", "b"}, "local-small"}, cases, "hierarchical");
  checkAllreduces({{"x", "y", "z", "z", "y", "x"}, "local-small"}, cases, "hierarchical");
  // Default-size buffers: a 4 MiB message in one chunk per host half.
  checkAllreduces({{"a", "b", "a", "b", "a", "b"}}, {{DataType::kFloat32, ReduceOp::kSum, size_t(1) << 20, false}},
                  "hierarchical");
}

TEST(Hierarchical, ForcedAndFallback) {
  std::vector<Case> cases = {{DataType::kFloat32, ReduceOp::kSum, 3000, false},
                             {DataType::kInt64, ReduceOp::kMax, 50, true}};
  checkAllreduces({{"a", "b", "a", "b"}, "local", "hierarchical"}, cases, "hierarchical");
  // Uneven hosts (1 + 2): the flat rule, forced or not.
  checkAllreduces({{"a", "b", "b"}, "local", "hierarchical"}, cases, "recursive_doubling");
  checkAllreduces({{"a", "b", "b"}}, cases, "recursive_doubling");
  // One rank per host: nothing to share.
  checkAllreduces({{"a", "b", "c"}, "local", "hierarchical"}, cases, "recursive_doubling");
  // One host: the shared-memory algorithms.
  checkAllreduces({{"a", "a", "a"}}, cases, "shm_direct");
  // An explicit flat algorithm is honoured on a hierarchical placement.
  checkAllreduces({{"a", "b", "a", "b"}, "local", "ring"}, cases, "ring");
  // No shared memory inside the hosts (unknown local backend): flat.
  checkAllreduces({{"a", "b", "a", "b"}, "no-such-backend"}, cases, "recursive_doubling");
}

TEST(Hierarchical, DeterministicAcrossRuns) {
  const size_t count = 30001;
  std::vector<uint8_t> first;
  for (int run = 0; run < 3; ++run) {
    std::vector<std::vector<uint8_t>> out(4);
    runHosts({{"a", "b", "b", "a"}, "local-small"}, [&](Communicator& comm) {
      std::vector<uint8_t> buf = makeInput(DataType::kFloat32, ReduceOp::kSum, comm.rank(), count, 5);
      collectives::allreduce(comm, buf.data(), count, DataType::kFloat32, ReduceOp::kSum);
      out[comm.rank()] = std::move(buf);
    });
    for (int r = 1; r < 4; ++r) ASSERT_EQ(out[0], out[r]) << "rank " << r;
    if (run == 0) first = out[0];
    ASSERT_EQ(first, out[0]) << "run " << run;
  }
}

// A postscale (Average) is applied to each host's reduced slice before the host's members copy
// it: bitwise what scaleBuffer() makes of the plain sum.
TEST(Hierarchical, PostscaleEqualsScaledSum) {
  const size_t count = 20001;
  for (DataType t : {DataType::kFloat32, DataType::kFloat16, DataType::kInt32}) {
    SCOPED_TRACE(std::string(dataTypeName(t)));
    std::vector<std::string> failures(4);
    std::vector<std::string> chosen(4);
    runHosts({{"a", "b", "b", "a"}, "local-small"}, [&](Communicator& comm) {
      const int r = comm.rank();
      chosen[r] = collectives::allreduceChoice(comm, count * dataTypeSize(t)).name;
      std::vector<uint8_t> expected = makeInput(t, ReduceOp::kSum, r, count, 3);
      std::vector<uint8_t> scaled = expected;
      collectives::allreduce(comm, expected.data(), count, t, ReduceOp::kSum);
      scaleBuffer(expected.data(), count, t, 0.25);
      collectives::allreduce(comm, scaled.data(), count, t, ReduceOp::kSum, 0.25);
      if (std::memcmp(expected.data(), scaled.data(), count * dataTypeSize(t)) != 0) failures[r] = "differs";
    });
    for (int r = 0; r < 4; ++r) {
      EXPECT_EQ(chosen[r], "hierarchical") << "rank " << r;
      EXPECT_EQ(failures[r], "") << "rank " << r;
    }
  }
}

// Two communicators whose host groups are the same member list ({0, 2} on host a) share one
// SharedSpace; interleaved collectives on both must keep its double buffering consistent.
TEST(Hierarchical, ProcessSetsShareAHostSpace) {
  const size_t count = 20000, pairCount = 1000;  // the pair's allreduce: one shm_direct chunk
  std::mutex mu;
  std::vector<std::string> failures;
  runHosts({{"a", "b", "a", "b"}, "local-slow"}, [&](Communicator& world) {
    std::unique_ptr<Communicator> pair;
    if (world.rank() % 2 == 0)
      pair = std::make_unique<Communicator>(world.transport(), std::vector<int>{0, 2}, 20000ms);
    for (int iter = 0; iter < 6; ++iter) {
      std::vector<float> w(count), p(pairCount);
      for (size_t i = 0; i < count; ++i) w[i] = static_cast<float>((world.rank() + 1) * (i % 97) + iter);
      collectives::allreduce(world, w.data(), count, DataType::kFloat32, ReduceOp::kSum);
      if (pair) {
        for (size_t i = 0; i < pairCount; ++i) p[i] = static_cast<float>(world.rank() * 3 + (i % 13) + iter);
        collectives::allreduce(*pair, p.data(), pairCount, DataType::kFloat32, ReduceOp::kSum);
      }
      for (size_t i = 0; i < count; ++i) {
        float want = static_cast<float>(10 * (i % 97) + 4 * iter);
        bool bad = w[i] != want || (pair && i < pairCount && p[i] != static_cast<float>(6 + 2 * (i % 13) + 2 * iter));
        if (bad) {
          std::lock_guard<std::mutex> lock(mu);
          failures.push_back("rank " + std::to_string(world.rank()) + " iter " + std::to_string(iter) + " element " +
                             std::to_string(i));
          break;  // keep running the collectives: every rank must take part in all of them
        }
      }
    }
  });
  EXPECT_TRUE(failures.empty()) << failures.front();
}

// A process set spanning two hosts inside a larger job (ranks 4, 5 are not members).
TEST(Hierarchical, ProcessSetSubset) {
  std::vector<Case> cases = {{DataType::kFloat32, ReduceOp::kSum, 4099, false}};
  std::vector<std::vector<float>> out(6);
  runHosts({{"a", "b", "a", "b", "c", "c"}, "local-small"},
           [&](Communicator& comm) {
             EXPECT_EQ(collectives::allreduceChoice(comm, 4096).name, std::string("hierarchical"));
             std::vector<float> v(4099);
             for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(comm.globalRank(comm.rank()) + i);
             collectives::allreduce(comm, v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum);
             out[comm.globalRank(comm.rank())] = v;
           },
           {0, 1, 2, 3});
  for (int r = 0; r < 4; ++r) {
    ASSERT_EQ(out[r].size(), 4099u);
    for (size_t i = 0; i < 4099; ++i) ASSERT_EQ(out[r][i], static_cast<float>(6 + 4 * i)) << "rank " << r;
  }
}

// allgatherv (varying sizes including zero, in place and not) and broadcast from every root.
void checkGatherAndBroadcast(const Placement& placement) {
  SCOPED_TRACE(describe(placement));
  const int n = static_cast<int>(placement.hostOf.size());
  std::mutex mu;
  std::vector<std::string> failures;
  auto fail = [&](const std::string& what) {
    std::lock_guard<std::mutex> lock(mu);
    failures.push_back(what);
  };
  runHosts(placement, [&](Communicator& comm) {
    const int me = comm.rank();
    auto block = [](int r, size_t len, int salt) {
      std::vector<uint8_t> b(len);
      for (size_t i = 0; i < len; ++i) b[i] = static_cast<uint8_t>(r * 41 + i * 7 + salt + (i >> 8));
      return b;
    };
    for (int salt = 0; salt < 3; ++salt) {
      std::vector<size_t> sizes(n);
      for (int r = 0; r < n; ++r) sizes[r] = salt == 0 ? 5 : (r * 7919 + salt * 104729) % 30000 * (r % 3 != 1);
      std::vector<uint8_t> want;
      for (int r = 0; r < n; ++r) {
        auto b = block(r, sizes[r], salt);
        want.insert(want.end(), b.begin(), b.end());
      }
      std::vector<uint8_t> out(want.size(), 0xee);
      auto mine = block(me, sizes[me], salt);
      collectives::allgatherv(comm, mine.data(), out.data(), sizes);
      if (out != want) fail("allgatherv salt " + std::to_string(salt) + " rank " + std::to_string(me));
      // In place.
      size_t offset = 0;
      for (int r = 0; r < me; ++r) offset += sizes[r];
      std::vector<uint8_t> inplace(want.size(), 0xee);
      if (!mine.empty()) std::memcpy(inplace.data() + offset, mine.data(), mine.size());
      collectives::allgatherv(comm, inplace.data() + offset, inplace.data(), sizes);
      if (inplace != want) fail("in-place allgatherv salt " + std::to_string(salt) + " rank " + std::to_string(me));
    }
    for (size_t bytes : {size_t(1), size_t(3000), size_t(300000)}) {
      for (int root = 0; root < n; ++root) {
        std::vector<uint8_t> buf = me == root ? block(root, bytes, 9) : std::vector<uint8_t>(bytes, 0);
        collectives::broadcast(comm, buf.data(), bytes, root);
        if (buf != block(root, bytes, 9)) {
          fail("broadcast root " + std::to_string(root) + " bytes " + std::to_string(bytes) + " rank " +
               std::to_string(me));
        }
      }
    }
  });
  EXPECT_TRUE(failures.empty()) << failures.size() << " failures, first: " << failures.front();
}

TEST(Hierarchical, AllgatherAndBroadcast) {
  checkGatherAndBroadcast({{"a", "b", "a", "b"}, "local-small"});
  checkGatherAndBroadcast({{"a", "a", "a", "b", "b", "b"}});
  checkGatherAndBroadcast({{"y", "x", "x", "y", "z", "z"}, "local-small"});
  // Uneven: flat allgather, hierarchical broadcast (single-member host skips the shared stage).
  checkGatherAndBroadcast({{"a", "b", "b"}, "local-small"});
}

// Broadcasts of one chunk are streamed (the others copy each piece as the root publishes it);
// a reader that lingers after each piece (member 1) must still read every byte before the root
// reuses that buffer half two phases later: runs of broadcasts from one root, then from others,
// with shared-memory allreduces in between.
TEST(SharedSpace, StreamedBroadcastWaitsForSlowReaders) {
  const std::vector<size_t> sizes = {16384, 300001, 65536, 20000, 500000};
  const std::vector<int> roots = {0, 0, 0, 0, 2, 2, 2, 1, 1, 1, 0, 0};
  std::mutex mu;
  std::vector<std::string> failures;
  runHosts({{"a", "a", "a"}, "local-slow-1m"}, [&](Communicator& comm) {
    const int r = comm.rank();
    for (int iter = 0; iter < static_cast<int>(roots.size()); ++iter) {
      const int root = roots[iter];
      const size_t bytes = sizes[iter % sizes.size()];
      auto expected = [&](size_t i) { return static_cast<uint8_t>(i * 31 + iter * 7 + root); };
      std::vector<uint8_t> b(bytes);
      for (size_t i = 0; i < bytes; ++i) b[i] = r == root ? expected(i) : 0;
      collectives::broadcast(comm, b.data(), bytes, root);
      for (size_t i = 0; i < bytes; ++i) {
        if (b[i] != expected(i)) {
          std::lock_guard<std::mutex> lock(mu);
          failures.push_back("rank " + std::to_string(r) + " iter " + std::to_string(iter) + " byte " +
                             std::to_string(i) + " of " + std::to_string(bytes));
          break;  // keep running the collectives: every rank must take part in all of them
        }
      }
      if (iter % 5 == 4) {
        std::vector<float> w(100000, static_cast<float>(r + 1));
        collectives::allreduce(comm, w.data(), w.size(), DataType::kFloat32, ReduceOp::kSum);
        if (w[0] != 6.0f || w.back() != 6.0f) {
          std::lock_guard<std::mutex> lock(mu);
          failures.push_back("rank " + std::to_string(r) + " allreduce after iter " + std::to_string(iter));
        }
      }
    }
  });
  EXPECT_TRUE(failures.empty()) << failures.front();
}

}  // namespace
}  // namespace hvd::test
