// CompositeTransport over real TCP between "hosts", with the in-process "local" transport
// standing in for shared memory inside a host (this binary does not link the shm backend; the
// real shm+tcp pairing is tested by tests/multiproc/tcp_composite_test.cc). Ranks are threads.
#include "transport/composite.h"

#include <gtest/gtest.h>

#include <atomic>
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

TEST(Composite, LocalMessengerOfARemoteLossNamesTheRankItBlamed) {
  // Hosts a = {0, 1}, b = {2, 3}. Rank 1 finds rank 3 (on the other host) lost and aborts,
  // blaming it; rank 0 only sees its local peer 1 fail. It names rank 3, which rank 1's TCP abort
  // notice names, not the messenger.
  std::atomic<bool> done{false};
  std::string seen;
  int blamed = -2;
  runComposite({"a", "a", "b", "b"}, "local", [&](int rank, CompositeTransport& t) {
    if (rank == 1) {
      std::this_thread::sleep_for(200ms);
      t.noteCulprit(3);
      t.abort("Horovod lost connection to rank 3 (simulated)");
    } else if (rank == 0) {
      uint8_t buf[4];
      auto start = std::chrono::steady_clock::now();
      try {
        t.recv(1, buf, sizeof(buf), soon());
        ADD_FAILURE() << "rank 0 did not notice";
      } catch (const PeerLost& e) {
        blamed = e.rank();
        seen = e.what();
      }
      EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
      done = true;
    }
    while (!done) std::this_thread::sleep_for(1ms);
  });
  EXPECT_EQ(blamed, 3) << seen;
  EXPECT_NE(seen.find("rank 1 "), std::string::npos) << seen;  // and says who gave up
}

TEST(Composite, LocalTimeoutBehindALivePeerNamesTheSilentRemoteRank) {
  // Hosts a = {0, 1}, b = {2, 3}. Rank 1 is silent (makes no transport call, like a stopped
  // process); rank 2 waits for it over TCP; rank 3 waits for rank 2 in a shared-space barrier and
  // times out. Its local error names nobody: the TCP probe finds rank 1 silent (rank 0 answers;
  // so does rank 2, reading its control connections while it waits).
  std::atomic<bool> done{false};
  std::string seen;
  int blamed = -2;
  bool typed = false;
  runComposite({"a", "a", "b", "b"}, "local", [&](int rank, CompositeTransport& t) {
    SharedSpace* space = rank >= 2 ? t.sharedSpace({2, 3}, soon()) : nullptr;
    if (rank == 3) {
      std::this_thread::sleep_for(100ms);  // rank 2 is in its recv
      try {
        space->barrier(Deadline::after(500ms));
        ADD_FAILURE() << "the barrier returned";
      } catch (const PeerLost& e) {
        typed = true;
        blamed = e.rank();
        seen = e.what();
      } catch (const std::exception& e) {
        seen = e.what();
      }
      done = true;
    } else if (rank == 2) {
      uint8_t buf[1];
      try {
        t.recv(1, buf, 1, soon());
      } catch (const std::exception&) {
        // rank 3 failed meanwhile: this rank's part is over
      }
    } else if (rank == 0) {
      while (!done) {
        try {
          (void)t.poll();  // answers liveness probes
        } catch (const std::exception&) {
        }
        std::this_thread::sleep_for(1ms);
      }
    }
    while (!done) std::this_thread::sleep_for(1ms);
    if (rank == 1) {
      uint8_t one = 1;
      try {
        t.send(2, &one, 1, Deadline::after(2s));  // releases rank 2
      } catch (const std::exception&) {
      }
    }
  });
  EXPECT_TRUE(typed) << seen;
  EXPECT_EQ(blamed, 1) << seen;
  EXPECT_NE(seen.find("barrier"), std::string::npos) << seen;  // keeps the local context
}

}  // namespace
}  // namespace hvd
