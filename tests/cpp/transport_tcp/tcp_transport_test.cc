// TcpTransport with N ranks as threads of this process over a MemoryStore.
#include "transport/tcp/tcp_transport.h"
#include "transport/tcp/tcp_mesh.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <thread>

#include "common/socket.h"
#include "rank_threads.h"

namespace hvd {
namespace {

using namespace std::chrono_literals;
using test::makeContexts;
using test::pattern;
using test::runRanks;

Deadline soon() { return Deadline::after(20s); }

TEST(TcpTransport, IsRegistered) { EXPECT_TRUE(hasTransport("tcp")); }

class TcpSizes : public ::testing::TestWithParam<int> {};

TEST_P(TcpSizes, PairwiseSendRecvAllSizes) {
  int n = GetParam();
  runRanks("tcp", n, [&](int rank, Transport& t) {
    EXPECT_EQ(t.rank(), rank);
    EXPECT_EQ(t.size(), n);
    EXPECT_EQ(t.name(), "tcp");
    for (size_t bytes : {size_t{0}, size_t{1}, size_t{4097}, size_t{1} << 20}) {
      // Everyone sends to everyone (self included) with a sendRecv schedule: step s pairs
      // rank -> rank+s and rank-s -> rank, so no step waits on another.
      for (int s = 0; s < n; ++s) {
        int to = (rank + s) % n;
        int from = (rank - s + n) % n;
        auto out = pattern(rank, to, bytes);
        std::vector<uint8_t> in(bytes, 0xee);
        t.sendRecv(to, out.data(), out.size(), from, in.data(), in.size(), soon());
        ASSERT_EQ(in, pattern(from, rank, bytes)) << "bytes " << bytes << " step " << s;
      }
    }
    // Plain send/recv: lower rank sends first.
    for (int peer = 0; peer < n; ++peer) {
      if (peer == rank) continue;
      auto out = pattern(rank, peer, 3000, 1);
      std::vector<uint8_t> in(3000);
      if (rank < peer) {
        t.send(peer, out.data(), out.size(), soon());
        t.recv(peer, in.data(), in.size(), soon());
      } else {
        t.recv(peer, in.data(), in.size(), soon());
        t.send(peer, out.data(), out.size(), soon());
      }
      ASSERT_EQ(in, pattern(peer, rank, 3000, 1));
    }
  });
}

INSTANTIATE_TEST_SUITE_P(OneToFive, TcpSizes, ::testing::Values(1, 2, 3, 4, 5));

TEST(TcpTransport, LargeSimultaneousExchangeCannotDeadlock) {
  // Both ranks send 64 MiB to each other at once through sendRecv (to == from).
  constexpr size_t kBytes = size_t{64} << 20;
  runRanks("tcp", 2, [&](int rank, Transport& t) {
    int peer = 1 - rank;
    auto out = pattern(rank, peer, kBytes);
    std::vector<uint8_t> in(kBytes);
    t.sendRecv(peer, out.data(), out.size(), peer, in.data(), in.size(), soon());
    EXPECT_TRUE(in == pattern(peer, rank, kBytes));
  });
}

TEST(TcpTransport, RingOfUnevenSizes) {
  // A ring where each rank sends a different amount; recv sizes follow the sender's.
  constexpr int kRanks = 4;
  runRanks("tcp", kRanks, [&](int rank, Transport& t) {
    int next = (rank + 1) % kRanks, prev = (rank + kRanks - 1) % kRanks;
    for (int step = 0; step < 6; ++step) {
      size_t sendBytes = (size_t{1} << (10 + 2 * step)) + rank;  // up to ~1 MiB
      size_t recvBytes = (size_t{1} << (10 + 2 * step)) + prev;
      auto out = pattern(rank, next, sendBytes, step);
      std::vector<uint8_t> in(recvBytes);
      t.sendRecv(next, out.data(), out.size(), prev, in.data(), in.size(), soon());
      ASSERT_EQ(in, pattern(prev, rank, recvBytes, step));
    }
  });
}

TEST(TcpTransport, SelfStreams) {
  runRanks("tcp", 2, [&](int rank, Transport& t) {
    auto a = pattern(rank, rank, 1000);
    std::vector<uint8_t> b(1000);
    t.send(rank, a.data(), a.size(), soon());
    t.recv(rank, b.data(), b.size(), soon());
    EXPECT_EQ(a, b);
    t.sendRecv(rank, a.data(), a.size(), rank, b.data(), b.size(), soon());
    EXPECT_EQ(a, b);
    EXPECT_THROW(t.recv(rank, b.data(), 1, soon()), Error);  // nothing was sent to self
  });
}

TEST(TcpTransport, MailboxOrderingZeroBytesAndLargeMessages) {
  constexpr int kRanks = 4;
  constexpr int kMessages = 200;
  runRanks("tcp", kRanks, [&](int rank, Transport& t) {
    // Every rank posts kMessages numbered messages to every rank (itself included), plus a
    // zero-byte one and a 5 MiB one (larger than socket buffers: exercises the outbox).
    for (int i = 0; i < kMessages; ++i) {
      for (int peer = 0; peer < kRanks; ++peer) {
        uint32_t payload[2] = {static_cast<uint32_t>(rank), static_cast<uint32_t>(i)};
        t.post(peer, payload, sizeof(payload));
      }
    }
    auto big = pattern(rank, 0, 5 << 20);
    for (int peer = 0; peer < kRanks; ++peer) {
      t.post(peer, nullptr, 0);
      t.post(peer, big.data(), big.size());
    }
    std::vector<int> next(kRanks, 0);
    std::vector<bool> gotEmpty(kRanks, false), gotBig(kRanks, false);
    int remaining = kRanks * (kMessages + 2);
    Deadline deadline = Deadline::after(30s);
    while (remaining > 0) {
      auto m = t.poll();
      if (!m) {
        ASSERT_TRUE(t.waitForMessage(deadline) || !deadline.expired()) << "timed out with " << remaining << " left";
        ASSERT_FALSE(deadline.expired());
        continue;
      }
      remaining--;
      ASSERT_GE(m->from, 0);
      ASSERT_LT(m->from, kRanks);
      if (next[m->from] < kMessages) {
        ASSERT_EQ(m->bytes.size(), 8u);
        uint32_t payload[2];
        std::memcpy(payload, m->bytes.data(), 8);
        EXPECT_EQ(payload[0], static_cast<uint32_t>(m->from));
        EXPECT_EQ(payload[1], static_cast<uint32_t>(next[m->from])) << "out of order from " << m->from;
        next[m->from]++;
      } else if (!gotEmpty[m->from]) {
        EXPECT_TRUE(m->bytes.empty());
        gotEmpty[m->from] = true;
      } else {
        EXPECT_FALSE(gotBig[m->from]);
        EXPECT_TRUE(m->bytes == pattern(m->from, 0, 5 << 20));
        gotBig[m->from] = true;
      }
    }
    EXPECT_FALSE(t.poll().has_value());
    // Keep the transports alive until everyone has read everything (a barrier over the data plane).
    for (int peer = 0; peer < kRanks; ++peer) {
      uint8_t token = 1, got = 0;
      t.sendRecv(peer, &token, 1, peer, &got, 1, soon());
    }
  });
}

TEST(TcpTransport, MailboxInterleavedWithDataPlane) {
  // Messages posted while the receiver is busy in the data plane are not lost or reordered.
  runRanks("tcp", 2, [&](int rank, Transport& t) {
    int peer = 1 - rank;
    std::vector<uint8_t> big(8 << 20);
    if (rank == 0) {
      for (uint8_t i = 0; i < 50; ++i) t.post(peer, &i, 1);
      t.send(peer, big.data(), big.size(), soon());
    } else {
      t.recv(peer, big.data(), big.size(), soon());
      for (uint8_t i = 0; i < 50; ++i) {
        std::optional<MailboxMessage> m;
        Deadline d = Deadline::after(10s);
        while (!(m = t.poll())) ASSERT_TRUE(t.waitForMessage(d));
        ASSERT_EQ(m->bytes, std::vector<uint8_t>{i});
      }
    }
    uint8_t token = 0;
    t.sendRecv(peer, &token, 1, peer, &token, 1, soon());
  });
}

TEST(TcpTransport, PostFromAnotherThreadWhileTheDataPlaneIsBusy) {
  // post() is callable from any thread; a controller thread polls while the data thread moves
  // bulk data, on every rank at once.
  constexpr int kRanks = 3;
  constexpr int kMessages = 300;
  runRanks("tcp", kRanks, [&](int rank, Transport& t) {
    std::thread poster([&] {
      for (int i = 0; i < kMessages; ++i) {
        for (int peer = 0; peer < kRanks; ++peer) t.post(peer, &i, sizeof(i));
      }
    });
    std::thread controller([&] {
      std::vector<int> next(kRanks, 0);
      int remaining = kRanks * kMessages;
      Deadline d = Deadline::after(30s);
      while (remaining > 0 && !d.expired()) {
        auto m = t.poll();
        if (!m) {
          t.waitForMessage(d);
          continue;
        }
        int value;
        std::memcpy(&value, m->bytes.data(), sizeof(value));
        EXPECT_EQ(value, next[m->from]++);
        remaining--;
      }
      EXPECT_EQ(remaining, 0);
    });
    int next = (rank + 1) % kRanks, prev = (rank + kRanks - 1) % kRanks;
    for (int step = 0; step < 10; ++step) {
      auto out = pattern(rank, next, 1 << 20, step);
      std::vector<uint8_t> in(1 << 20);
      t.sendRecv(next, out.data(), out.size(), prev, in.data(), in.size(), soon());
      ASSERT_TRUE(in == pattern(prev, rank, 1 << 20, step));
    }
    poster.join();
    controller.join();
    for (int peer = 0; peer < kRanks; ++peer) {
      uint8_t token = 0;
      t.sendRecv(peer, &token, 1, peer, &token, 1, soon());
    }
  });
}

TEST(TcpTransport, WakeInterruptsWaitAndDeadlineReturnsFalse) {
  runRanks("tcp", 2, [&](int rank, Transport& t) {
    if (rank == 0) {
      auto start = std::chrono::steady_clock::now();
      EXPECT_FALSE(t.waitForMessage(Deadline::after(100ms)));
      EXPECT_GE(std::chrono::steady_clock::now() - start, 90ms);

      std::thread waker([&] {
        std::this_thread::sleep_for(50ms);
        t.wake();
      });
      start = std::chrono::steady_clock::now();
      EXPECT_TRUE(t.waitForMessage(Deadline::after(10s)));
      EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
      waker.join();
      EXPECT_FALSE(t.poll().has_value());
      // A wake before the wait is not lost.
      t.wake();
      EXPECT_TRUE(t.waitForMessage(Deadline::after(10s)));
    }
    uint8_t token = 0;
    t.sendRecv(1 - rank, &token, 1, 1 - rank, &token, 1, soon());
  });
}

TEST(TcpTransport, AbortWakesBlockedCallsAndSticks) {
  runRanks("tcp", 2, [&](int rank, Transport& t) {
    if (rank == 0) {
      std::thread aborter([&] {
        std::this_thread::sleep_for(100ms);
        t.abort("shutting down for the test");
      });
      uint8_t byte;
      auto start = std::chrono::steady_clock::now();
      try {
        t.recv(1, &byte, 1, Deadline::after(20s));
        ADD_FAILURE() << "recv returned";
      } catch (const Aborted& e) {
        EXPECT_NE(std::string(e.what()).find("shutting down for the test"), std::string::npos);
      }
      EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
      aborter.join();
      EXPECT_THROW(t.waitForMessage(Deadline::after(10s)), Aborted);
      EXPECT_THROW(t.send(1, &byte, 1, soon()), Aborted);
      EXPECT_THROW(t.post(1, &byte, 1), Aborted);
    } else {
      // Rank 0 aborted without a goodbye: rank 1 sees it as lost once it is destroyed.
      try {
        t.waitForMessage(Deadline::after(20s));
        t.waitForMessage(Deadline::after(20s));
      } catch (const PeerLost&) {
      }
    }
  });
}

TEST(TcpTransport, DataTimeoutNamesOpAndPeer) {
  runRanks("tcp", 3, [&](int rank, Transport& t) {
    if (rank == 0) {
      uint8_t buf[16];
      try {
        t.recv(2, buf, sizeof(buf), Deadline::after(150ms));
        ADD_FAILURE() << "recv returned";
      } catch (const Timeout& e) {
        std::string what = e.what();
        EXPECT_NE(what.find("recv"), std::string::npos) << what;
        EXPECT_NE(what.find("rank 2"), std::string::npos) << what;
      }
      // The stream is now out of step: further data calls refuse.
      EXPECT_THROW(t.recv(2, buf, sizeof(buf), soon()), Error);
    }
    // Mailbox still works after a data timeout.
    for (int peer = 0; peer < 3; ++peer) t.post(peer, &rank, sizeof(rank));
    int seen = 0;
    Deadline d = Deadline::after(10s);
    while (seen < 3) {
      if (t.poll()) {
        seen++;
      } else {
        ASSERT_TRUE(t.waitForMessage(d));
      }
    }
  });
}

// Rank 1 is silent (as if stopped: nothing reads its sockets), rank 2 waits for rank 1 and rank
// 0 for rank 2. Whoever times out first, every survivor names rank 1, not the rank it waited
// for, and rank 1, once it runs again, says that it did not answer instead of blaming a peer.
class TcpBlame : public ::testing::TestWithParam<bool> {};

TEST_P(TcpBlame, SilentRankIsNamedOnEveryRankAndBlamesItself) {
  const bool messengerFirst = GetParam();  // rank 2 (waiting for the silent one) times out first
  std::atomic<int> survivorsDone{0};
  std::vector<int> blamed(3, -2);
  std::vector<std::string> errors(3);
  runRanks("tcp", 3, [&](int rank, Transport& t) {
    uint8_t buf[16] = {};
    auto attempt = [&](const std::function<void()>& f) {
      try {
        f();
        errors[rank] = "returned";
      } catch (const PeerLost& e) {
        blamed[rank] = e.rank();
        errors[rank] = e.what();
        t.noteCulprit(e.rank());  // as the engine does before it aborts
        t.abort(e.what());
      } catch (const std::exception& e) {
        errors[rank] = e.what();
        t.abort(e.what());
      }
    };
    if (rank == 1) {
      while (survivorsDone < 2) std::this_thread::sleep_for(5ms);
      attempt([&] { t.recv(0, buf, sizeof(buf), Deadline::after(3s)); });
      return;
    }
    auto shortWait = Deadline::after(300ms), longWait = Deadline::after(3s);
    if (rank == 2) attempt([&] { t.recv(1, buf, sizeof(buf), messengerFirst ? shortWait : longWait); });
    if (rank == 0) attempt([&] { t.recv(2, buf, sizeof(buf), messengerFirst ? longWait : shortWait); });
    survivorsDone++;
  });
  for (int r : {0, 2}) {
    EXPECT_EQ(blamed[r], 1) << "rank " << r << ": " << errors[r];
    EXPECT_NE(errors[r].find("rank 1"), std::string::npos) << errors[r];
  }
  EXPECT_EQ(blamed[1], 1) << errors[1];
  EXPECT_NE(errors[1].find("(this rank) did not answer"), std::string::npos) << errors[1];
}

INSTANTIATE_TEST_SUITE_P(WhoTimesOutFirst, TcpBlame, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Messenger" : "FarRank"; });

TEST(TcpTransport, CleanShutdownIsNotALoss) {
  auto contexts = makeContexts(3);
  std::atomic<bool> rank2Gone{false};
  runRanks("tcp", contexts, [&](int rank, Transport& t) {
    if (rank == 2) return;  // destroys its transport right away, saying goodbye
    if (rank == 0) {
      while (!rank2Gone) std::this_thread::sleep_for(5ms);
      // Rank 2's departure does not disturb a wait on rank 1 ...
      uint8_t byte = 0;
      t.recv(1, &byte, 1, soon());
      EXPECT_EQ(byte, 7);
      EXPECT_FALSE(t.waitForMessage(Deadline::after(200ms)));
      // ... but an operation that needs rank 2 fails naming it.
      try {
        t.recv(2, &byte, 1, soon());
        ADD_FAILURE() << "recv from a departed rank returned";
      } catch (const PeerLost& e) {
        EXPECT_EQ(e.rank(), 2);
        EXPECT_NE(std::string(e.what()).find("rank 2"), std::string::npos) << e.what();
      }
    } else {
      std::this_thread::sleep_for(300ms);  // rank 2 is gone by now
      rank2Gone = true;
      std::this_thread::sleep_for(100ms);
      uint8_t byte = 7;
      t.send(0, &byte, 1, soon());
    }
  });
}

TEST(TcpTransport, AbruptLossFailsEveryRankWithinSeconds) {
  // Rank 2 aborts (no goodbye) and drops its transport while rank 0 waits for data from rank 1
  // and rank 1 waits for a message: both fail with PeerLost(2) quickly, with rank 2's reason.
  auto contexts = makeContexts(3);
  std::atomic<int> noticed{0};
  runRanks("tcp", contexts, [&](int rank, Transport& t) {
    if (rank == 2) {
      std::this_thread::sleep_for(200ms);
      t.abort("simulated crash");
      return;
    }
    auto start = std::chrono::steady_clock::now();
    try {
      if (rank == 0) {
        uint8_t buf[8];
        t.recv(1, buf, sizeof(buf), Deadline::after(20s));
      } else {
        t.waitForMessage(Deadline::after(20s));
        t.waitForMessage(Deadline::after(20s));
      }
      ADD_FAILURE() << "rank " << rank << " did not notice the loss";
    } catch (const PeerLost& e) {
      EXPECT_EQ(e.rank(), 2) << "on rank " << rank;
      // Its abort frame came first: the survivors name it with the reason it gave.
      EXPECT_NE(std::string(e.what()).find("rank 2 (host localhost) failed and aborted: simulated crash"),
                std::string::npos)
          << e.what();
      EXPECT_TRUE(e.peerAborted()) << e.what();  // it said so: a messenger, maybe
    }
    EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
    // Sticky: later calls fail the same way.
    uint8_t b = 0;
    EXPECT_THROW(t.send(1 - rank, &b, 1, soon()), PeerLost);
    try {
      t.waitForMessage(Deadline::after(1s));
      ADD_FAILURE() << "waitForMessage after the loss returned";
    } catch (const PeerLost& e) {
      EXPECT_EQ(e.rank(), 2);
      EXPECT_TRUE(e.peerAborted());
    }
    // Stay up until both survivors noticed, or the first one's exit would be the other's loss.
    noticed++;
    while (noticed < 2) std::this_thread::sleep_for(1ms);
  });
}

// Forwards to a store, but holds get() until a flag is set.
class GatedStore : public Store {
 public:
  GatedStore(std::shared_ptr<Store> inner, std::atomic<bool>& open) : inner_(std::move(inner)), open_(open) {}
  void set(const std::string& k, const Bytes& v, Deadline d) override { inner_->set(k, v, d); }
  Bytes get(const std::string& k, Deadline d) override {
    while (!open_) std::this_thread::sleep_for(1ms);
    return inner_->get(k, d);
  }
  int64_t add(const std::string& k, int64_t delta, Deadline d) override { return inner_->add(k, delta, d); }
  void wait(const std::vector<std::string>& keys, Deadline d) override { inner_->wait(keys, d); }

 private:
  std::shared_ptr<Store> inner_;
  std::atomic<bool>& open_;
};

TEST(TcpTransport, KeepAliveNamesTheRankAMessengerBlamesNotTheMessenger) {
  // Rank 0 waits for messages. Ranks 1 and 2 both stop answering its pings: rank 2 is silent (a
  // stopped process), rank 1 only blocked behind it (like a rank in a shared-memory wait on rank
  // 2's host), and it gives up first, blaming rank 2. Rank 0's keep-alive finds rank 1 silent
  // first (lowest rank) but probes once more and names rank 2, whom rank 1's notice names.
  auto contexts = makeContexts(3);
  for (auto& c : contexts) c.timeout = 1000ms;
  std::atomic<bool> done{false};
  int blamed = -2;
  bool blamedAborted = true;
  std::string seen;
  runRanks("tcp", contexts, [&](int rank, Transport& t) {
    if (rank == 0) {
      try {
        for (int i = 0; i < 50 && !done; ++i) {
          t.waitForMessage(Deadline::after(200ms));
          while (t.poll()) {
          }
        }
        ADD_FAILURE() << "rank 0 noticed nothing";
      } catch (const PeerLost& e) {
        blamed = e.rank();
        blamedAborted = e.peerAborted();
        seen = e.what();
      }
      done = true;
    } else if (rank == 1) {
      std::this_thread::sleep_for(1450ms);  // past rank 0's keep-alive limit (1 s), in its probe window
      t.noteCulprit(2);
      t.abort("rank 2 did not answer (simulated)");
    }
    while (!done) std::this_thread::sleep_for(1ms);
  });
  EXPECT_EQ(blamed, 2) << seen;
  EXPECT_NE(seen.find("rank 1 "), std::string::npos) << seen;  // says who gave up
  EXPECT_FALSE(blamedAborted) << seen;                           // rank 2 itself went silent
}

TEST(TcpTransport, ConnectionWithWrongSecretIsRefused) {
  auto contexts = makeContexts(2);
  std::atomic<bool> rogueDone{false};
  // Rank 0 connects to rank 1 only after the rogue has tried.
  contexts[0].store = std::make_shared<GatedStore>(contexts[0].store, rogueDone);
  std::thread rogue([&] {
    // Connect to rank 1's listener before rank 0 does, with a wrong secret and then with the
    // right secret but another job's identity.
    std::string address = getString(*contexts[1].store, "addr/1", Deadline::after(10s));
    auto [host, port] = splitHostPort(address);
    for (const auto& [secret, id] :
         {std::pair<std::string, std::string>{"wrong", "hvd-tcp/" + contexts[0].jobId + "/rank 0/data"},
          {"test-secret", "hvd-tcp/other-job/rank 0/data"}}) {
      Socket s = connectTcp(host, port, Deadline::after(5s), false);
      try {
        authenticateAsClient(s.fd(), secret, id, "hvd-tcp/" + contexts[0].jobId + "/rank 1", Deadline::after(5s));
      } catch (const Error&) {
      }
    }
    rogueDone = true;
  });
  testing::internal::CaptureStderr();
  int64_t refused = -1;
  runRanks("tcp", contexts, [&](int rank, Transport& t) {
    // The real connections still work.
    uint8_t byte = static_cast<uint8_t>(rank), got = 0xff;
    t.sendRecv(1 - rank, &byte, 1, 1 - rank, &got, 1, soon());
    EXPECT_EQ(got, 1 - rank);
    if (rank == 1) refused = dynamic_cast<tcp::TcpTransport&>(t).refusedConnections();
  });
  std::string log = testing::internal::GetCapturedStderr();
  rogue.join();
  EXPECT_EQ(refused, 2);
  EXPECT_NE(log.find("refused a connection from 127.0.0.1:"), std::string::npos) << log;
}

// Connections that open a handshake and then say nothing (a port scanner, a stray client) do
// not hold up the ranks' own connections: each handshake has its own bound, side by side.
TEST(TcpTransport, IdleConnectionsDoNotStallSetup) {
  auto contexts = makeContexts(2);
  // Three idle connections cost 30 s if taken one after another: more than this timeout.
  for (auto& c : contexts) c.timeout = std::chrono::seconds(20);
  std::atomic<bool> idleOpen{false};
  contexts[0].store = std::make_shared<GatedStore>(contexts[0].store, idleOpen);
  std::vector<Socket> idle;
  std::thread opener([&] {
    std::string address = getString(*contexts[1].store, "addr/1", Deadline::after(10s));
    auto [host, port] = splitHostPort(address);
    for (int i = 0; i < 3; ++i) idle.push_back(connectTcp(host, port, Deadline::after(5s), false));
    idleOpen = true;
  });
  runRanks("tcp", contexts, [&](int rank, Transport& t) {
    uint8_t byte = static_cast<uint8_t>(rank), got = 0xff;
    t.sendRecv(1 - rank, &byte, 1, 1 - rank, &got, 1, soon());
    EXPECT_EQ(got, 1 - rank);
  });
  opener.join();
}

TEST(TcpTransport, SetupTimesOutNamingTheMissingRank) {
  auto contexts = makeContexts(2);
  contexts[0].timeout = std::chrono::milliseconds(300);
  try {
    auto t = makeTransport("tcp", contexts[0]);  // rank 1 never shows up
    FAIL() << "setup succeeded alone";
  } catch (const Timeout& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1"), std::string::npos) << e.what();
  }
}

TEST(TcpTransport, BindsToTheRequestedInterface) {
  auto contexts = makeContexts(2);
  for (auto& c : contexts) c.interface = "lo";
  runRanks("tcp", contexts, [&](int rank, Transport& t) {
    EXPECT_EQ(splitHostPort(dynamic_cast<tcp::TcpTransport&>(t).listenAddress()).first, "127.0.0.1");
    uint8_t b = 1;
    t.sendRecv(1 - rank, &b, 1, 1 - rank, &b, 1, soon());
  });
  contexts = makeContexts(1);
  contexts[0].interface = "no-such-if9";
  contexts[0].size = 2;  // size 1 never listens
  contexts[0].hostOf = {"a", "b"};
  EXPECT_THROW(makeTransport("tcp", contexts[0]), InvalidArgument);
}

TEST(TcpTransport, AcrossHostsPublishesTheAddressOnTheRouteToTheRendezvous) {
  TransportContext c;
  c.size = 2;
  c.hostOf = {"a", "b"};
  // One host: loopback.
  TransportContext one = c;
  one.hostOf = {"a", "a"};
  EXPECT_EQ(tcp::chooseAddresses(one).second, "127.0.0.1");
  // The route to an address of this host starts at that address.
  const std::string own = routableHostAddress();
  if (own.empty()) GTEST_SKIP() << "this host has no non-loopback IPv4 address";
  c.reachableAddress = own;
  EXPECT_EQ(tcp::chooseAddresses(c), std::make_pair(std::string("0.0.0.0"), own));
  // A loopback rendezvous says nothing about the other hosts: the host name's address.
  c.reachableAddress = "127.0.0.1";
  EXPECT_EQ(tcp::chooseAddresses(c).second, own);
  c.reachableAddress = "";
  EXPECT_EQ(tcp::chooseAddresses(c).second, own);
  // An interface wins over the route.
  c.reachableAddress = own;
  c.interface = "lo";
  EXPECT_EQ(tcp::chooseAddresses(c).second, "127.0.0.1");
}

}  // namespace
}  // namespace hvd
