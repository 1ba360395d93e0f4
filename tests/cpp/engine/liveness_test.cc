// The liveness watch over a shared MemoryStore: a rank that never shows a sign of life is named
// after the timeout; one that departs (stop()) is not; a live one never is.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <cerrno>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "engine/liveness.h"
#include "store/memory_store.h"

namespace hvd::engine {
namespace {

using namespace std::chrono_literals;

struct Silence {
  std::mutex mu;
  int rank = -1;
  std::string message;
  std::atomic<int> calls{0};
  LivenessWatch::SilentFn fn() {
    return [this](int r, const std::string& m) {
      std::lock_guard<std::mutex> lock(mu);
      rank = r;
      message = m;
      calls++;
    };
  }
};

LivenessWatch::Options options(int rank, int size) {
  LivenessWatch::Options o;
  o.rank = rank;
  o.size = size;
  o.hostOf = std::vector<std::string>(size, "hostA");
  o.hostOf[size - 1] = "hostB";
  o.interval = 20ms;
  o.timeout = 200ms;
  return o;
}

TEST(Liveness, RankWithoutSignOfLifeIsNamed) {
  auto store = std::make_shared<MemoryStore>();
  Silence seen;
  auto start = std::chrono::steady_clock::now();
  LivenessWatch watch0(store, options(0, 3), seen.fn());
  LivenessWatch watch1(store, options(1, 3), Silence().fn());
  // Rank 2 never runs a watch: it is paused from the start.
  while (seen.calls == 0 && std::chrono::steady_clock::now() - start < 5s) std::this_thread::sleep_for(10ms);
  auto took = std::chrono::steady_clock::now() - start;
  ASSERT_EQ(seen.calls, 1);
  EXPECT_EQ(seen.rank, 2);
  EXPECT_NE(seen.message.find("Horovod lost rank 2 (host hostB): it stopped responding"), std::string::npos)
      << seen.message;
  EXPECT_GE(took, 200ms);
  EXPECT_LT(took, 2s);
}

TEST(Liveness, LiveAndDepartedRanksAreNotNamed) {
  auto store = std::make_shared<MemoryStore>();
  Silence seen0, seen1, seen2;
  LivenessWatch watch0(store, options(0, 3), seen0.fn());
  LivenessWatch watch1(store, options(1, 3), seen1.fn());
  {
    LivenessWatch watch2(store, options(2, 3), seen2.fn());
    std::this_thread::sleep_for(100ms);
  }  // rank 2 shuts down: marked departed
  std::this_thread::sleep_for(600ms);
  EXPECT_EQ(seen0.calls, 0) << seen0.message;
  EXPECT_EQ(seen1.calls, 0) << seen1.message;
  EXPECT_EQ(seen2.calls, 0) << seen2.message;
}

// The whole process stops (a paused VM, an overloaded machine): every watch and every heartbeat
// stalls alike, and nobody is named when it resumes.
TEST(Liveness, AStallOfEveryoneIsNoOnesSilence) {
  auto store = std::make_shared<MemoryStore>();
  Silence seen0, seen1;
  LivenessWatch watch0(store, options(0, 2), seen0.fn());
  LivenessWatch watch1(store, options(1, 2), seen1.fn());
  for (int stall = 0; stall < 4; ++stall) {
    std::this_thread::sleep_for(50ms);
    const pid_t self = getpid();
    const pid_t pauser = fork();
    ASSERT_GE(pauser, 0);
    if (pauser == 0) {
      kill(self, SIGSTOP);
      usleep(600 * 1000);  // 3x the timeout
      kill(self, SIGCONT);
      _exit(0);
    }
    int status = 0;
    while (waitpid(pauser, &status, 0) < 0 && errno == EINTR) {
    }
  }
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(seen0.calls, 0) << seen0.message;
  EXPECT_EQ(seen1.calls, 0) << seen1.message;
}

// A store whose host stalls: while `stalledUntil` lies ahead, every call waits for it, then
// succeeds (late, as a store in a descheduled process answers once it runs again). Each rank's
// watch has its own view, so one rank can resume later than the store.
class StallingStore : public Store {
 public:
  explicit StallingStore(std::shared_ptr<Store> inner) : inner_(std::move(inner)) {}
  void stallUntil(std::chrono::steady_clock::time_point t) { until_ = t.time_since_epoch().count(); }
  void set(const std::string& key, const Bytes& value, Deadline deadline) override {
    pause();
    inner_->set(key, value, deadline);
  }
  Bytes get(const std::string& key, Deadline deadline) override {
    pause();
    return inner_->get(key, deadline);
  }
  int64_t add(const std::string& key, int64_t delta, Deadline deadline) override {
    pause();
    return inner_->add(key, delta, Deadline::never());
  }
  void wait(const std::vector<std::string>& keys, Deadline deadline) override {
    pause();
    inner_->wait(keys, deadline);
  }

 private:
  void pause() {
    const std::chrono::steady_clock::time_point until{std::chrono::steady_clock::duration(until_.load())};
    std::this_thread::sleep_until(until);
  }
  std::shared_ptr<Store> inner_;
  std::atomic<std::chrono::steady_clock::duration::rep> until_{0};
};

// The store's host and a rank's process stall together for 3x the timeout and the rank resumes a
// little after the store: the watch's own round trip was late, so that time is nobody's silence.
TEST(Liveness, AStoreThatAnswersLateIsNoOnesSilence) {
  auto shared = std::make_shared<MemoryStore>();
  auto view0 = std::make_shared<StallingStore>(shared);
  auto view1 = std::make_shared<StallingStore>(shared);
  Silence seen0, seen1;
  LivenessWatch watch0(view0, options(0, 2), seen0.fn());
  LivenessWatch watch1(view1, options(1, 2), seen1.fn());
  for (int stall = 0; stall < 4; ++stall) {
    std::this_thread::sleep_for(50ms);
    const auto now = std::chrono::steady_clock::now();
    view1->stallUntil(now + 650ms);
    view0->stallUntil(now + 600ms);
    std::this_thread::sleep_for(650ms);
  }
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(seen0.calls, 0) << seen0.message;
  EXPECT_EQ(seen1.calls, 0) << seen1.message;
}

TEST(Liveness, WorkersWatchRankZero) {
  auto store = std::make_shared<MemoryStore>();
  Silence seen;
  LivenessWatch watch1(store, options(1, 2), seen.fn());  // rank 0 never shows up
  auto start = std::chrono::steady_clock::now();
  while (seen.calls == 0 && std::chrono::steady_clock::now() - start < 5s) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(seen.rank, 0);
}

}  // namespace
}  // namespace hvd::engine
