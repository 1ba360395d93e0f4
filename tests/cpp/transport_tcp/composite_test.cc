// CompositeTransport over real TCP between "hosts", with the in-process "local" transport
// standing in for shared memory inside a host (this binary does not link the shm backend; the
// real shm+tcp pairing is tested by tests/multiproc/tcp_composite_test.cc). Ranks are threads.
#include "transport/composite.h"

#include <gtest/gtest.h>

#include <cstring>
#include <thread>

#include "rank_threads.h"

namespace hvd {
namespace {

using namespace std::chrono_literals;
using test::makeContexts;
using test::pattern;

Deadline soon() { return Deadline::after(20s); }

// Runs body on every rank with a CompositeTransport(localBackend, "tcp").
void runComposite(const std::vector<std::string>& hostOf, const std::string& localBackend,
                  const std::function<void(int, CompositeTransport&)>& body) {
  auto contexts = makeContexts(static_cast<int>(hostOf.size()), hostOf);
  int size = static_cast<int>(hostOf.size());
  std::vector<std::exception_ptr> errors(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      try {
        CompositeTransport t(contexts[r], localBackend, "tcp");
        body(r, t);
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

void allPairsExchange(int rank, Transport& t, const std::vector<size_t>& sizes) {
  int n = t.size();
  for (size_t bytes : sizes) {
    for (int s = 0; s < n; ++s) {
      int to = (rank + s) % n, from = (rank - s + n) % n;
      auto out = pattern(rank, to, bytes, s);
      std::vector<uint8_t> in(bytes, 0xee);
      t.sendRecv(to, out.data(), out.size(), from, in.data(), in.size(), soon());
      ASSERT_TRUE(in == pattern(from, rank, bytes, s)) << "bytes " << bytes << " step " << s << " rank " << rank;
    }
  }
}

TEST(Composite, IsRegistered) { EXPECT_TRUE(hasTransport("shm+tcp")); }

TEST(Composite, TwoHostsTwoRanksEach) {
  // Interleaved placement, so local indices differ from global ranks.
  runComposite({"a", "b", "a", "b"}, "local", [&](int rank, CompositeTransport& t) {
    EXPECT_EQ(t.name(), "shm+tcp");
    EXPECT_TRUE(t.hasLocal());
    EXPECT_EQ(t.localRanks(), (rank % 2 == 0 ? std::vector<int>{0, 2} : std::vector<int>{1, 3}));
    allPairsExchange(rank, t, {0, 1, 5000, size_t{8} << 20});
    // Plain send/recv across and within hosts.
    for (int peer = 0; peer < 4; ++peer) {
      if (peer == rank) continue;
      auto out = pattern(rank, peer, 777);
      std::vector<uint8_t> in(777);
      if (rank < peer) {
        t.send(peer, out.data(), out.size(), soon());
        t.recv(peer, in.data(), in.size(), soon());
      } else {
        t.recv(peer, in.data(), in.size(), soon());
        t.send(peer, out.data(), out.size(), soon());
      }
      ASSERT_EQ(in, pattern(peer, rank, 777));
    }
  });
}

TEST(Composite, MailboxUsesGlobalRanks) {
  runComposite({"a", "a", "b", "b", "b"}, "local", [&](int rank, CompositeTransport& t) {
    for (int peer = 0; peer < 5; ++peer) {
      for (int i = 0; i < 20; ++i) {
        int payload[2] = {rank, i};
        t.post(peer, payload, sizeof(payload));
      }
    }
    std::vector<int> next(5, 0);
    int remaining = 5 * 20;
    Deadline d = Deadline::after(20s);
    while (remaining > 0) {
      auto m = t.poll();
      if (!m) {
        ASSERT_TRUE(t.waitForMessage(d) || !d.expired());
        ASSERT_FALSE(d.expired());
        continue;
      }
      int payload[2];
      ASSERT_EQ(m->bytes.size(), sizeof(payload));
      std::memcpy(payload, m->bytes.data(), sizeof(payload));
      EXPECT_EQ(payload[0], m->from);
      EXPECT_EQ(payload[1], next[m->from]++);
      remaining--;
    }
    uint8_t token = 0;
    for (int peer = 0; peer < 5; ++peer) t.sendRecv(peer, &token, 1, peer, &token, 1, soon());
  });
}

TEST(Composite, SharedSpaceOnlyWithinAHost) {
  runComposite({"a", "b", "a", "b"}, "local", [&](int rank, CompositeTransport& t) {
    std::vector<int> mine = rank % 2 == 0 ? std::vector<int>{0, 2} : std::vector<int>{1, 3};
    SharedSpace* space = t.sharedSpace(mine, soon());
    ASSERT_NE(space, nullptr);
    EXPECT_EQ(space->members(), mine);
    EXPECT_EQ(space->memberIndex(), rank / 2);
    EXPECT_EQ(t.sharedSpace(mine, soon()), space);  // cached
    auto* own = static_cast<int*>(space->buffer(space->memberIndex()));
    own[0] = 1000 + rank;
    space->barrier(soon());
    auto* other = static_cast<int*>(space->buffer(1 - space->memberIndex()));
    EXPECT_EQ(other[0], 1000 + mine[1 - space->memberIndex()]);
    space->barrier(soon());
    EXPECT_EQ(t.sharedSpace({0, 1}, soon()), nullptr);  // spans hosts
  });
}

TEST(Composite, FallsBackToTcpWithoutALocalBackend) {
  runComposite({"a", "a", "b"}, "no-such-backend", [&](int rank, CompositeTransport& t) {
    EXPECT_FALSE(t.hasLocal());
    EXPECT_EQ(t.sharedSpace({rank}, soon()), nullptr);
    allPairsExchange(rank, t, {0, 3, 1 << 20});
  });
}

TEST(Composite, LocalPeerLossIsReportedWithItsGlobalRank) {
  // Rank 2 is local index 1 on host "a"; it aborts (no goodbye) and goes away while rank 0
  // waits for data from it through the local sub-transport.
  std::atomic<int> noticed{0};
  runComposite({"a", "b", "a", "b"}, "local", [&](int rank, CompositeTransport& t) {
    if (rank == 2) {
      std::this_thread::sleep_for(200ms);
      t.abort("simulated crash");
      return;
    }
    auto start = std::chrono::steady_clock::now();
    try {
      uint8_t buf[4];
      if (rank == 0) {
        t.recv(2, buf, sizeof(buf), soon());
      } else {
        t.waitForMessage(soon());
        t.waitForMessage(soon());
      }
      ADD_FAILURE() << "rank " << rank << " did not notice";
    } catch (const PeerLost& e) {
      EXPECT_EQ(e.rank(), 2) << e.what();
      EXPECT_NE(std::string(e.what()).find("rank 2"), std::string::npos) << e.what();
    }
    EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
    noticed++;
    while (noticed < 3) std::this_thread::sleep_for(1ms);
  });
}

}  // namespace
}  // namespace hvd
