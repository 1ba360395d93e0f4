// SharedSpace of the shm transport, threads as ranks: buffers visible across ranks, barrier
// correctness over many rounds, subsets, caching, bad member lists, a closed member.
#include <cstring>
#include <thread>

#include <gtest/gtest.h>

#include "shm_test_util.h"

namespace hvd::shm::testing {
namespace {

using namespace std::chrono_literals;

Deadline soon() { return Deadline::after(10s); }

std::vector<int> allRanks(int n) {
  std::vector<int> v(n);
  for (int i = 0; i < n; ++i) v[i] = i;
  return v;
}

TEST(ShmSpace, BuffersAreSharedByAllMembers) {
  for (int n : {1, 2, 3, 5}) {
    runRanks(n, [&](int r, ShmTransport& t) {
      SharedSpace* space = t.sharedSpace(allRanks(n), soon());
      ASSERT_NE(space, nullptr);
      EXPECT_EQ(space->members(), allRanks(n));
      EXPECT_EQ(space->memberIndex(), r);
      EXPECT_EQ(space->capacity(), smallOptions().spaceBytes);
      EXPECT_EQ(t.sharedSpace(allRanks(n), soon()), space);  // cached
      auto* mine = static_cast<uint8_t*>(space->buffer(r));
      EXPECT_EQ(reinterpret_cast<uintptr_t>(mine) % 4096, 0u);
      // Fill all of our buffer, then read everyone's.
      auto bytes = patternBytes(r, 99, space->capacity());
      std::memcpy(mine, bytes.data(), bytes.size());
      space->barrier(soon());
      for (int m = 0; m < n; ++m) {
        ASSERT_EQ(std::memcmp(space->buffer(m), patternBytes(m, 99, space->capacity()).data(), space->capacity()), 0)
            << "member " << m << " seen from " << r;
      }
      space->barrier(soon());
    });
  }
}

TEST(ShmSpace, BarrierOrdersWritesOverManyRounds) {
  // Round k: every member writes k into its slot of every buffer... then after a barrier reads
  // all slots and expects k; a second barrier keeps the next round's writes from racing reads.
  const int n = 4, rounds = 3000;
  runRanks(n, [&](int r, ShmTransport& t) {
    SharedSpace* space = t.sharedSpace(allRanks(n), soon());
    for (int k = 1; k <= rounds; ++k) {
      for (int m = 0; m < n; ++m) {
        static_cast<volatile uint64_t*>(space->buffer(m))[r] = static_cast<uint64_t>(k) * 16 + r;
      }
      space->barrier(soon());
      for (int m = 0; m < n; ++m) {
        for (int j = 0; j < n; ++j) {
          uint64_t v = static_cast<volatile uint64_t*>(space->buffer(m))[j];
          ASSERT_EQ(v, static_cast<uint64_t>(k) * 16 + j) << "round " << k << " buffer " << m << " slot " << j;
        }
      }
      space->barrier(soon());
    }
  });
}

TEST(ShmSpace, PublishOrdersWritesBeforeTheValue) {
  // Member 0 writes round k into its buffer, then publishes k; the others await k and must see
  // the round's data. A barrier every 64 rounds lets member 0 reuse its buffer.
  const int n = 3, rounds = 3000;
  runRanks(n, [&](int r, ShmTransport& t) {
    SharedSpace* space = t.sharedSpace(allRanks(n), soon());
    auto* data = static_cast<volatile uint64_t*>(space->buffer(0));
    for (int k = 1; k <= rounds; ++k) {
      const size_t slot = static_cast<size_t>(k % 64) * 8;
      if (r == 0) {
        for (size_t i = 0; i < 8; ++i) data[slot + i] = static_cast<uint64_t>(k) * 8 + i;
        space->publish(static_cast<uint64_t>(k));
      } else {
        space->awaitPublished(0, static_cast<uint64_t>(k), soon());
        for (size_t i = 0; i < 8; ++i) ASSERT_EQ(data[slot + i], static_cast<uint64_t>(k) * 8 + i) << "round " << k;
      }
      if (k % 64 == 63) space->barrier(soon());
    }
  });
}

TEST(ShmSpace, AwaitPublishedFailsWhenThePublisherCloses) {
  auto store = std::make_shared<SharedTestStore>();
  std::string job = uniqueJobId();
  std::thread one([&] {
    ShmTransport t(makeContext(1, 2, store, job), smallOptions());
    SharedSpace* space = t.sharedSpace({0, 1}, soon());
    space->publish(1);
    space->barrier(soon());
  });
  ShmTransport t(makeContext(0, 2, store, job), smallOptions());
  SharedSpace* space = t.sharedSpace({0, 1}, soon());
  space->awaitPublished(1, 1, soon());
  space->barrier(soon());
  one.join();
  try {
    space->awaitPublished(1, 2, Deadline::after(20s));
    ADD_FAILURE() << "awaitPublished returned";
  } catch (const PeerLost& e) {
    EXPECT_EQ(e.rank(), 1);
  }
}

TEST(ShmSpace, AwaitPublishedTimesOutNamingThePublisher) {
  runRanks(2, [&](int r, ShmTransport& t) {
    SharedSpace* space = t.sharedSpace(allRanks(2), soon());
    if (r == 0) {
      try {
        space->awaitPublished(1, 5, Deadline::after(100ms));
        ADD_FAILURE() << "awaitPublished returned";
      } catch (const Timeout& e) {
        EXPECT_NE(std::string(e.what()).find("waiting for rank 1 to publish 5 (it published 0)"), std::string::npos)
            << e.what();
      }
    }
  });
}

TEST(ShmSpace, BarrierWithoutSpinning) {
  ShmOptions options = smallOptions();
  options.spin = std::chrono::microseconds(0);
  runRanks(
      3,
      [&](int r, ShmTransport& t) {
        SharedSpace* space = t.sharedSpace(allRanks(3), soon());
        auto* counters = static_cast<volatile uint64_t*>(space->buffer(0));
        for (int k = 1; k <= 300; ++k) {
          if (r == k % 3) counters[0] = k;
          space->barrier(soon());
          ASSERT_EQ(counters[0], static_cast<uint64_t>(k));
          space->barrier(soon());
        }
      },
      options);
}

TEST(ShmSpace, SubsetsGetTheirOwnSpaces) {
  runRanks(4, [&](int r, ShmTransport& t) {
    std::vector<int> pair = r < 2 ? std::vector<int>{0, 1} : std::vector<int>{2, 3};
    SharedSpace* mine = t.sharedSpace(pair, soon());
    SharedSpace* all = t.sharedSpace(allRanks(4), soon());
    ASSERT_NE(mine, all);
    EXPECT_EQ(mine->members(), pair);
    EXPECT_EQ(mine->memberIndex(), r % 2);
    static_cast<int*>(mine->buffer(r % 2))[0] = 100 + r;
    static_cast<int*>(all->buffer(r))[0] = 200 + r;
    // Pairs synchronise independently and in different numbers.
    for (int i = 0; i < (r < 2 ? 50 : 7); ++i) mine->barrier(soon());
    all->barrier(soon());
    EXPECT_EQ(static_cast<int*>(mine->buffer(1 - r % 2))[0], 100 + (r ^ 1));
    for (int m = 0; m < 4; ++m) EXPECT_EQ(static_cast<int*>(all->buffer(m))[0], 200 + m);
    all->barrier(soon());
  });
}

TEST(ShmSpace, RejectsBadMemberLists) {
  runRanks(3, [&](int r, ShmTransport& t) {
    EXPECT_THROW(t.sharedSpace({}, soon()), InvalidArgument);
    EXPECT_THROW(t.sharedSpace({1, 0, 2}, soon()), InvalidArgument);
    EXPECT_THROW(t.sharedSpace({0, 0, 1, 2}, soon()), InvalidArgument);
    EXPECT_THROW(t.sharedSpace({0, 1, 2, 3}, soon()), InvalidArgument);
    std::vector<int> others;
    for (int i = 0; i < 3; ++i) {
      if (i != r) others.push_back(i);
    }
    EXPECT_THROW(t.sharedSpace(others, soon()), InvalidArgument);
    auto* space = t.sharedSpace({r}, soon());  // a space of one works
    ASSERT_NE(space, nullptr);
    space->barrier(soon());
    EXPECT_THROW(space->buffer(1), Error);
  });
}

TEST(ShmSpace, BarrierFailsWhenAMemberCloses) {
  auto store = std::make_shared<SharedTestStore>();
  std::string job = uniqueJobId();
  std::thread one([&] {
    ShmTransport t(makeContext(1, 2, store, job), smallOptions());
    t.sharedSpace({0, 1}, soon())->barrier(soon());
  });
  ShmTransport t(makeContext(0, 2, store, job), smallOptions());
  SharedSpace* space = t.sharedSpace({0, 1}, soon());
  space->barrier(soon());
  one.join();
  try {
    space->barrier(Deadline::after(20s));
    ADD_FAILURE() << "barrier returned";
  } catch (const PeerLost& e) {
    EXPECT_EQ(e.rank(), 1);
  }
}

TEST(ShmSpace, BarrierTimesOutNamingMissingMembers) {
  runRanks(3, [&](int r, ShmTransport& t) {
    SharedSpace* space = t.sharedSpace(allRanks(3), soon());
    if (r == 0) {
      try {
        space->barrier(Deadline::after(100ms));
        ADD_FAILURE() << "barrier returned";
      } catch (const Timeout& e) {
        EXPECT_NE(std::string(e.what()).find("not arrived: rank 1, rank 2"), std::string::npos) << e.what();
      }
    }
  });
}

}  // namespace
}  // namespace hvd::shm::testing
