// Caller-driven progress (engine/drive_gate.h): a thread that waits for an operation runs the
// engine itself while the background thread leaves fresh work to callers. Results must not depend
// on which thread ran the engine; the background thread must still finish work nobody waits for;
// several threads of one rank may enqueue and wait at once.
#include <gtest/gtest.h>

#include <atomic>

#include <chrono>
#include <thread>

#include "cluster.h"
#include "typed.h"

namespace hvd::test {
namespace {

// `steps` training-like steps of `tensors` allreduces enqueued back to back, then waited for;
// checks every result.
void runSteps(engine::Runtime& rt, int rank, int steps, int tensors, const std::string& prefix) {
  for (int step = 0; step < steps; ++step) {
    std::vector<std::vector<float>> in(static_cast<size_t>(tensors)), out(static_cast<size_t>(tensors));
    std::vector<WorkPtr> works;
    for (int t = 0; t < tensors; ++t) {
      in[t].assign(static_cast<size_t>(1 + t % 7), static_cast<float>(rank + step + t));
      out[t].resize(in[t].size());
      works.push_back(rt.allreduce(view(in[t], DataType::kFloat32), view(out[t], DataType::kFloat32),
                                   named(prefix + std::to_string(t))));
    }
    for (int t = 0; t < tensors; ++t) {
      works[t]->wait();
      const int n = rt.topology().size;
      for (float v : out[t]) ASSERT_EQ(v, static_cast<float>(n * (step + t) + n * (n - 1) / 2)) << prefix << t;
    }
  }
}

TEST(CallerProgress, ResultsDoNotDependOnWhichThreadRunsTheEngine) {
  // 0: the background thread does everything; 200: the default; 100000: callers nearly always.
  for (const char* window : {"0", "200", "100000"}) {
    SCOPED_TRACE(std::string("HOROVOD_CALLER_PROGRESS_US=") + window);
    Cluster cluster(3, {{"HOROVOD_CALLER_PROGRESS_US", window}});
    cluster.run([&](int rank, engine::Runtime& rt) {
      runSteps(rt, rank, 20, 30, "g.");
      engine::RuntimeStats stats = rt.stats();
      EXPECT_GT(stats.cachedTensors, 0u);
      if (std::string(window) == "0") {
        EXPECT_EQ(stats.callerDrives, 0u);
        EXPECT_EQ(stats.parks, 0u);
      }
      // With callers allowed to drive, whether one did is timing, not an event: under load
      // (ASan beside a CPU hog) every wait of a run found its step already completed by the
      // enqueueing threads and the background thread (callerDrives 0 on two of three ranks),
      // and whether the background thread ever parks is timing too. That callers drive is
      // checked over 300 synchronous waits (WorkNobodyWaitsForAfterCallersDroveStillCompletes).
    });
  }
}

// An allreduce (2 ranks) that no thread waits for, only polls: the background thread must run
// it after its park. Checks the result.
void allreduceNobodyWaitsFor(engine::Runtime& rt, int rank) {
  std::vector<float> in(4, static_cast<float>(rank + 1)), out(4);
  WorkPtr work = rt.allreduce(view(in, DataType::kFloat32), view(out, DataType::kFloat32), named("unwatched"));
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!work->isCompleted() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  ASSERT_TRUE(work->isCompleted());
  EXPECT_EQ(out, std::vector<float>(4, 3.0f));
}

TEST(CallerProgress, WorkNobodyWaitsForStillCompletes) {
  Cluster cluster(2);
  cluster.run([&](int rank, engine::Runtime& rt) {
    allreduceNobodyWaitsFor(rt, rank);
    EXPECT_EQ(rt.stats().callerDrives, 0u);
  });
}

// After a phase in which callers drove every operation, the background thread's parks are long
// (DriveGate::nextPark); work nobody waits for must still be taken over.
TEST(CallerProgress, WorkNobodyWaitsForAfterCallersDroveStillCompletes) {
  Cluster cluster(2);
  cluster.run([&](int rank, engine::Runtime& rt) {
    for (int i = 0; i < 300; ++i) {
      std::vector<int32_t> in(2, rank + i), out(2);
      rt.allreduce(view(in, DataType::kInt32), view(out, DataType::kInt32), named("driven"))->wait();
      ASSERT_EQ(out, std::vector<int32_t>(2, 1 + 2 * i));
    }
    const uint64_t drives = rt.stats().callerDrives;
    EXPECT_GT(drives, 0u);
    allreduceNobodyWaitsFor(rt, rank);
    EXPECT_EQ(rt.stats().callerDrives, drives);
  });
}

TEST(CallerProgress, ParksGrowWhileCallersDriveAndFallBackOtherwise) {
  using engine::DriveGate;
  using std::chrono::microseconds;
  const microseconds window(200);
  microseconds wait = window;
  std::vector<int64_t> seen;
  for (int i = 0; i < 5; ++i) seen.push_back((wait = DriveGate::nextPark(wait, window, true)).count());
  EXPECT_EQ(seen, (std::vector<int64_t>{400, 800, 1000, 1000, 1000}));  // capped at kLongestPark
  EXPECT_EQ(DriveGate::nextPark(wait, window, false), window);
  // A window longer than kLongestPark is never shortened nor lengthened.
  const microseconds wide(100000);
  EXPECT_EQ(DriveGate::nextPark(wide, wide, true), wide);
  EXPECT_EQ(DriveGate::nextPark(wide, wide, false), wide);
}

TEST(CallerProgress, SeveralThreadsPerRankEnqueueAndWaitAtOnce) {
  constexpr int kThreads = 4;
  Cluster cluster(2);
  cluster.run([&](int rank, engine::Runtime& rt) {
    std::vector<std::thread> threads;
    std::vector<std::string> failures(kThreads);
    for (int k = 0; k < kThreads; ++k) {
      threads.emplace_back([&, k] {
        try {
          // Batches on some threads, synchronous single ops on others: both drive.
          if (k % 2 == 0) {
            runSteps(rt, rank, 15, 10, "t" + std::to_string(k) + ".");
          } else {
            for (int i = 0; i < 60; ++i) {
              std::vector<int32_t> in(3, rank + i), out(3);
              rt.allreduce(view(in, DataType::kInt32), view(out, DataType::kInt32), named("s" + std::to_string(k)))
                  ->wait();
              if (out != std::vector<int32_t>(3, 1 + 2 * i))
                throw std::runtime_error("wrong sum at " + std::to_string(i));
            }
          }
        } catch (const std::exception& e) {
          failures[k] = e.what();
        }
      });
    }
    for (auto& t : threads) t.join();
    for (int k = 0; k < kThreads; ++k) EXPECT_EQ(failures[k], "") << "thread " << k;
  });
}

TEST(CallerProgress, WaitForGivesUpAtItsDeadlineWhileDriving) {
  Cluster cluster(2, {{"HOROVOD_CALLER_PROGRESS_US", "100000"}});
  std::atomic<bool> timedOut{false};
  cluster.run([&](int rank, engine::Runtime& rt) {
    std::vector<float> in(2, 1.0f), out(2);
    if (rank == 1) {
      while (!timedOut.load()) std::this_thread::yield();  // rank 0 waits alone first
    }
    WorkPtr work = rt.allreduce(view(in, DataType::kFloat32), view(out, DataType::kFloat32), named("late"));
    if (rank == 0) {
      auto start = std::chrono::steady_clock::now();
      EXPECT_FALSE(work->waitFor(std::chrono::milliseconds(50)));
      EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
      timedOut = true;
    }
    work->wait();
    EXPECT_EQ(out, std::vector<float>(2, 2.0f));
  });
}

// A thread that blocks on an operation (it could not drive: another caller held the engine) must
// not wait for the background thread's window to end: nobody else would run the engine for it.
TEST(CallerProgress, BlockedWaiterIsServedWithoutWaitingOutTheWindow) {
  using namespace std::chrono;
  Cluster cluster(2, {{"HOROVOD_CALLER_PROGRESS_US", "100000"}});  // 100 ms windows
  // Measured from the moment rank 1 submits Y (the last thing Y waits for) to Y's completion on
  // rank 0, not from the start of the test: the ranks' sleeps only set the scene, and a loaded
  // machine that stretches them cannot make the test fail.
  std::atomic<int64_t> ySubmittedNs{0};
  std::atomic<bool> yPending{false};
  const auto nowNs = [] { return duration_cast<nanoseconds>(steady_clock::now().time_since_epoch()).count(); };
  cluster.run([&](int rank, engine::Runtime& rt) {
    std::vector<float> inX(4, 1.0f), outX(4), inY(4, 2.0f), outY(4);
    auto allreduce = [&](std::vector<float>& in, std::vector<float>& out, const char* name) {
      return rt.allreduce(view(in, DataType::kFloat32), view(out, DataType::kFloat32), named(name));
    };
    if (rank == 1) {
      // Rank 0's first caller drives waiting for X, and its second caller blocks on Y meanwhile;
      // X completes once rank 0 submitted Y, and Y a while after X.
      while (!yPending.load()) std::this_thread::sleep_for(milliseconds(1));
      std::this_thread::sleep_for(milliseconds(4));
      allreduce(inX, outX, "x")->wait();
      std::this_thread::sleep_for(milliseconds(15));
      ySubmittedNs = nowNs();
      allreduce(inY, outY, "y")->wait();
      return;
    }
    WorkPtr x = allreduce(inX, outX, "x");
    std::thread driver([&] { x->wait(); });
    std::this_thread::sleep_for(milliseconds(1));
    WorkPtr y = allreduce(inY, outY, "y");
    yPending = true;
    y->wait();
    const int64_t doneNs = nowNs();
    driver.join();
    EXPECT_EQ(outY, std::vector<float>(4, 4.0f));
    // Y is complete as soon as rank 1's request arrives; a parked background thread would leave
    // it until its 100 ms window ends (about 80 ms after rank 1's request).
    const int64_t tookMs = (doneNs - ySubmittedNs.load()) / 1'000'000;
    EXPECT_LT(tookMs, 50) << "the blocked waiter waited for the background thread's window";
  });
}

TEST(CallerProgress, WindowIsValidated) {
  EXPECT_THROW(engine::Config::fromEnvironment(mapEnvironment({{"HOROVOD_CALLER_PROGRESS_US", "-1"}})),
               InvalidArgument);
  EXPECT_THROW(engine::Config::fromEnvironment(mapEnvironment({{"HOROVOD_CALLER_PROGRESS_US", "100001"}})),
               InvalidArgument);
  EXPECT_EQ(engine::Config::fromEnvironment(mapEnvironment({})).callerProgressUs, 200);
}

TEST(CallerProgress, CallerSpinIsValidated) {
  EXPECT_THROW(engine::Config::fromEnvironment(mapEnvironment({{"HOROVOD_CALLER_SPIN_US", "-1"}})), InvalidArgument);
  EXPECT_THROW(engine::Config::fromEnvironment(mapEnvironment({{"HOROVOD_CALLER_SPIN_US", "1000001"}})),
               InvalidArgument);
  EXPECT_EQ(engine::Config::fromEnvironment(mapEnvironment({})).callerSpinUs, 1000);
  EXPECT_EQ(engine::Config::fromEnvironment(mapEnvironment({{"HOROVOD_CALLER_SPIN_US", "0"}})).callerSpinUs, 0);
}

}  // namespace
}  // namespace hvd::test
