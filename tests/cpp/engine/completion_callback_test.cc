// Work::whenComplete: a callback instead of a waiting thread (what the TensorFlow kernels use to
// return their thread at once). It runs exactly once, after completion (results and failures are
// readable in it), whether registered before or after; and operations nobody waits for, only
// registered callbacks, complete even when the background thread would leave work to callers.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "cluster.h"

namespace hvd::test {
namespace {

// Counts callbacks and lets a test wait for a number of them (bounded: a lost callback fails the
// test instead of hanging it).
class Arrivals {
 public:
  void arrive() {
    std::lock_guard<std::mutex> lock(mu_);
    ++count_;
    cv_.notify_all();
  }
  bool waitFor(int n) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(60), [&] { return count_ >= n; });
  }
  int count() {
    std::lock_guard<std::mutex> lock(mu_);
    return count_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int count_ = 0;
};

TEST(CompletionCallback, RunsOnceAfterCompletionWithTheResults) {
  // 100000 us windows: the background thread would leave un-awaited work to callers for 100 ms at
  // a time; callbacks must make it run the work anyway (nothing here waits).
  for (const char* window : {"0", "200", "100000"}) {
    SCOPED_TRACE(std::string("HOROVOD_CALLER_PROGRESS_US=") + window);
    Cluster cluster(2, {{"HOROVOD_CALLER_PROGRESS_US", window}});
    cluster.run([&](int rank, engine::Runtime& rt) {
      constexpr int kOps = 64;
      std::vector<std::vector<float>> in(kOps), out(kOps);
      std::vector<std::atomic<int>> calls(kOps);
      std::vector<std::atomic<bool>> completedInside(kOps);
      std::vector<WorkPtr> works;
      Arrivals arrivals;
      for (int i = 0; i < kOps; ++i) {
        // Rank 1 enqueues in reverse order: each rank's first operations wait for the peer.
        int t = rank == 0 ? i : kOps - 1 - i;
        in[t].assign(3, static_cast<float>(rank + t));
        out[t].resize(3);
        WorkPtr work = rt.allreduce(view(in[t], DataType::kFloat32), view(out[t], DataType::kFloat32),
                                    named("cb." + std::to_string(t)));
        Work* raw = work.get();
        work->whenComplete([&, t, raw] {
          completedInside[t] = raw->isCompleted();
          raw->wait();  // completed: returns at once
          calls[t]++;
          arrivals.arrive();
        });
        works.push_back(std::move(work));
      }
      ASSERT_TRUE(arrivals.waitFor(kOps)) << arrivals.count() << " of " << kOps << " callbacks ran";
      for (int t = 0; t < kOps; ++t) {
        EXPECT_EQ(calls[t].load(), 1) << t;
        EXPECT_TRUE(completedInside[t].load()) << t;
        EXPECT_EQ(out[t], std::vector<float>(3, static_cast<float>(2 * t + 1))) << t;
      }
    });
  }
}

TEST(CompletionCallback, RegisteredAfterCompletionRunsAtOnceOnTheCaller) {
  Cluster cluster(2);
  cluster.run([&](int rank, engine::Runtime& rt) {
    std::vector<int32_t> in(2, rank + 1), out(2);
    WorkPtr work = rt.allreduce(view(in, DataType::kInt32), view(out, DataType::kInt32), named("late.cb"));
    work->wait();
    const auto caller = std::this_thread::get_id();
    std::thread::id ranOn;
    int calls = 0;
    work->whenComplete([&] {
      ranOn = std::this_thread::get_id();
      ++calls;
    });
    EXPECT_EQ(calls, 1);
    EXPECT_EQ(ranOn, caller);
    EXPECT_EQ(out, std::vector<int32_t>(2, 3));
  });
}

TEST(CompletionCallback, FailureReachesTheCallback) {
  Cluster cluster(2);
  cluster.run([&](int rank, engine::Runtime& rt) {
    // A dtype mismatch between the ranks: the operation fails on both.
    std::vector<float> f(2, 1.0f), fo(2);
    std::vector<int32_t> i(2, 1), io(2);
    WorkPtr work = rank == 0 ? rt.allreduce(view(f, DataType::kFloat32), view(fo, DataType::kFloat32), named("bad"))
                             : rt.allreduce(view(i, DataType::kInt32), view(io, DataType::kInt32), named("bad"));
    Arrivals arrivals;
    std::string error;
    Work* raw = work.get();
    work->whenComplete([&, raw] {
      try {
        raw->wait();
      } catch (const Error& e) {
        error = e.what();
      }
      arrivals.arrive();
    });
    ASSERT_TRUE(arrivals.waitFor(1));
    EXPECT_NE(error.find("Mismatched data types"), std::string::npos) << error;
  });
}

TEST(CompletionCallback, ShutdownFailsPendingOperationsThroughTheirCallbacks) {
  Cluster cluster(2);
  Arrivals arrivals;
  std::vector<std::string> errors(2);
  std::vector<std::vector<float>> in(2, std::vector<float>(2, 1.0f)), out(2, std::vector<float>(2));
  std::vector<WorkPtr> works(2);
  // Only rank 0 submits: the operation can never complete, until shutdown fails it.
  works[0] = cluster[0].allreduce(view(in[0], DataType::kFloat32), view(out[0], DataType::kFloat32), named("never"));
  Work* raw = works[0].get();
  works[0]->whenComplete([&, raw] {
    try {
      raw->wait();
    } catch (const Error& e) {
      errors[0] = e.what();
    }
    arrivals.arrive();
  });
  cluster.shutdown();
  ASSERT_TRUE(arrivals.waitFor(1));
  EXPECT_FALSE(errors[0].empty());
}

}  // namespace
}  // namespace hvd::test
