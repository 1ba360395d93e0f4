// ShmTransport with threads as ranks: setup, data plane, mailbox, wake/abort/deadline, peer loss
// by a closed transport, options.
#include <chrono>
#include <map>
#include <memory>
#include <thread>

#include <gtest/gtest.h>

#include "shm_test_util.h"

namespace hvd::shm::testing {
namespace {

using namespace std::chrono_literals;

Deadline soon() { return Deadline::after(10s); }

TEST(ShmTransport, BuildsForOneToSixRanks) {
  for (int n = 1; n <= 6; ++n) {
    std::atomic<int> built{0};
    runRanks(n, [&](int r, ShmTransport& t) {
      EXPECT_EQ(t.rank(), r);
      EXPECT_EQ(t.size(), n);
      EXPECT_EQ(t.name(), "shm");
      EXPECT_FALSE(t.usesNamedSegments());
      built++;
    });
    EXPECT_EQ(built.load(), n);
  }
}

TEST(ShmTransport, RegisteredAsShm) {
  ASSERT_TRUE(hasTransport("shm"));
  auto context = makeContext(0, 1, std::make_shared<SharedTestStore>(), uniqueJobId());
  auto t = makeTransport("shm", context);
  EXPECT_EQ(t->name(), "shm");
  EXPECT_EQ(t->size(), 1);
}

TEST(ShmTransport, RejectsRanksOnSeveralHosts) {
  auto context = makeContext(0, 2, std::make_shared<SharedTestStore>(), uniqueJobId());
  context.hostOf = {"a", "b"};
  EXPECT_THROW(ShmTransport(context, smallOptions()), InvalidArgument);
}

TEST(ShmTransport, NamedSegmentsAreUnlinkedRightAfterSetup) {
  ShmOptions options = smallOptions();
  options.named = true;
  runRanks(
      3,
      [&](int r, ShmTransport& t) {
        EXPECT_TRUE(t.usesNamedSegments());
        auto* space = t.sharedSpace({0, 1, 2}, soon());
        ASSERT_NE(space, nullptr);
        space->barrier(soon());
        // Every rank has mapped everything; nothing of this job may have a name any more.
        EXPECT_TRUE(devShmEntries("hvd-t" + std::to_string(::getpid()) + "-").empty());
        // And the transport still works.
        uint8_t out = static_cast<uint8_t>(r), in = 0;
        t.sendRecv((r + 1) % 3, &out, 1, (r + 2) % 3, &in, 1, soon());
        EXPECT_EQ(in, (r + 2) % 3);
      },
      options);
}

TEST(ShmTransport, RingExchangeOddSizes) {
  const size_t sizes[] = {0, 1, 7, 4095, 4096, 65536, 65537, (1 << 20) + 3};
  for (int n : {2, 3, 6}) {
    runRanks(n, [&](int r, ShmTransport& t) {
      int to = (r + 1) % n, from = (r + n - 1) % n;
      for (size_t bytes : sizes) {
        auto out = patternBytes(r, to, bytes);
        std::vector<uint8_t> in(bytes, 0xEE);
        t.sendRecv(to, out.data(), bytes, from, in.data(), bytes, soon());
        ASSERT_EQ(in, patternBytes(from, r, bytes)) << "n=" << n << " bytes=" << bytes;
      }
    });
  }
}

TEST(ShmTransport, SendRecvLargerThanRingStreams) {
  // 64 MiB through a 1 MiB ring, in both directions at once, then one way with send/recv.
  ShmOptions options = smallOptions();
  options.ringBytes = 1 << 20;
  const size_t bytes = size_t{64} << 20;
  runRanks(
      2,
      [&](int r, ShmTransport& t) {
        int peer = 1 - r;
        auto out = patternBytes(r, peer, bytes);
        std::vector<uint8_t> in(bytes);
        t.sendRecv(peer, out.data(), bytes, peer, in.data(), bytes, Deadline::after(60s));
        ASSERT_TRUE(in == patternBytes(peer, r, bytes));
        if (r == 0) {
          t.send(1, out.data(), bytes, Deadline::after(60s));
        } else {
          std::fill(in.begin(), in.end(), 0);
          t.recv(0, in.data(), bytes, Deadline::after(60s));
          ASSERT_TRUE(in == patternBytes(0, 1, bytes));
        }
      },
      options);
}

TEST(ShmTransport, PairwiseSendThenRecvWithMessagesBiggerThanRing) {
  // Every pair exchanges with blocking send/recv, lower rank sending first: the sender blocks on
  // a full ring until the receiver drains it.
  const size_t bytes = 200000;  // > 64 KiB ring
  runRanks(4, [&](int r, ShmTransport& t) {
    for (int p = 0; p < 4; ++p) {
      if (p == r) continue;
      auto out = patternBytes(r, p, bytes + p);
      std::vector<uint8_t> in(bytes + r);
      if (r < p) {
        t.send(p, out.data(), out.size(), soon());
        t.recv(p, in.data(), in.size(), soon());
      } else {
        t.recv(p, in.data(), in.size(), soon());
        t.send(p, out.data(), out.size(), soon());
      }
      ASSERT_EQ(in, patternBytes(p, r, bytes + r));
    }
  });
}

TEST(ShmTransport, ManySmallMessagesKeepOrder) {
  runRanks(3, [&](int r, ShmTransport& t) {
    int to = (r + 1) % 3, from = (r + 2) % 3;
    for (uint32_t i = 0; i < 20000; ++i) {
      uint32_t out = i * 3 + static_cast<uint32_t>(r), in = 0;
      t.sendRecv(to, &out, sizeof out, from, &in, sizeof in, soon());
      ASSERT_EQ(in, i * 3 + static_cast<uint32_t>(from));
    }
  });
}

TEST(ShmTransport, SelfSendRecv) {
  runRanks(2, [&](int r, ShmTransport& t) {
    auto out = patternBytes(r, r, 100000);
    std::vector<uint8_t> in(out.size());
    t.sendRecv(r, out.data(), out.size(), r, in.data(), in.size(), soon());
    EXPECT_EQ(in, out);
    t.send(r, out.data(), 10, soon());
    t.send(r, out.data() + 10, 5, soon());
    std::vector<uint8_t> small(15);
    t.recv(r, small.data(), 15, soon());
    EXPECT_TRUE(std::equal(small.begin(), small.end(), out.begin()));
    EXPECT_THROW(t.recv(r, small.data(), 1, soon()), Error);
  });
}

TEST(ShmTransport, RejectsBadPeer) {
  runRanks(2, [&](int r, ShmTransport& t) {
    uint8_t b = 0;
    EXPECT_THROW(t.send(2, &b, 1, soon()), InvalidArgument);
    EXPECT_THROW(t.recv(-1, &b, 1, soon()), InvalidArgument);
    EXPECT_THROW(t.post(5, &b, 1), InvalidArgument);
  });
}

TEST(ShmTransport, RecvTimesOutNamingThePeer) {
  runRanks(2, [&](int r, ShmTransport& t) {
    if (r != 0) return;
    uint8_t b;
    auto start = std::chrono::steady_clock::now();
    try {
      t.recv(1, &b, 1, Deadline::after(150ms));
      ADD_FAILURE() << "recv returned";
    } catch (const Timeout& e) {
      EXPECT_NE(std::string(e.what()).find("from rank 1"), std::string::npos) << e.what();
    }
    auto took = std::chrono::steady_clock::now() - start;
    EXPECT_GE(took, 140ms);
    EXPECT_LT(took, 2s);
  });
}

// ---- Mailbox ----------------------------------------------------------------------------

std::vector<uint8_t> messageBytes(int from, int index) {
  // Sizes cycle through 0, small, and larger than the 16 KiB mailbox ring.
  static const size_t sizes[] = {0, 1, 13, 900, 16 << 10, 40000, 5};
  return patternBytes(from, index, sizes[index % 7] + static_cast<size_t>(from));
}

TEST(ShmTransport, MailboxOrderFromSeveralSenders) {
  const int n = 5, perSender = 60;
  runRanks(n, [&](int r, ShmTransport& t) {
    if (r != 0) {
      for (int i = 0; i < perSender; ++i) {
        auto m = messageBytes(r, i);
        t.post(0, m.data(), m.size());
      }
      // Keep draining our outbox until rank 0 confirms it has everything.
      uint8_t done;
      t.recv(0, &done, 1, soon());
      return;
    }
    std::map<int, int> next;
    int received = 0;
    auto deadline = soon();
    while (received < (n - 1) * perSender) {
      while (auto m = t.poll()) {
        ASSERT_GE(m->from, 1);
        ASSERT_LT(m->from, n);
        int i = next[m->from]++;
        ASSERT_EQ(m->bytes, messageBytes(m->from, i)) << "from " << m->from << " #" << i;
        received++;
      }
      if (received < (n - 1) * perSender) {
        ASSERT_TRUE(t.waitForMessage(deadline));
      }
    }
    EXPECT_FALSE(t.poll().has_value());
    for (int p = 1; p < n; ++p) {
      uint8_t done = 1;
      t.send(p, &done, 1, soon());
    }
  });
}

TEST(ShmTransport, PostNeverBlocksAndOutboxDrainsWhileWaiting) {
  // Both ranks post 2 MiB in big messages to each other without reading (a 16 KiB ring), then
  // rank 0 waits on the data plane while rank 1 reads its mailbox: rank 0's wait must keep
  // pushing its outbox.
  const int count = 32;
  const size_t each = 64 << 10;
  runRanks(2, [&](int r, ShmTransport& t) {
    int peer = 1 - r;
    for (int i = 0; i < count; ++i) {
      auto m = patternBytes(r, i, each);
      t.post(peer, m.data(), m.size());
    }
    auto readAll = [&] {
      int got = 0;
      auto deadline = soon();
      while (got < count) {
        while (auto m = t.poll()) {
          ASSERT_EQ(m->from, peer);
          ASSERT_EQ(m->bytes, patternBytes(peer, got, each));
          got++;
        }
        if (got < count) {
          ASSERT_TRUE(t.waitForMessage(deadline));
        }
      }
    };
    uint8_t token = 7;
    if (r == 1) {
      readAll();
      t.send(0, &token, 1, soon());
    } else {
      t.recv(1, &token, 1, soon());  // only completes if our outbox drained meanwhile
      readAll();
    }
  });
}

TEST(ShmTransport, OversizedPostsArriveWithoutFurtherCallsFromThePoster) {
  // Rank 1 posts far more than the mailbox ring holds and then makes no transport call at all
  // (it blocks outside the transport): its helper thread must keep delivering.
  const int count = 24;
  const size_t each = 50000;
  std::atomic<bool> received{false};
  runRanks(2, [&](int r, ShmTransport& t) {
    if (r == 1) {
      for (int i = 0; i < count; ++i) {
        auto m = patternBytes(1, i, each);
        t.post(0, m.data(), m.size());
      }
      auto until = std::chrono::steady_clock::now() + 10s;
      while (!received.load() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(1ms);
      return;
    }
    int got = 0;
    auto deadline = soon();
    while (got < count) {
      while (auto m = t.poll()) {
        ASSERT_EQ(m->bytes, patternBytes(1, got, each));
        got++;
      }
      if (got < count) {
        ASSERT_TRUE(t.waitForMessage(deadline));
      }
    }
    received = true;
  });
}

TEST(ShmTransport, PostToSelf) {
  runRanks(2, [&](int r, ShmTransport& t) {
    uint8_t a[3] = {1, 2, 3};
    t.post(r, a, 3);
    t.post(r, a, 0);
    ASSERT_TRUE(t.waitForMessage(Deadline::after(0ms)));
    auto m = t.poll();
    ASSERT_TRUE(m.has_value());
    EXPECT_EQ(m->from, r);
    EXPECT_EQ(m->bytes, std::vector<uint8_t>(a, a + 3));
    m = t.poll();
    ASSERT_TRUE(m.has_value());
    EXPECT_TRUE(m->bytes.empty());
    EXPECT_FALSE(t.poll().has_value());
  });
}

TEST(ShmTransport, WaitForMessageDeadlineAndWake) {
  runRanks(2, [&](int r, ShmTransport& t) {
    if (r != 0) return;
    auto start = std::chrono::steady_clock::now();
    EXPECT_FALSE(t.waitForMessage(Deadline::after(100ms)));
    EXPECT_GE(std::chrono::steady_clock::now() - start, 95ms);

    // wake() before the wait: the next wait returns at once, the one after does not.
    t.wake();
    EXPECT_TRUE(t.waitForMessage(Deadline::after(5s)));
    EXPECT_FALSE(t.waitForMessage(Deadline::after(20ms)));

    // wake() from another thread while blocked.
    start = std::chrono::steady_clock::now();
    std::thread waker([&] {
      std::this_thread::sleep_for(50ms);
      t.wake();
    });
    EXPECT_TRUE(t.waitForMessage(Deadline::after(10s)));
    auto took = std::chrono::steady_clock::now() - start;
    waker.join();
    EXPECT_LT(took, 2s);
    EXPECT_FALSE(t.poll().has_value());
  });
}

TEST(ShmTransport, WaitForMessageWakesOnPost) {
  runRanks(2, [&](int r, ShmTransport& t) {
    uint8_t b = 42;
    if (r == 1) {
      std::this_thread::sleep_for(150ms);  // let rank 0 fall asleep in the futex
      t.post(0, &b, 1);
      return;
    }
    auto start = std::chrono::steady_clock::now();
    ASSERT_TRUE(t.waitForMessage(Deadline::after(10s)));
    EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
    auto m = t.poll();
    ASSERT_TRUE(m.has_value());
    EXPECT_EQ(m->from, 1);
    EXPECT_EQ(m->bytes, std::vector<uint8_t>{42});
  });
}

// ---- Failure ----------------------------------------------------------------------------

TEST(ShmTransport, AbortInterruptsBlockedCallsAndLatches) {
  runRanks(2, [&](int r, ShmTransport& t) {
    if (r != 0) return;
    std::thread aborter([&] {
      std::this_thread::sleep_for(100ms);
      t.abort("test abort reason");
    });
    uint8_t b;
    auto start = std::chrono::steady_clock::now();
    try {
      t.recv(1, &b, 1, Deadline::after(20s));
      ADD_FAILURE() << "recv returned";
    } catch (const Aborted& e) {
      EXPECT_NE(std::string(e.what()).find("test abort reason"), std::string::npos);
    }
    EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
    aborter.join();
    EXPECT_THROW(t.send(1, &b, 1, soon()), Aborted);
    EXPECT_THROW(t.waitForMessage(soon()), Aborted);
    EXPECT_THROW(t.post(1, &b, 1), Aborted);
  });
}

TEST(ShmTransport, AbortWakesWaitForMessage) {
  runRanks(1, [&](int, ShmTransport& t) {
    std::thread aborter([&] {
      std::this_thread::sleep_for(100ms);
      t.abort("stop");
    });
    EXPECT_THROW(t.waitForMessage(Deadline::after(20s)), Aborted);
    aborter.join();
  });
}

TEST(ShmTransport, AbortFailsEveryLocalPeersWaitsAtOnce) {
  auto store = std::make_shared<SharedTestStore>();
  std::string job = uniqueJobId();
  std::atomic<bool> observed{false};
  std::thread one([&] {
    ShmTransport t(makeContext(1, 3, store, job), smallOptions());
    uint8_t b;
    auto start = std::chrono::steady_clock::now();
    // Waits on rank 2 (alive, silent): rank 0's abort must still end this wait.
    try {
      t.recv(2, &b, 1, Deadline::after(20s));
      ADD_FAILURE() << "recv returned";
    } catch (const PeerLost& e) {
      EXPECT_EQ(e.rank(), 0) << e.what();
      EXPECT_NE(std::string(e.what()).find("failed"), std::string::npos) << e.what();
      EXPECT_TRUE(e.peerAborted()) << e.what();
    }
    EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
    observed = true;
  });
  std::thread two([&] {
    ShmTransport t(makeContext(2, 3, store, job), smallOptions());
    while (!observed) std::this_thread::sleep_for(10ms);
  });
  ShmTransport t(makeContext(0, 3, store, job), smallOptions());
  std::this_thread::sleep_for(50ms);
  t.abort("test abort");
  EXPECT_THROW(t.send(1, &observed, 1, soon()), Aborted);
  one.join();
  two.join();
}

TEST(ShmTransport, ClosedPeerFailsWaitsAfterDrainingWhatItSent) {
  auto store = std::make_shared<SharedTestStore>();
  std::string job = uniqueJobId();
  std::thread one([&] {
    ShmTransport t(makeContext(1, 3, store, job), smallOptions());
    auto out = patternBytes(1, 0, 3000);
    t.send(0, out.data(), out.size(), soon());
    uint8_t m = 9;
    t.post(0, &m, 1);
    // Destroyed here: marks itself closed.
  });
  std::thread two([&] {
    ShmTransport t(makeContext(2, 3, store, job), smallOptions());
    uint8_t b;
    // Waits on rank 0: rank 1 (another peer) closing cleanly does not concern this wait, rank 0
    // closing does.
    try {
      t.recv(0, &b, 1, Deadline::after(20s));
      ADD_FAILURE() << "recv returned";
    } catch (const PeerLost& e) {
      EXPECT_EQ(e.rank(), 0) << e.what();
    }
  });
  auto t0 = std::make_unique<ShmTransport>(makeContext(0, 3, store, job), smallOptions());
  ShmTransport& t = *t0;
  one.join();
  std::vector<uint8_t> in(3000);
  t.recv(1, in.data(), in.size(), soon());  // still delivered
  EXPECT_EQ(in, patternBytes(1, 0, 3000));
  ASSERT_TRUE(t.waitForMessage(soon()));
  auto m = t.poll();
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->bytes, std::vector<uint8_t>{9});
  auto start = std::chrono::steady_clock::now();
  try {
    t.recv(1, in.data(), 1, Deadline::after(20s));
    ADD_FAILURE() << "recv returned";
  } catch (const PeerLost& e) {
    EXPECT_EQ(e.rank(), 1);
    EXPECT_NE(std::string(e.what()).find("rank 1"), std::string::npos) << e.what();
    EXPECT_FALSE(e.peerAborted()) << e.what();  // it closed its transport, it did not abort it
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
  // Latched: later operations fail too, even ones that could complete.
  EXPECT_THROW(t.send(2, in.data(), 1, soon()), PeerLost);
  t0.reset();  // rank 0 closes: now rank 2's wait fails
  two.join();
}

// ---- Options ----------------------------------------------------------------------------

TEST(ShmOptions, ParsesAndRoundsUp) {
  auto defaults = ShmOptions::fromEnvironment(mapEnvironment({}));
  EXPECT_EQ(defaults.ringBytes, size_t{1} << 20);
  EXPECT_EQ(defaults.mailboxBytes, size_t{256} << 10);
  EXPECT_EQ(defaults.spaceBytes, size_t{4} << 20);
  EXPECT_FALSE(defaults.named);
  auto set = ShmOptions::fromEnvironment(mapEnvironment({{"HOROVOD_SHM_RING_BYTES", "5000"},
                                                         {"HOROVOD_SHM_MAILBOX_BYTES", "65536"},
                                                         {"HOROVOD_SHM_SPACE_BYTES", "1000"},
                                                         {"HOROVOD_SHM_SPIN_US", "0"},
                                                         {"HOROVOD_SHM_NAMED", "1"}}));
  EXPECT_EQ(set.ringBytes, 8192u);
  EXPECT_EQ(set.mailboxBytes, 65536u);
  EXPECT_EQ(set.spaceBytes, 1000u);
  EXPECT_EQ(set.spin.count(), 0);
  EXPECT_TRUE(set.named);
  EXPECT_THROW(ShmOptions::fromEnvironment(mapEnvironment({{"HOROVOD_SHM_RING_BYTES", "100"}})), InvalidArgument);
  EXPECT_THROW(ShmOptions::fromEnvironment(mapEnvironment({{"HOROVOD_SHM_RING_BYTES", "1M"}})), InvalidArgument);
  EXPECT_THROW(ShmOptions::fromEnvironment(mapEnvironment({{"HOROVOD_SHM_SPIN_US", "-1"}})), InvalidArgument);
  // Unset spin knobs stay "auto" until the transport knows how many ranks share the CPUs.
  EXPECT_LT(defaults.spin.count(), 0);
  EXPECT_LT(defaults.busySpin.count(), 0);
  EXPECT_LT(set.busySpin.count(), 0);
}

TEST(ShmTransport, SpinDefaultsFollowOversubscription) {
  // As many ranks as CPUs or fewer: a short busy poll, then yields, then sleep.
  EXPECT_EQ(defaultSpin(2, 2).busySpin.count(), 5);
  EXPECT_EQ(defaultSpin(2, 2).spin.count(), 100);
  EXPECT_EQ(defaultSpin(1, 16).spin.count(), 100);
  // More ranks than CPUs: yield from the first poll, and keep polling far longer than a
  // message's round trip before sleeping.
  EXPECT_EQ(defaultSpin(4, 2).busySpin.count(), 0);
  EXPECT_EQ(defaultSpin(4, 2).spin.count(), 10000);
  EXPECT_GE(usableCpus(), 1);
}

TEST(ShmTransport, WorksWithoutSpinning) {
  ShmOptions options = smallOptions();
  options.spin = std::chrono::microseconds(0);
  runRanks(
      3,
      [&](int r, ShmTransport& t) {
        for (uint32_t i = 0; i < 2000; ++i) {
          uint32_t out = i + static_cast<uint32_t>(r) * 100000, in = 0;
          int from = (r + 2) % 3;
          t.sendRecv((r + 1) % 3, &out, 4, from, &in, 4, soon());
          ASSERT_EQ(in, i + static_cast<uint32_t>(from) * 100000);
        }
      },
      options);
}

}  // namespace
}  // namespace hvd::shm::testing
