#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <numeric>
#include <thread>

#include "support/rank_threads.h"
#include "transport/local/local_transport.h"

namespace hvd {
namespace {

using namespace std::chrono_literals;

std::string freshJob() {
  static std::atomic<int> counter{0};
  return "local-test-" + std::to_string(counter++);
}

// Runs body(transport) on n threads; rethrows the first rank's exception.
void runRanks(int n, const std::function<void(LocalTransport&)>& body, LocalTransportOptions options = {},
              std::string job = "") {
  if (job.empty()) job = freshJob();
  test::runRankThreads(n, [&](int r) {
    LocalTransport transport(job, r, n, options);
    body(transport);
  });
}

Deadline soon() { return Deadline::after(10s); }

TEST(LocalTransport, StreamsAreFifoByteStreams) {
  runRanks(2, [](LocalTransport& t) {
    if (t.rank() == 0) {
      for (int i = 0; i < 100; ++i) {
        std::vector<uint8_t> msg(i + 1, static_cast<uint8_t>(i));
        t.send(1, msg.data(), msg.size(), soon());
      }
    } else {
      // Read with boundaries unrelated to the sends: 5050 bytes as 101 reads of 50.
      std::vector<uint8_t> all(5050);
      for (size_t off = 0; off < all.size(); off += 50) t.recv(0, all.data() + off, 50, soon());
      size_t pos = 0;
      for (int i = 0; i < 100; ++i) {
        for (int k = 0; k <= i; ++k) ASSERT_EQ(all[pos++], i);
      }
    }
  });
}

TEST(LocalTransport, SendRecvRingDoesNotDeadlock) {
  for (int n : {1, 2, 3, 8}) {
    runRanks(n, [n](LocalTransport& t) {
      const size_t bytes = 4 << 20;  // large: a bounded transport would block here
      std::vector<uint8_t> out(bytes, static_cast<uint8_t>(t.rank())), in(bytes);
      int right = (t.rank() + 1) % n, left = (t.rank() + n - 1) % n;
      t.sendRecv(right, out.data(), bytes, left, in.data(), bytes, soon());
      ASSERT_EQ(in[0], left);
      ASSERT_EQ(in[bytes - 1], left);
      // to == from, and zero-sized halves.
      t.sendRecv(right, out.data(), 0, left, in.data(), 0, soon());
      if (n == 2) {
        t.sendRecv(1 - t.rank(), out.data(), 10, 1 - t.rank(), in.data(), 10, soon());
        ASSERT_EQ(in[9], 1 - t.rank());
      }
    });
  }
}

TEST(LocalTransport, RecvTimesOut) {
  runRanks(2, [](LocalTransport& t) {
    if (t.rank() == 1) {
      uint8_t b;
      auto start = std::chrono::steady_clock::now();
      EXPECT_THROW(t.recv(0, &b, 1, Deadline::after(100ms)), Timeout);
      EXPECT_GE(std::chrono::steady_clock::now() - start, 90ms);
    }
    // Keep rank 0 alive past the timeout so it is a timeout, not a lost peer.
    std::this_thread::sleep_for(t.rank() == 0 ? 300ms : 0ms);
  });
}

TEST(LocalTransport, MailboxPostPollWaitWake) {
  runRanks(3, [](LocalTransport& t) {
    if (t.rank() != 0) {
      std::string text = "hello from " + std::to_string(t.rank());
      t.post(0, text.data(), text.size());
      t.post(0, text.data(), 1);
    } else {
      std::vector<std::string> got;
      Deadline deadline = soon();
      while (got.size() < 4) {
        auto message = t.poll();
        if (!message) {
          ASSERT_TRUE(t.waitForMessage(deadline));
          continue;
        }
        got.push_back(std::to_string(message->from) + ":" + std::string(message->bytes.begin(), message->bytes.end()));
      }
      // Per-sender order is kept.
      for (int from : {1, 2}) {
        auto first = std::find(got.begin(), got.end(), std::to_string(from) + ":hello from " + std::to_string(from));
        auto second = std::find(got.begin(), got.end(), std::to_string(from) + ":h");
        ASSERT_NE(first, got.end());
        ASSERT_NE(second, got.end());
        EXPECT_LT(first - got.begin(), second - got.begin());
      }
      EXPECT_FALSE(t.poll().has_value());
      EXPECT_FALSE(t.waitForMessage(Deadline::after(20ms)));  // deadline: false
      // wake() from another thread interrupts the wait.
      std::thread waker([&] {
        std::this_thread::sleep_for(50ms);
        t.wake();
      });
      auto start = std::chrono::steady_clock::now();
      EXPECT_TRUE(t.waitForMessage(Deadline::after(10s)));
      EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
      waker.join();
      // A wake before the wait is not lost.
      t.wake();
      EXPECT_TRUE(t.waitForMessage(Deadline::after(10s)));
    }
  });
}

TEST(LocalTransport, AbortFailsSelfAndPeers) {
  std::atomic<bool> aborted{false};
  runRanks(3, [&](LocalTransport& t) {
    uint8_t b = 0;
    if (t.rank() == 0) {
      std::this_thread::sleep_for(50ms);
      t.abort("test abort");
      aborted = true;
      EXPECT_THROW(t.recv(1, &b, 1, soon()), Aborted);
      EXPECT_THROW(t.send(1, &b, 1, soon()), Aborted);
      EXPECT_THROW(t.waitForMessage(soon()), Aborted);
      // Stay alive until peers observed the abort.
      std::this_thread::sleep_for(200ms);
    } else if (t.rank() == 1) {
      // Waiting on rank 2 (alive) still notices rank 0's death.
      try {
        t.recv(2, &b, 1, soon());
        FAIL() << "expected PeerLost";
      } catch (const PeerLost& e) {
        EXPECT_EQ(e.rank(), 0);
        EXPECT_TRUE(e.peerAborted()) << e.what();
      }
    } else {
      try {
        t.waitForMessage(soon());
        FAIL() << "expected PeerLost";
      } catch (const PeerLost& e) {
        EXPECT_EQ(e.rank(), 0);
        EXPECT_TRUE(e.peerAborted()) << e.what();
      }
      // Stay alive until rank 1 (waiting on this rank) observed rank 0's abort.
      std::this_thread::sleep_for(200ms);
    }
  });
  EXPECT_TRUE(aborted);
}

TEST(LocalTransport, AbortFromAnotherThreadInterruptsRecv) {
  runRanks(2, [](LocalTransport& t) {
    if (t.rank() == 0) {
      std::thread killer([&] {
        std::this_thread::sleep_for(50ms);
        t.abort("shutdown");
      });
      uint8_t b;
      EXPECT_THROW(t.recv(1, &b, 1, soon()), Aborted);
      killer.join();
    }
    std::this_thread::sleep_for(t.rank() == 1 ? 200ms : 0ms);
  });
}

TEST(LocalTransport, DepartedPeerIsLostAfterItsDataIsRead) {
  runRanks(2, [](LocalTransport& t) {
    if (t.rank() == 0) {
      uint8_t b = 42;
      t.send(1, &b, 1, soon());
      return;  // transport destroyed
    }
    std::this_thread::sleep_for(50ms);
    uint8_t b = 0;
    t.recv(0, &b, 1, soon());
    EXPECT_EQ(b, 42);
    try {
      t.recv(0, &b, 1, soon());
      FAIL() << "expected PeerLost";
    } catch (const PeerLost& e) {
      EXPECT_EQ(e.rank(), 0);
      EXPECT_FALSE(e.peerAborted()) << e.what();  // it left, it did not abort
    }
  });
}

TEST(LocalTransport, SharedSpaceBuffersAndBarrier) {
  LocalTransportOptions options;
  options.sharedCapacity = 4096;
  const int n = 4;
  runRanks(
      n,
      [&](LocalTransport& t) {
        std::vector<int> all = {0, 1, 2, 3};
        SharedSpace* space = t.sharedSpace(all, soon());
        ASSERT_NE(space, nullptr);
        EXPECT_EQ(space, t.sharedSpace(all, soon()));  // cached
        EXPECT_EQ(space->members(), all);
        EXPECT_EQ(space->memberIndex(), t.rank());
        EXPECT_EQ(space->capacity(), 4096u);
        for (int round = 0; round < 50; ++round) {
          std::memset(space->buffer(t.rank()), round + t.rank(), 4096);
          space->barrier(soon());
          for (int j = 0; j < n; ++j) {
            auto* p = static_cast<uint8_t*>(space->buffer(j));
            ASSERT_EQ(p[0], static_cast<uint8_t>(round + j));
            ASSERT_EQ(p[4095], static_cast<uint8_t>(round + j));
          }
          space->barrier(soon());
        }
        // A subset gets its own space.
        if (t.rank() % 2 == 1) {
          SharedSpace* odd = t.sharedSpace({1, 3}, soon());
          EXPECT_EQ(odd->memberIndex(), t.rank() / 2);
          odd->barrier(soon());
        }
      },
      options);
}

TEST(LocalTransport, SharedSpaceDisabled) {
  LocalTransportOptions options;
  options.sharedMemory = false;
  runRanks(2, [](LocalTransport& t) { EXPECT_EQ(t.sharedSpace({0, 1}, soon()), nullptr); }, options);
}

TEST(LocalTransport, SharedBarrierSeesLostPeer) {
  runRanks(2, [](LocalTransport& t) {
    SharedSpace* space = t.sharedSpace({0, 1}, soon());
    if (t.rank() == 0) {
      std::this_thread::sleep_for(50ms);
      t.abort("die");
      std::this_thread::sleep_for(200ms);
    } else {
      EXPECT_THROW(space->barrier(soon()), PeerLost);
    }
  });
}

TEST(LocalTransport, RegisteredAsLocal) {
  ASSERT_TRUE(hasTransport("local"));
  std::string job = freshJob();
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      TransportContext context;
      context.rank = r;
      context.size = 2;
      context.jobId = job;
      auto t = makeTransport("local", context);
      EXPECT_EQ(t->name(), "local");
      int value = r;
      int other = -1;
      t->sendRecv(1 - r, &value, sizeof value, 1 - r, &other, sizeof other, soon());
      if (other == 1 - r) ok++;
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(ok.load(), 2);
}

TEST(LocalTransport, HubIsReleasedAndRejectsMisuse) {
  std::string job = freshJob();
  runRanks(2, [](LocalTransport&) {}, {}, job);
  // Same job id again, different size: the old hub is gone.
  runRanks(3, [](LocalTransport& t) { EXPECT_EQ(t.size(), 3); }, {}, job);
  EXPECT_THROW(LocalTransport(job, 5, 3), InvalidArgument);
  LocalTransportOptions quick;
  quick.connectTimeout = 50ms;
  EXPECT_THROW(LocalTransport(freshJob(), 0, 2, quick), Timeout);  // rank 1 never comes
}

}  // namespace
}  // namespace hvd
