// Deferred completion (engine/backend.h): a backend built with Completion::kDeferred takes the
// works of the responses it ran and completes them later from its own thread, as a device backend
// does when its device finished. The Runtime retires the entries right after run() (names free
// again), completes the works itself when run() throws, and hands its error to abort() when it
// fails, so that nothing the backend still holds waits forever.
//
// The fake here serves rocm:5 (backend_test.cc's fake has rocm:0), sums allreduces over its own
// communicator inside run() like that one, and completes the works from a finalizer thread: at
// once, except names starting with "held." which wait until the test releases them.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cluster.h"
#include "collectives/collectives.h"
#include "collectives/communicator.h"
#include "engine/backend.h"
#include "engine/process_set_table.h"
#include "engine/tensor_queue.h"

namespace hvd::test {
namespace {

constexpr int kFakeDevice = 5;

struct Held {
  std::shared_ptr<engine::WorkImpl> work;
  int member;
  bool held;
  bool lost;
};

// Shared with the tests: what the fakes ran, and the release of held works.
struct Shared {
  std::mutex mu;
  std::condition_variable cv;
  bool releaseHeld = false;
  int heldRuns = 0;  // "held." tensors run, all ranks
  int aborts = 0;
  std::vector<std::thread::id> finalizers;
};
Shared shared;

class DeferredFake : public engine::CollectiveBackend {
 public:
  explicit DeferredFake(const engine::BackendContext& c)
      : CollectiveBackend(engine::Completion::kDeferred),
        comm_(c.transport, c.set.ranks, c.config.timeout),
        wake_(c.wakeEngine),
        finalizer_([this] { finalize(); }) {
    std::lock_guard<std::mutex> lock(shared.mu);
    shared.finalizers.push_back(finalizer_.get_id());
  }
  // Clean shutdown: the "device" finishes what it has, so everything held completes normally.
  ~DeferredFake() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    finalizer_.join();
  }
  const char* name() const override { return "deferred-fake"; }
  void applyKnobs(const engine::Knobs&) override {}
  bool supports(engine::Kind kind) const override { return kind == engine::Kind::kAllreduce; }

  void run(const engine::Response& r, engine::ProcessSet&, const std::vector<engine::Entry*>& entries) override {
    for (size_t i = 0; i < entries.size(); ++i) {
      const std::string& name = r.tensors[i].data().name;
      if (name.rfind("bad.", 0) == 0) throw Error("deferred-fake refuses " + name);
      if (name.rfind("lost.", 0) == 0 && comm_.globalRank(comm_.rank()) == 1) throw PeerLost(-1, "fake lost peer");
    }
    std::vector<Held> taken;
    for (size_t i = 0; i < entries.size(); ++i) {
      const size_t count = static_cast<size_t>(r.tensors[i].numElements());
      collectives::allreduce(comm_, entries[i]->input, entries[i]->output, count, r.params.dtype, ReduceOp::kSum, 1.0);
      // "lost." tensors never complete on the ranks that ran them: the runtime fails first.
      const std::string& name = r.tensors[i].data().name;
      const bool held = name.rfind("held.", 0) == 0 || name.rfind("lost.", 0) == 0;
      if (name.rfind("held.", 0) == 0) {
        std::lock_guard<std::mutex> lock(shared.mu);
        ++shared.heldRuns;
        shared.cv.notify_all();
      }
      taken.push_back(Held{entries[i]->work, entries[i]->member, held, name.rfind("lost.", 0) == 0});
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& t : taken) pending_.push_back(std::move(t));
    }
    cv_.notify_all();
  }

  void abort(std::exception_ptr error) override {
    std::deque<Held> failing;
    {
      std::lock_guard<std::mutex> lock(mu_);
      failing.swap(pending_);
    }
    for (auto& h : failing) h.work->completeMember(error);
    std::lock_guard<std::mutex> lock(shared.mu);
    ++shared.aborts;
  }

 private:
  void finalize() {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      bool release;
      {
        std::lock_guard<std::mutex> sharedLock(shared.mu);
        release = shared.releaseHeld;
      }
      std::vector<Held> ready;
      for (auto it = pending_.begin(); it != pending_.end();) {
        if (!it->held || (release && !it->lost) || stopping_) {
          ready.push_back(std::move(*it));
          it = pending_.erase(it);
        } else {
          ++it;
        }
      }
      if (!ready.empty()) {
        lock.unlock();
        for (auto& h : ready) h.work->completeMember(nullptr);
        wake_();
        lock.lock();
        continue;
      }
      if (stopping_) return;
      // Held works are released from the test's thread: look again shortly.
      cv_.wait_for(lock, std::chrono::milliseconds(5));
    }
  }

  Communicator comm_;
  const std::function<void()>& wake_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Held> pending_;
  bool stopping_ = false;
  std::thread finalizer_;
};

const bool kRegistered = [] {
  engine::BackendFactory f{"deferred-fake", {DeviceKind::kRocm}, [](const engine::BackendContext& c) {
                             std::unique_ptr<engine::CollectiveBackend> made;
                             if (c.device.index == kFakeDevice) made = std::make_unique<DeferredFake>(c);
                             return made;
                           }};
  f.priority = 10;  // asked before backend_test.cc's fake, which takes every rocm device
  engine::registerBackend(std::move(f));
  return true;
}();

void resetShared() {
  std::lock_guard<std::mutex> lock(shared.mu);
  shared.releaseHeld = false;
  shared.heldRuns = 0;
  shared.aborts = 0;
  shared.finalizers.clear();
}

void releaseHeld() {
  std::lock_guard<std::mutex> lock(shared.mu);
  shared.releaseHeld = true;
}

// Waits (bounded) until `n` held tensors ran across all ranks.
void awaitHeldRuns(int n) {
  std::unique_lock<std::mutex> lock(shared.mu);
  ASSERT_TRUE(shared.cv.wait_for(lock, std::chrono::seconds(60), [&] { return shared.heldRuns >= n; }))
      << "held tensors ran: " << shared.heldRuns << " of " << n;
}

// The rank threads of a test meet here (bounded: a missing rank fails the test).
class Meeting {
 public:
  explicit Meeting(int ranks) : ranks_(ranks) {}
  void arriveAndWait() {
    std::unique_lock<std::mutex> lock(mu_);
    ++arrived_;
    cv_.notify_all();
    ASSERT_TRUE(cv_.wait_for(lock, std::chrono::seconds(60), [&] { return arrived_ >= ranks_; }));
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  const int ranks_;
  int arrived_ = 0;
};

TensorView onFake(std::vector<float>& data) {
  TensorView v = view(data, DataType::kFloat32);
  v.device.kind = DeviceKind::kRocm;
  v.device.index = kFakeDevice;
  return v;
}

// Works complete with their results, whether the engine runs on the background thread or on the
// waiting caller (which must stop waiting for messages once the backend completed its work).
TEST(DeferredCompletion, WorksCompleteFromTheBackendsThread) {
  resetShared();
  for (const char* window : {"0", "100000"}) {
    SCOPED_TRACE(std::string("HOROVOD_CALLER_PROGRESS_US=") + window);
    Cluster c(3, {{"HOROVOD_CALLER_PROGRESS_US", window}});
    c.run([&](int r, engine::Runtime& rt) {
      for (int step = 0; step < 5; ++step) {
        std::vector<float> x(6, float(r + step)), y(2, 1.0f);
        WorkPtr a = rt.allreduce(onFake(x), onFake(x), named("dev.a"));
        WorkPtr b = rt.allreduce(onFake(y), onFake(y), named("dev.b"));
        a->wait();
        b->wait();
        EXPECT_EQ(x, std::vector<float>(6, float(3 + 3 * step)));
        EXPECT_EQ(y, std::vector<float>(2, 3.0f));
      }
    });
  }
}

// The completion callback registered before the backend completes runs on its finalizer thread.
TEST(DeferredCompletion, CompletionRunsOnTheFinalizer) {
  resetShared();
  Cluster c(2);
  Meeting checked(2);  // both ranks saw their work pending before the release
  c.run([&](int r, engine::Runtime& rt) {
    std::vector<float> x(4, 1.0f);
    WorkPtr w = rt.allreduce(onFake(x), onFake(x), named("held.cb"));
    std::mutex mu;
    std::condition_variable cv;
    bool called = false, onFinalizer = false;
    w->whenComplete([&] {
      bool mine = false;
      {
        std::lock_guard<std::mutex> lock(shared.mu);
        for (auto id : shared.finalizers) mine = mine || id == std::this_thread::get_id();
      }
      std::lock_guard<std::mutex> lock(mu);
      onFinalizer = mine;
      called = true;
      cv.notify_all();
    });
    awaitHeldRuns(2);
    EXPECT_FALSE(w->isCompleted());
    // The engine holds the work until it retired the entries after run() (runtime_responses.cc),
    // and whoever completes last runs the callback: released before that, the engine's thread
    // could. A later operation completes only once this rank's engine is past the held response.
    std::vector<float> later(1, 1.0f);
    rt.allreduce(view(later, DataType::kFloat32), view(later, DataType::kFloat32), named("after.cb"))->wait();
    checked.arriveAndWait();
    if (r == 0) releaseHeld();
    w->wait();
    // The callback runs right after completion, on the completing thread (wait() may return first).
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(60), [&] { return called; }));
    EXPECT_TRUE(onFinalizer);
    EXPECT_EQ(x, std::vector<float>(4, 2.0f));
  });
}

// After run() the entries are retired: the same name can be enqueued again while the first
// operation's work is still held by the backend.
TEST(DeferredCompletion, NamesAreFreeBeforeTheWorksComplete) {
  resetShared();
  Cluster c(2);
  Meeting checked(2);  // both ranks looked at their works before the release
  c.run([&](int r, engine::Runtime& rt) {
    std::vector<float> a(3, float(r + 1)), b(3, float(10 * (r + 1)));
    WorkPtr first = rt.allreduce(onFake(a), onFake(a), named("held.x"));
    // An operation enqueued after it completes after its response ran (lists run in order), and
    // so after the Runtime retired its entry.
    std::vector<float> sync(1, 1.0f);
    rt.allreduce(onFake(sync), onFake(sync), named("dev.sync"))->wait();
    EXPECT_FALSE(first->isCompleted());
    WorkPtr second = rt.allreduce(onFake(b), onFake(b), named("held.x"));  // no duplicate-name error
    awaitHeldRuns(4);
    EXPECT_FALSE(first->isCompleted());
    EXPECT_FALSE(second->isCompleted());
    checked.arriveAndWait();
    if (r == 1) releaseHeld();
    first->wait();
    second->wait();
    EXPECT_EQ(a, std::vector<float>(3, 3.0f));
    EXPECT_EQ(b, std::vector<float>(3, 30.0f));
  });
}

// run() throwing a non-fatal error: nothing was taken, the Runtime fails the response's works and
// keeps running.
TEST(DeferredCompletion, ThrowingRunFailsTheResponseOnly) {
  resetShared();
  Cluster c(2);
  c.run([&](int, engine::Runtime& rt) {
    std::vector<float> x(2, 1.0f);
    WorkPtr w = rt.allreduce(onFake(x), onFake(x), named("bad.x"));
    expectThrowWith<Error>([&] { w->wait(); }, "deferred-fake refuses bad.x");
    std::vector<float> y(2, 1.0f);
    rt.allreduce(onFake(y), onFake(y), named("dev.after"))->wait();
    EXPECT_EQ(y, std::vector<float>(2, 2.0f));
  });
}

// The Runtime fails (rank 1's backend reports a lost peer): every rank's backend gets abort() with
// the Runtime's error, and the works it still held fail with it rather than wait forever.
TEST(DeferredCompletion, RuntimeFailureFailsHeldWorksOnEveryRank) {
  resetShared();
  Cluster c(3);
  c.run([&](int r, engine::Runtime& rt) {
    std::vector<float> held(2, 1.0f), lost(2, 1.0f);
    WorkPtr h = rt.allreduce(onFake(held), onFake(held), named("held.y"));
    awaitHeldRuns(3);
    WorkPtr l = rt.allreduce(onFake(lost), onFake(lost), named("lost.y"));
    std::string heldError, lostError;
    try {
      h->wait();
      ADD_FAILURE() << "a held work completed although the runtime failed";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kPeerLost) << e.what();
      heldError = e.what();
    }
    try {
      l->wait();
      ADD_FAILURE() << "the response that failed the runtime completed";
    } catch (const Error& e) {
      lostError = e.what();
    }
    // The held work failed with the Runtime's own error, the one the failing response got.
    EXPECT_EQ(heldError, lostError);
    // Rank 1's own error; the others lost rank 1 (it aborted) in the same response, or got its notice.
    if (r == 1) {
      EXPECT_NE(heldError.find("fake lost peer"), std::string::npos) << heldError;
    }
  });
  c.shutdown();
  std::lock_guard<std::mutex> lock(shared.mu);
  EXPECT_EQ(shared.aborts, 3);
}

// A clean shutdown does not fail what the backend holds: its destructor completes it (the device
// finished the work every rank enqueued).
TEST(DeferredCompletion, CleanShutdownCompletesHeldWorks) {
  resetShared();
  std::vector<WorkPtr> works(2);
  std::vector<std::vector<float>> data(2, std::vector<float>(2, 1.0f));
  {
    Cluster c(2);
    c.run([&](int r, engine::Runtime& rt) {
      works[r] = rt.allreduce(onFake(data[r]), onFake(data[r]), named("held.z"));
      awaitHeldRuns(2);
    });
    c.shutdown();
  }
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(works[r]->isCompleted());
    works[r]->wait();
    EXPECT_EQ(data[r], std::vector<float>(2, 2.0f));
  }
  std::lock_guard<std::mutex> lock(shared.mu);
  EXPECT_EQ(shared.aborts, 0);
}

}  // namespace
}  // namespace hvd::test
