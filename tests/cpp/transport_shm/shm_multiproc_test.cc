// ShmTransport with real processes (fork): a SIGKILLed rank turns every survivor's blocked wait
// (recv, send into a full ring, waitForMessage, SharedSpace barrier) into PeerLost naming it,
// within 5 s; no shared-memory name is left in /dev/shm after a normal exit, an exception, a
// SIGKILL of every rank, or a setup that times out. Every child is bounded by alarm() and the
// parent kills what is left when its own bound passes.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <thread>

#include <gtest/gtest.h>

#include "shm_test_util.h"

namespace hvd::shm::testing {
namespace {

using namespace std::chrono_literals;

int64_t nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

class Processes {
 public:
  explicit Processes(std::shared_ptr<SharedTestStore> store) : store_(std::move(store)) {}
  ~Processes() {
    for (pid_t pid : pids_) {
      if (pid > 0) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, nullptr, 0);
      }
    }
  }

  // Forks rank `rank`; the child runs body() under alarm(30) and exits with its result (99 and
  // the message under "error/<rank>" if it throws).
  void start(int rank, const std::function<int()>& body) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::alarm(30);
      int code = 98;
      try {
        code = body();
      } catch (const std::exception& e) {
        store_->setText("error/" + std::to_string(rank), e.what());
        code = 99;
      }
      ::_exit(code);
    }
    if (static_cast<int>(pids_.size()) <= rank) pids_.resize(rank + 1, -1);
    pids_[rank] = pid;
  }

  pid_t pid(int rank) const { return pids_[rank]; }

  // Waits (at most `bound`) until `rank` has stopped on a signal (SIGSTOP); false if it did not.
  bool waitStopped(int rank, std::chrono::milliseconds bound = 15000ms) {
    auto until = std::chrono::steady_clock::now() + bound;
    int status = 0;
    while (std::chrono::steady_clock::now() < until) {
      pid_t got = ::waitpid(pids_[rank], &status, WNOHANG | WUNTRACED);
      if (got == pids_[rank]) return WIFSTOPPED(status);
      std::this_thread::sleep_for(1ms);
    }
    return false;
  }

  // Waits for `rank` to exit (at most `bound`); returns its exit code, or -signal.
  int wait(int rank, std::chrono::milliseconds bound = 15000ms) {
    auto until = std::chrono::steady_clock::now() + bound;
    int status = 0;
    for (;;) {
      pid_t got = ::waitpid(pids_[rank], &status, WNOHANG);
      if (got == pids_[rank]) break;
      if (std::chrono::steady_clock::now() > until) {
        ::kill(pids_[rank], SIGKILL);
        ::waitpid(pids_[rank], &status, 0);
        pids_[rank] = -1;
        ADD_FAILURE() << "rank " << rank << " did not exit within " << bound.count() << " ms";
        return -1000;
      }
      std::this_thread::sleep_for(2ms);
    }
    pids_[rank] = -1;
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    return -WTERMSIG(status);
  }

  std::string error(int rank) {
    std::string key = "error/" + std::to_string(rank);
    return store_->has(key) ? store_->getText(key, Deadline::never()) : std::string();
  }

 private:
  std::shared_ptr<SharedTestStore> store_;
  std::vector<pid_t> pids_;
};

enum class BlockedIn { kRecv, kSendIntoFullRing, kWaitForMessage, kBarrier, kAwaitPublished };

std::string toString(BlockedIn where) {
  switch (where) {
    case BlockedIn::kRecv: return "recv";
    case BlockedIn::kSendIntoFullRing: return "send";
    case BlockedIn::kWaitForMessage: return "waitForMessage";
    case BlockedIn::kBarrier: return "barrier";
    case BlockedIn::kAwaitPublished: return "awaitPublished";
  }
  return "?";
}

class ShmKill : public ::testing::TestWithParam<BlockedIn> {};

TEST_P(ShmKill, SurvivorsGetPeerLostNamingTheKilledRank) {
  const int n = 3, victim = 2;
  const BlockedIn where = GetParam();
  auto store = std::make_shared<SharedTestStore>();
  std::string job = uniqueJobId();
  Processes procs(store);
  for (int r = 0; r < n; ++r) {
    procs.start(r, [&, r] {
      ShmTransport t(makeContext(r, n, store, job), smallOptions());
      const bool spaced = where == BlockedIn::kBarrier || where == BlockedIn::kAwaitPublished;
      SharedSpace* space = spaced ? t.sharedSpace({0, 1, 2}, Deadline::after(10s)) : nullptr;
      store->setText("ready/" + std::to_string(r), "1");
      if (r == victim) {
        ::pause();
        return 97;
      }
      std::vector<uint8_t> buf(8 << 20);
      try {
        switch (where) {
          case BlockedIn::kRecv:
            t.recv(1 - r, buf.data(), 1, Deadline::after(25s));  // the other survivor never sends
            break;
          case BlockedIn::kSendIntoFullRing:
            if (r == 0) {
              t.send(victim, buf.data(), buf.size(), Deadline::after(25s));  // 8 MiB into a 64 KiB ring
            } else {
              t.recv(victim, buf.data(), 1, Deadline::after(25s));
            }
            break;
          case BlockedIn::kWaitForMessage:
            while (t.waitForMessage(Deadline::after(25s))) {
            }
            break;
          case BlockedIn::kBarrier: space->barrier(Deadline::after(25s)); break;
          case BlockedIn::kAwaitPublished:
            space->awaitPublished(victim, 1, Deadline::after(25s));  // the victim never publishes
            break;
        }
        store->setText("result/" + std::to_string(r), "returned without error");
        return 1;
      } catch (const PeerLost& e) {
        store->setText("result/" + std::to_string(r),
                       std::to_string(e.rank()) + "|" + std::to_string(nowNs()) + "|" + e.what());
        // Latched: a later operation fails the same way at once.
        try {
          uint8_t b = 0;
          t.send(1 - r, &b, 1, Deadline::after(1s));
        } catch (const PeerLost& later) {
          return later.rank() == victim ? 0 : 3;
        }
        return 2;
      }
    });
  }
  store->wait({"ready/0", "ready/1", "ready/2"}, Deadline::after(20s));
  std::this_thread::sleep_for(300ms);  // long enough for the survivors to fall asleep in futex waits
  int64_t killedAt = nowNs();
  ASSERT_EQ(::kill(procs.pid(victim), SIGKILL), 0);
  // The victim is deliberately not reaped until the survivors are done: a zombie must count as
  // dead too.
  for (int r = 0; r < n; ++r) {
    if (r == victim) continue;
    int code = procs.wait(r);
    EXPECT_EQ(code, 0) << "rank " << r << " in " << toString(where) << ": " << procs.error(r);
    std::string result = store->has("result/" + std::to_string(r))
                             ? store->getText("result/" + std::to_string(r), Deadline::never())
                             : "(none)";
    auto bar1 = result.find('|'), bar2 = result.find('|', bar1 + 1);
    ASSERT_NE(bar2, std::string::npos) << result;
    EXPECT_EQ(std::stoi(result.substr(0, bar1)), victim) << result;
    int64_t detectedMs = (std::stoll(result.substr(bar1 + 1, bar2 - bar1 - 1)) - killedAt) / 1000000;
    EXPECT_LT(detectedMs, 5000) << result;
    EXPECT_NE(result.find("rank 2"), std::string::npos) << result;
    std::cout << "[ shm ] " << toString(where) << ": rank " << r << " saw the loss after " << detectedMs
              << " ms: " << result.substr(bar2 + 1) << std::endl;
  }
  EXPECT_EQ(procs.wait(victim), -SIGKILL);
}

INSTANTIATE_TEST_SUITE_P(Blocked, ShmKill,
                         ::testing::Values(BlockedIn::kRecv, BlockedIn::kSendIntoFullRing, BlockedIn::kWaitForMessage,
                                           BlockedIn::kBarrier, BlockedIn::kAwaitPublished),
                         [](const auto& info) { return toString(info.param); });

TEST(ShmStop, SurvivorsNameTheStoppedRankNotTheOneTheyWaitedFor) {
  // Rank 1 is SIGSTOPped; rank 2 waits for rank 1 and rank 0 for rank 2. Both name rank 1.
  const int n = 3;
  auto store = std::make_shared<SharedTestStore>();
  std::string job = uniqueJobId();
  Processes procs(store);
  for (int r = 0; r < n; ++r) {
    procs.start(r, [&, r] {
      ShmTransport t(makeContext(r, n, store, job), smallOptions());
      store->setText("ready/" + std::to_string(r), "1");
      if (r == 1) {
        // Rank 1 stays out of the test store from here on: stopped inside it, it could hold the
        // store's mutex, or be a condition-variable waiter that glibc's broadcast waits for, and
        // the parent and the survivors would hang on the store instead of testing the transport.
        ::pause();
        return 97;
      }
      store->wait({"ready/0", "ready/1", "ready/2", "stopped"}, Deadline::after(20s));
      uint8_t buf[8];
      try {
        t.recv(r == 0 ? 2 : 1, buf, sizeof(buf), Deadline::after(r == 0 ? 600ms : 400ms));
      } catch (const PeerLost& e) {
        store->setText("blamed/" + std::to_string(r), std::to_string(e.rank()) + " " + e.what());
        return 0;
      } catch (const std::exception& e) {
        store->setText("blamed/" + std::to_string(r), std::string("none ") + e.what());
        return 0;
      }
      return 3;
    });
  }
  store->wait({"ready/0", "ready/1", "ready/2"}, Deadline::after(20s));
  ASSERT_EQ(::kill(procs.pid(1), SIGSTOP), 0);
  // Only once rank 1 is really stopped (state T): on a loaded machine a signalled process may
  // take a while to be scheduled and stop, and a survivor timing out before then finds no
  // stopped peer to name.
  ASSERT_TRUE(procs.waitStopped(1));
  store->setText("stopped", "1");
  for (int r : {0, 2}) {
    EXPECT_EQ(procs.wait(r), 0) << procs.error(r);
    std::string blamed = store->getText("blamed/" + std::to_string(r), Deadline::after(1s));
    EXPECT_EQ(blamed.rfind("1 ", 0), 0u) << "rank " << r << ": " << blamed;
    EXPECT_NE(blamed.find("rank 1 "), std::string::npos) << blamed;
  }
  ::kill(procs.pid(1), SIGKILL);
  procs.wait(1);
}

// ---- Nothing left behind ------------------------------------------------------------------

enum class Ending { kNormal, kException, kSigkillAll };

class ShmLeftovers : public ::testing::TestWithParam<std::tuple<bool, Ending>> {};

TEST_P(ShmLeftovers, NoNameRemainsInDevShm) {
  const auto [named, ending] = GetParam();
  const int n = 3;
  auto store = std::make_shared<SharedTestStore>();
  std::string job = uniqueJobId();
  std::string prefix = segmentName(job, "").substr(1);  // "hvd-<job>-": every name of this job
  ASSERT_TRUE(devShmEntries(prefix).empty());
  Processes procs(store);
  for (int r = 0; r < n; ++r) {
    procs.start(r, [&, r] {
      ShmOptions options = smallOptions();
      options.named = named;
      ShmTransport t(makeContext(r, n, store, job), options);
      if (t.usesNamedSegments() != named) return 5;
      SharedSpace* space = t.sharedSpace({0, 1, 2}, Deadline::after(10s));
      space->barrier(Deadline::after(10s));
      uint8_t out = 1, in = 0;
      t.sendRecv((r + 1) % n, &out, 1, (r + n - 1) % n, &in, 1, Deadline::after(10s));
      store->setText("ready/" + std::to_string(r), "1");
      // Nobody ends before everyone is ready (an early end would fail the others' setup).
      store->wait({"ready/0", "ready/1", "ready/2"}, Deadline::after(20s));
      switch (ending) {
        case Ending::kNormal: space->barrier(Deadline::after(10s)); return 0;
        case Ending::kException: throw std::runtime_error("user code failed");
        case Ending::kSigkillAll: ::pause(); return 97;
      }
      return 96;
    });
  }
  store->wait({"ready/0", "ready/1", "ready/2"}, Deadline::after(20s));
  if (ending == Ending::kSigkillAll) {
    for (int r = 0; r < n; ++r) ::kill(procs.pid(r), SIGKILL);
  }
  for (int r = 0; r < n; ++r) {
    int code = procs.wait(r);
    switch (ending) {
      case Ending::kNormal: EXPECT_EQ(code, 0) << procs.error(r); break;
      case Ending::kException: EXPECT_EQ(code, 99) << procs.error(r); break;
      case Ending::kSigkillAll: EXPECT_EQ(code, -SIGKILL); break;
    }
  }
  EXPECT_TRUE(devShmEntries(prefix).empty()) << devShmEntries(prefix).front();
}

INSTANTIATE_TEST_SUITE_P(Endings, ShmLeftovers,
                         ::testing::Combine(::testing::Bool(), ::testing::Values(Ending::kNormal, Ending::kException,
                                                                                 Ending::kSigkillAll)),
                         [](const auto& info) {
                           std::string name = std::get<0>(info.param) ? "Named" : "Memfd";
                           switch (std::get<1>(info.param)) {
                             case Ending::kNormal: return name + "NormalExit";
                             case Ending::kException: return name + "Exception";
                             case Ending::kSigkillAll: return name + "SigkillAll";
                           }
                           return name;
                         });

TEST(ShmLeftovers, SetupThatTimesOutRemovesItsName) {
  // Rank 1 is killed before it publishes anything: rank 0's setup times out and must not leave
  // its named segment behind.
  auto store = std::make_shared<SharedTestStore>();
  std::string job = uniqueJobId();
  std::string prefix = segmentName(job, "").substr(1);
  Processes procs(store);
  procs.start(0, [&] {
    ShmOptions options = smallOptions();
    options.named = true;
    auto context = makeContext(0, 2, store, job);
    context.timeout = 500ms;
    try {
      ShmTransport t(context, options);
    } catch (const Timeout&) {
      return 0;
    }
    return 1;
  });
  procs.start(1, [&] {
    ::pause();
    return 97;
  });
  ::kill(procs.pid(1), SIGKILL);
  EXPECT_EQ(procs.wait(0), 0) << procs.error(0);
  EXPECT_EQ(procs.wait(1), -SIGKILL);
  EXPECT_TRUE(devShmEntries(prefix).empty());
}

// Waits up to `bound` for every name starting with `prefix` to be gone from /dev/shm.
bool devShmClears(const std::string& prefix, std::chrono::milliseconds bound = 3000ms) {
  auto until = std::chrono::steady_clock::now() + bound;
  while (!devShmEntries(prefix).empty()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

TEST(ShmLeftovers, OwnerKilledRightAfterCreatingLeavesNoName) {
  // The narrowest window: the name exists, no peer has mapped it, nobody will unlink it in a
  // destructor. The process's reaper helper must.
  auto store = std::make_shared<SharedTestStore>();
  std::string job = uniqueJobId();
  std::string prefix = segmentName(job, "").substr(1);
  Processes procs(store);
  procs.start(0, [&] {
    Segment a = Segment::create(1 << 20, true, segmentName(job, "a"));
    Segment b = Segment::create(1 << 20, true, segmentName(job, "b"));
    b.seal();  // sealed ones are forgotten by the helper; the test below still sees none
    store->setText("created", "1");
    ::pause();
    return 97;
  });
  store->wait({"created"}, Deadline::after(20s));
  ASSERT_EQ(devShmEntries(prefix).size(), 1u);
  ::kill(procs.pid(0), SIGKILL);
  EXPECT_EQ(procs.wait(0), -SIGKILL);
  EXPECT_TRUE(devShmClears(prefix)) << devShmEntries(prefix).front();
}

TEST(ShmLeftovers, RanksKilledAtRandomTimesDuringSetupLeaveNoName) {
  // Three ranks set up named segments; all are SIGKILLed at a random moment of their setup.
  std::srand(static_cast<unsigned>(::getpid()));
  for (int run = 0; run < 8; ++run) {
    auto store = std::make_shared<SharedTestStore>();
    std::string job = uniqueJobId();
    std::string prefix = segmentName(job, "").substr(1);
    Processes procs(store);
    for (int r = 0; r < 3; ++r) {
      procs.start(r, [&, r] {
        ShmOptions options = smallOptions();
        options.named = true;
        ShmTransport t(makeContext(r, 3, store, job), options);
        t.sharedSpace({0, 1, 2}, Deadline::after(10s))->barrier(Deadline::after(10s));
        ::pause();
        return 97;
      });
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(std::rand() % 40));
    for (int r = 0; r < 3; ++r) ::kill(procs.pid(r), SIGKILL);
    for (int r = 0; r < 3; ++r) procs.wait(r);
    EXPECT_TRUE(devShmClears(prefix)) << "run " << run << ": " << devShmEntries(prefix).front();
  }
}

TEST(ShmFallback, NamedSegmentsWhenProcFdIsClosedToPeers) {
  // A non-dumpable process's /proc/<pid>/fd cannot be opened by other unprivileged processes:
  // the ranks must agree to fall back to named segments (and still leave nothing behind).
  if (::getuid() != 0) GTEST_SKIP() << "needs root to switch the children to an unprivileged user";
  auto store = std::make_shared<SharedTestStore>();
  std::string job = uniqueJobId();
  std::string prefix = segmentName(job, "").substr(1);
  Processes procs(store);
  for (int r = 0; r < 2; ++r) {
    procs.start(r, [&, r] {
      if (::setgid(65534) != 0 || ::setuid(65534) != 0) return 10;
      if (r == 1 && ::prctl(PR_SET_DUMPABLE, 0) != 0) return 11;
      ShmTransport t(makeContext(r, 2, store, job), smallOptions());
      if (!t.usesNamedSegments()) return 12;
      uint32_t out = 40 + r, in = 0;
      t.sendRecv(1 - r, &out, 4, 1 - r, &in, 4, Deadline::after(10s));
      if (in != static_cast<uint32_t>(41 - r)) return 13;
      t.sharedSpace({0, 1}, Deadline::after(10s))->barrier(Deadline::after(10s));
      return devShmEntries(prefix).empty() ? 0 : 14;
    });
  }
  EXPECT_EQ(procs.wait(0), 0) << procs.error(0);
  EXPECT_EQ(procs.wait(1), 0) << procs.error(1);
  EXPECT_TRUE(devShmEntries(prefix).empty());
}

}  // namespace
}  // namespace hvd::shm::testing
