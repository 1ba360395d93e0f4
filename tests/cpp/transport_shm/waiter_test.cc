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

// Waits on another thread, with `patience`, for a flag set only after `observe`: returns whether
// the waiter went to sleep on its bell meanwhile (it stops looking once it has).
bool sleepsWithin(microseconds patience, milliseconds observe) {
  SegmentHeader header{};
  Waiter waiter(0, &header, 0us, 0us);  // the transport's own spin: none
  std::atomic<bool> flag{false};
  std::thread waiting([&] {
    PollPatience::Scope scope(patience);
    EXPECT_TRUE(waiter.wait([&] { return flag.load(); }, Deadline::after(60s)));
  });
  bool slept = false;
  for (auto end = steady_clock::now() + observe; !slept && steady_clock::now() < end;) {
    slept = header.sleepers.load() > 0;
    std::this_thread::sleep_for(1ms);
  }
  flag = true;
  Waiter::notify(&header);
  waiting.join();
  return slept;
}

TEST(Waiter, WithoutSpinOrPatienceItSleepsAtOnce) { EXPECT_TRUE(sleepsWithin(0us, 5000ms)); }

TEST(Waiter, PatienceKeepsItPollingInsteadOfSleeping) {
  // 60 s of patience: still polling after 100 ms, and the flag is seen without a wake-up.
  EXPECT_FALSE(sleepsWithin(60s, 100ms));
}

}  // namespace
}  // namespace hvd::shm
