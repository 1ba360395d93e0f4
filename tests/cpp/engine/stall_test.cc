// The stall inspector (rank 0) and early mismatch detection, through the whole engine: ranks as
// threads, short check times through the environment, warnings captured from the log.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cluster.h"
#include "common/logging.h"
#include "engine/stall_inspector.h"

namespace hvd::test {
namespace {

using namespace std::chrono_literals;

// Captures the log lines while alive.
class LogCapture {
 public:
  LogCapture() {
    previous_ = setLogSink([this](LogLevel, const std::string& line) {
      std::lock_guard<std::mutex> lock(mu_);
      lines_.push_back(line);
    });
  }
  ~LogCapture() { setLogSink(std::move(previous_)); }
  std::vector<std::string> matching(const std::string& text) {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::string> out;
    for (const auto& l : lines_) {
      if (l.find(text) != std::string::npos) out.push_back(l);
    }
    return out;
  }

 private:
  std::mutex mu_;
  std::vector<std::string> lines_;
  LogSink previous_;
};

void expectHealthy(engine::Runtime& rt, int n, const std::string& name) {
  std::vector<int32_t> one(3, 1), out(3);
  rt.allreduce(view(one, DataType::kInt32), view(out, DataType::kInt32), named(name))->wait();
  for (int32_t v : out) ASSERT_EQ(v, n);
}

void allreduceOnce(engine::Runtime& rt, const std::string& name) {
  std::vector<float> a(4, 1.0f), b(4);
  rt.allreduce(view(a, DataType::kFloat32), view(b, DataType::kFloat32), named(name))->wait();
}

constexpr const char* kHorovodText =
    "One or more tensors were submitted to be reduced, gathered or broadcasted by subset of ranks and are waiting "
    "for remainder of ranks for more than 0.2 seconds. This may indicate that different ranks are trying to submit "
    "different tensors or that only subset of ranks is submitting tensors, which will cause deadlock. \nMissing "
    "ranks:\n1: [late]";

TEST(Stall, WarningNamesTheTensorAndWhoSubmittedItRepeatedWhileItLasts) {
  LogCapture log;
  Cluster cluster(3, {{"HOROVOD_STALL_CHECK_TIME_SECONDS", "0.2"}});
  cluster.run([&](int rank, engine::Runtime& rt) {
    if (rank == 1) std::this_thread::sleep_for(900ms);
    allreduceOnce(rt, "late");
  });
  auto warnings = log.matching(kHorovodText);
  ASSERT_GE(warnings.size(), 2u) << "expected the warning repeated every check period";
  EXPECT_NE(warnings[0].find("WARNING"), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[0].find("late (ALLREDUCE): submitted by ranks 0, 2, missing rank 1"), std::string::npos)
      << warnings[0];
  // Not every scan: at most one warning per check period (0.9 s / 0.2 s, with slack).
  EXPECT_LE(warnings.size(), 6u);
}

TEST(Stall, NoWarningWhenDisabledOrInTime) {
  LogCapture log;
  {
    Cluster cluster(2, {{"HOROVOD_STALL_CHECK_TIME_SECONDS", "0.1"}, {"HOROVOD_STALL_CHECK_DISABLE", "1"}});
    cluster.run([&](int rank, engine::Runtime& rt) {
      if (rank == 1) std::this_thread::sleep_for(400ms);
      allreduceOnce(rt, "late");
    });
  }
  {
    Cluster cluster(2, {{"HOROVOD_STALL_CHECK_TIME_SECONDS", "5"}});
    cluster.run([&](int rank, engine::Runtime& rt) {
      for (int i = 0; i < 50; ++i) allreduceOnce(rt, "step" + std::to_string(i % 3));
      if (rank == 1) std::this_thread::sleep_for(200ms);
      allreduceOnce(rt, "late");
    });
  }
  EXPECT_TRUE(log.matching("One or more tensors were submitted").empty());
}

TEST(Stall, ShutdownFailsEveryRanksOperationsWithTheReport) {
  LogCapture log;
  Cluster cluster(3, {{"HOROVOD_STALL_CHECK_TIME_SECONDS", "0.2"}, {"HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "0.5"}});
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::string> errors(3);
  std::vector<int> relayedFrom(3, -2);
  cluster.run([&](int rank, engine::Runtime& rt) {
    try {
      if (rank == 1) {
        // Never submits "stuck": a rank waiting in something else. Its own pending operation
        // fails too, with the same report.
        std::vector<float> a(4, 1.0f), b(4);
        auto w = rt.allreduce(view(a, DataType::kFloat32), view(b, DataType::kFloat32), named("other"));
        w->wait();
      } else {
        allreduceOnce(rt, "stuck");
      }
      errors[rank] = "no error";
    } catch (const Aborted& e) {
      errors[rank] = e.what();
      relayedFrom[rank] = e.relayedFrom();
    } catch (const std::exception& e) {
      errors[rank] = std::string("wrong type: ") + e.what();
    }
  });
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_LT(took, 5s);
  // Rank 0's own failure, relayed to the others: the field says so, and the text for people.
  EXPECT_EQ(relayedFrom[0], -1) << errors[0];
  EXPECT_NE(errors[0].rfind("[from rank ", 0), 0u) << errors[0];
  for (int r = 1; r < 3; ++r) {
    EXPECT_EQ(relayedFrom[r], 0) << r << ": " << errors[r];
    EXPECT_EQ(errors[r].rfind("[from rank 0] ", 0), 0u) << r << ": " << errors[r];
  }
  for (int r = 0; r < 3; ++r) {
    EXPECT_NE(errors[r].find("HOROVOD_STALL_SHUTDOWN_TIME_SECONDS=0.5"), std::string::npos) << r << ": " << errors[r];
    EXPECT_NE(errors[r].find("stuck (ALLREDUCE): submitted by ranks 0, 2, missing rank 1"), std::string::npos)
        << r << ": " << errors[r];
  }
  // Later operations fail at once.
  std::vector<float> a(4), b(4);
  EXPECT_THROW(cluster[1].allreduce(view(a, DataType::kFloat32), view(b, DataType::kFloat32), named("after"))->wait(),
               Error);
}

TEST(Stall, DivergentOperationsUnderOneUserNameFailEveryRankQuickly) {
  // The adapters name a collective "<op>.<name>": 'allreduce.g' and 'allgather.g' never meet in
  // negotiation, so without the inspector every rank waits forever.
  Cluster cluster(3, {{"HOROVOD_STALL_CHECK_TIME_SECONDS", "60"}});
  const auto start = std::chrono::steady_clock::now();
  cluster.run([&](int rank, engine::Runtime& rt) {
    std::vector<float> a(4, 1.0f), b(4);
    WorkPtr w = rank == 0 ? rt.allreduce(view(a, DataType::kFloat32), view(b, DataType::kFloat32), named("allreduce.g"))
                          : rt.allgather(view(a, DataType::kFloat32), named("allgather.g"));
    expectThrowWith<MismatchError>([&] { w->wait(); }, "Mismatched operations for 'g'");
    expectThrowWith<MismatchError>([&] { w->wait(); },
                                   "ALLGATHER 'allgather.g': ranks 1, 2; ALLREDUCE 'allreduce.g': rank 0");
    expectHealthy(rt, 3, "after");
  });
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
}

TEST(Stall, MismatchFoundBeforeEveryRankSubmitted) {
  // Ranks 0 and 1 disagree on the op for "m"; rank 2 submits only after they got their error,
  // and is answered with the same error.
  Cluster cluster(3);
  std::atomic<int> failed{0};
  cluster.run([&](int rank, engine::Runtime& rt) {
    std::vector<float> a(4, 1.0f), b(4);
    if (rank == 2) {
      while (failed.load() < 2) std::this_thread::sleep_for(1ms);
    }
    WorkPtr w = rank == 1 ? rt.allgather(view(a, DataType::kFloat32), named("m"))
                          : rt.allreduce(view(a, DataType::kFloat32), view(b, DataType::kFloat32), named("m"));
    expectThrowWith<MismatchError>([&] { w->wait(); }, "Mismatched operations: One rank did an ");
    expectThrowWith<MismatchError>([&] { w->wait(); }, "ALLREDUCE: rank 0");
    expectThrowWith<MismatchError>([&] { w->wait(); }, "ALLGATHER: rank 1");
    expectThrowWith<MismatchError>([&] { w->wait(); }, "not submitted yet: rank 2");
    failed++;
    expectHealthy(rt, 3, "after");
  });
}

TEST(Stall, ShapeAndDtypeMismatchesNameTheRanksOnEachSide) {
  Cluster cluster(3);
  cluster.run([&](int rank, engine::Runtime& rt) {
    std::vector<float> a(rank == 2 ? 5 : 4, 1.0f), b(a.size());
    auto w = rt.allreduce(view(a, DataType::kFloat32), view(b, DataType::kFloat32), named("sh"));
    expectThrowWith<MismatchError>([&] { w->wait(); }, "[5]: rank 2");
    std::vector<int32_t> c(4), d(4);
    std::vector<float> e(4), f(4);
    auto w2 = rank == 0 ? rt.allreduce(view(c, DataType::kInt32), view(d, DataType::kInt32), named("dt"))
                        : rt.allreduce(view(e, DataType::kFloat32), view(f, DataType::kFloat32), named("dt"));
    expectThrowWith<MismatchError>([&] { w2->wait(); }, "int32: rank 0");
    expectHealthy(rt, 3, "after");
  });
}

// ---- StallInspector alone ---------------------------------------------------------------------

engine::PendingTensor pendingTensor(std::string_view name,  // a literal: the tensor keeps a view
                                    engine::Kind op, std::vector<int> submitted, std::vector<int> missing,
                                    uint64_t instance = 1) {
  engine::PendingTensor t;
  t.name = name;
  t.op = op;
  t.submitted = std::move(submitted);
  t.missing = std::move(missing);
  t.instance = instance;
  return t;
}

TEST(StallInspector, BaseNameStripsOnlyTheOwnOpPrefix) {
  using engine::Kind;
  using engine::StallInspector;
  EXPECT_EQ(StallInspector::baseName("allreduce.g", Kind::kAllreduce), "g");
  EXPECT_EQ(StallInspector::baseName("grouped_allreduce.g", Kind::kAllreduce), "g");
  EXPECT_EQ(StallInspector::baseName("allreduce.g", Kind::kAllgather), "allreduce.g");
  EXPECT_EQ(StallInspector::baseName("g", Kind::kBroadcast), "g");
}

TEST(StallInspector, NewSubmissionOfTheSameNameRestartsItsAge) {
  engine::StallOptions o;
  o.checkTime = 1000ms;
  engine::StallInspector inspector(o);
  const int64_t s = 1000000000;
  std::vector<engine::PendingTensor> p = {pendingTensor("x", engine::Kind::kAllreduce, {0}, {1}, 1)};
  EXPECT_TRUE(inspector.scan(p, 1 * s).warning.empty());
  p[0].instance = 2;  // completed meanwhile, submitted again
  EXPECT_TRUE(inspector.scan(p, 2 * s + 1).warning.empty());
  EXPECT_FALSE(inspector.scan(p, 3 * s + 2).warning.empty());
}

TEST(StallInspector, DivergenceNeedsTwoScansAndDisjointCoveringGroups) {
  engine::StallOptions o;
  o.enabled = false;
  engine::StallInspector inspector(o);
  std::vector<engine::PendingTensor> p = {pendingTensor("allgather.g", engine::Kind::kAllgather, {1}, {0}),
                                          pendingTensor("allreduce.g", engine::Kind::kAllreduce, {0}, {1})};
  EXPECT_TRUE(inspector.scan(p, 1).diverged.empty());
  auto verdict = inspector.scan(p, 2);
  ASSERT_EQ(verdict.diverged.size(), 2u);
  EXPECT_EQ(verdict.diverged[0].name, "allgather.g");
  EXPECT_NE(verdict.divergence[0].find("ALLGATHER 'allgather.g': rank 1; ALLREDUCE 'allreduce.g': rank 0"),
            std::string::npos)
      << verdict.divergence[0];
  EXPECT_TRUE(verdict.warning.empty());  // disabled: no stall warnings
  // A rank that submitted both variants (asynchronous ops in another order) is no deadlock.
  engine::StallInspector other(o);
  p[0].submitted = {0, 1};
  p[0].missing = {};
  other.scan(p, 1);
  EXPECT_TRUE(other.scan(p, 2).diverged.empty());
}

TEST(StallInspector, ShutdownOnlyPastItsTimeAndNotBelowTheCheckTime) {
  const int64_t ms = 1000000;
  std::vector<engine::PendingTensor> p = {pendingTensor("x", engine::Kind::kAllreduce, {0}, {1})};
  engine::StallOptions o;
  o.checkTime = 100ms;
  o.shutdownTime = 300ms;
  engine::StallInspector inspector(o);
  inspector.scan(p, 1 * ms);
  EXPECT_TRUE(inspector.scan(p, 200 * ms).shutdown.empty());
  EXPECT_FALSE(inspector.scan(p, 302 * ms).shutdown.empty());

  o.shutdownTime = 50ms;
  engine::StallInspector ignored(o);
  ignored.scan(p, 1 * ms);
  auto v = ignored.scan(p, 200 * ms);
  EXPECT_TRUE(v.shutdown.empty());
  EXPECT_NE(v.warning.find("will not shutdown"), std::string::npos);
}

}  // namespace
}  // namespace hvd::test
