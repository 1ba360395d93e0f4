// Waiter's spin phase and PollPatience: a wait polls for the transport's spin or the thread's
// patience, whichever is longer, before it sleeps on the bell.
#include <atomic>
#include <chrono>
#include <thread>

#include <gtest/gtest.h>

#include "transport/poll_patience.h"
#include "transport/shm/waiter.h"

namespace hvd::shm {
namespace {

using namespace std::chrono;
using namespace std::chrono_literals;

TEST(PollPatience, ScopesRaiseTheFloorAndRestoreIt) {
  EXPECT_EQ(PollPatience::current(), 0us);
  {
    PollPatience::Scope outer(500us);
    EXPECT_EQ(PollPatience::current(), 500us);
    {
      PollPatience::Scope lower(100us);  // never lowers
      EXPECT_EQ(PollPatience::current(), 500us);
      PollPatience::Scope higher(2000us);
      EXPECT_EQ(PollPatience::current(), 2000us);
    }
    EXPECT_EQ(PollPatience::current(), 500us);
    std::thread([] { EXPECT_EQ(PollPatience::current(), 0us); }).join();  // per thread
  }
  EXPECT_EQ(PollPatience::current(), 0us);
}

// One wait for a flag that another thread sets after 60 ms; `patience` on the waiting thread.
// Returns whether the waiter was asleep on its bell 30 ms into the wait.
bool asleepDuringWait(microseconds patience) {
  SegmentHeader header{};
  Waiter waiter(0, &header, 0us, 0us);  // the transport's own spin: none
  std::atomic<bool> flag{false};
  std::atomic<bool> done{false};
  std::thread waiting([&] {
    PollPatience::Scope scope(patience);
    EXPECT_TRUE(waiter.wait([&] { return flag.load(); }, Deadline::after(10s)));
    done = true;
  });
  std::this_thread::sleep_for(30ms);
  const bool asleep = header.sleepers.load() > 0;
  std::this_thread::sleep_for(30ms);
  flag = true;
  Waiter::notify(&header);
  waiting.join();
  EXPECT_TRUE(done.load());
  return asleep;
}

TEST(Waiter, WithoutSpinOrPatienceItSleepsAtOnce) { EXPECT_TRUE(asleepDuringWait(0us)); }

TEST(Waiter, PatienceKeepsItPollingInsteadOfSleeping) {
  // 10 s of patience: still polling at 30 ms, and the flag is seen without a wake-up.
  EXPECT_FALSE(asleepDuringWait(10s));
}

}  // namespace
}  // namespace hvd::shm
