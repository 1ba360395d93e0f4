// Hierarchical collectives over the real "shm+tcp" composite with real processes: ranks are
// forked children that meet through a TcpStoreServer in the parent; hostOf fakes the hosts, so
// each fake host's ranks share memory and the hosts talk TCP. Each child runs allreduce (checked
// against a reference), allgatherv and broadcast, and reports the algorithm it ran and a hash of
// its allreduce result; the parent checks every rank agreed bit for bit. Bounded: alarm() in the
// children, a deadline on the parent's waits (stragglers are killed).
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "collectives/algorithms.h"
#include "collectives/collectives.h"
#include "store/tcp_store.h"
#include "store/tcp_store_server.h"
#include "transport/transport.h"

namespace hvd {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

const char* kSecret = "hier-multiproc";

struct Scenario {
  std::vector<std::string> hostOf;
  std::vector<std::pair<std::string, std::string>> env;  // set in the children before init
  int victim = -1;  // >= 0: ranks loop on allreduce until the parent SIGKILLs this one
};

void writeLine(int fd, const std::string& line) {
  std::string text = line + "\n";
  (void)!::write(fd, text.data(), text.size());
}

uint64_t fnv(const void* data, size_t bytes) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < bytes; ++i) h = (h ^ static_cast<const uint8_t*>(data)[i]) * 1099511628211ull;
  return h;
}

float inputValue(int rank, size_t i) { return static_cast<float>(std::sin(0.001 * i + rank) * 50.0 + rank); }

std::vector<uint8_t> block(int rank, size_t len) {
  std::vector<uint8_t> b(len);
  for (size_t i = 0; i < len; ++i) b[i] = static_cast<uint8_t>(rank * 29 + i * 13 + (i >> 9));
  return b;
}

// Kill mode: hierarchical allreduces until one fails; a survivor must see PeerLost (a process
// that errs then exits, as a training script would, so its death reaches its host's peers).
int loopUntilLost(int rank, Communicator& comm, int reportFd) {
  std::vector<float> data(size_t(1) << 18, 1.0f);
  for (int iter = 0;; ++iter) {
    try {
      collectives::allreduce(comm, data.data(), data.size(), DataType::kFloat32, ReduceOp::kSum);
    } catch (const PeerLost& e) {
      writeLine(reportFd, "lost " + std::to_string(rank) + " " + std::to_string(e.rank()) + " " + e.what());
      return 0;
    }
    if (iter == 0) writeLine(reportFd, "ready " + std::to_string(rank));
    std::fill(data.begin(), data.end(), 1.0f);
  }
}

// Child body: returns the exit code; reports "ok <rank> <algo> <hash>" or "error <rank> <what>".
int child(int rank, const Scenario& scenario, const std::string& jobId, int commandFd, int reportFd) {
  ::alarm(30);
  uint16_t port = 0;
  if (::read(commandFd, &port, sizeof(port)) != sizeof(port)) return 10;
  for (const auto& [name, value] : scenario.env) ::setenv(name.c_str(), value.c_str(), 1);
  const int n = static_cast<int>(scenario.hostOf.size());
  try {
    TransportContext context;
    context.rank = rank;
    context.size = n;
    context.hostOf = scenario.hostOf;
    context.store = std::make_shared<PrefixStore>(
        "t", std::make_shared<TcpStore>("127.0.0.1", port, kSecret, Deadline::after(10s)));
    context.jobId = jobId;
    context.secret = kSecret;
    context.timeout = 10000ms;
    auto transport = makeTransport("auto", context);
    std::vector<int> members(n);
    std::iota(members.begin(), members.end(), 0);
    Communicator comm(*transport, members, 10000ms);
    if (scenario.victim >= 0) return loopUntilLost(rank, comm, reportFd);
    std::ostringstream problems;

    // Allreduce, large enough for several chunks and cross-host ring segments.
    const size_t count = (size_t(1) << 20) + 5;
    const std::string algo = collectives::allreduceChoice(comm, count * sizeof(float)).name;
    std::vector<float> data(count);
    for (size_t i = 0; i < count; ++i) data[i] = inputValue(rank, i);
    collectives::allreduce(comm, data.data(), count, DataType::kFloat32, ReduceOp::kSum);
    for (size_t i = 0; i < count; i += 997) {
      double want = 0, mag = 0;
      for (int r = 0; r < n; ++r) {
        want += inputValue(r, i);
        mag += std::fabs(inputValue(r, i));
      }
      if (std::fabs(data[i] - want) > 2.0 * n * std::ldexp(1.0, -24) * mag) {
        problems << "allreduce element " << i << " " << data[i] << " != " << want << "; ";
        break;
      }
    }
    const uint64_t hash = fnv(data.data(), count * sizeof(float));
    // Small integer allreduce: exact.
    std::vector<int32_t> ints(1000);
    for (size_t i = 0; i < ints.size(); ++i) ints[i] = static_cast<int32_t>(rank * 1000 + i);
    collectives::allreduce(comm, ints.data(), ints.size(), DataType::kInt32, ReduceOp::kSum);
    for (size_t i = 0; i < ints.size(); ++i) {
      if (ints[i] != static_cast<int32_t>(1000 * n * (n - 1) / 2 + n * i)) {
        problems << "int allreduce element " << i << "; ";
        break;
      }
    }

    // allgatherv with one empty block.
    std::vector<size_t> sizes(n);
    for (int r = 0; r < n; ++r) sizes[r] = r == 1 ? 0 : 70000 + 333 * r;
    std::vector<uint8_t> want;
    for (int r = 0; r < n; ++r) {
      auto b = block(r, sizes[r]);
      want.insert(want.end(), b.begin(), b.end());
    }
    std::vector<uint8_t> gathered(want.size());
    auto mine = block(rank, sizes[rank]);
    collectives::allgatherv(comm, mine.data(), gathered.data(), sizes);
    if (gathered != want) problems << "allgatherv; ";

    // Broadcast from every root.
    for (int root = 0; root < n; ++root) {
      std::vector<uint8_t> buf = rank == root ? block(100 + root, 300000) : std::vector<uint8_t>(300000);
      collectives::broadcast(comm, buf.data(), buf.size(), root);
      if (buf != block(100 + root, 300000)) problems << "broadcast root " << root << "; ";
    }
    collectives::barrier(comm);

    if (!problems.str().empty()) {
      writeLine(reportFd, "error " + std::to_string(rank) + " " + problems.str());
      return 1;
    }
    writeLine(reportFd,
              "ok " + std::to_string(rank) + " " + transport->name() + " " + algo + " " + std::to_string(hash));
    return 0;
  } catch (const std::exception& e) {
    writeLine(reportFd, "error " + std::to_string(rank) + " " + e.what());
    return 13;
  }
}

struct Report {
  std::string transport, algo, hash;
};

// One child process per rank plus the rendezvous server; every wait bounded. The destructor
// reaps the children (SIGKILL after a grace period) and checks their exit status.
class Job {
 public:
  explicit Job(const Scenario& scenario) : n_(static_cast<int>(scenario.hostOf.size())), victim_(scenario.victim) {
    static int job = 0;
    const std::string jobId = "hier-mp-" + std::to_string(::getpid()) + "-" + std::to_string(++job);
    int reportPipe[2];
    EXPECT_EQ(::pipe(reportPipe), 0);
    // Fork before any thread exists in this process (the server starts below).
    for (int r = 0; r < n_; ++r) {
      int command[2];
      EXPECT_EQ(::pipe(command), 0);
      pid_t pid = ::fork();
      if (pid == 0) {
        ::close(reportPipe[0]);
        ::close(command[1]);
        ::_exit(child(r, scenario, jobId, command[0], reportPipe[1]));
      }
      ::close(command[0]);
      commandFds_.push_back(command[1]);
      pids_.push_back(pid);
    }
    ::close(reportPipe[1]);
    reportFd_ = reportPipe[0];
    server_ = std::make_unique<TcpStoreServer>("127.0.0.1", 0, kSecret);
    uint16_t port = server_->port();
    for (int fd : commandFds_) EXPECT_EQ(::write(fd, &port, sizeof(port)), static_cast<ssize_t>(sizeof(port)));
  }

  ~Job() {
    for (int r = 0; r < n_; ++r) {
      ::close(commandFds_[r]);
      int status = 0;
      const auto until = Clock::now() + 10s;
      pid_t done = 0;
      while ((done = ::waitpid(pids_[r], &status, WNOHANG)) == 0 && Clock::now() < until) {
        pollfd none{-1, 0, 0};
        ::poll(&none, 0, 10);
      }
      if (done == 0) {
        ::kill(pids_[r], SIGKILL);
        ::waitpid(pids_[r], &status, 0);
        ADD_FAILURE() << "rank " << r << " did not exit";
      } else if (r == victim_) {
        EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "victim status " << status;
      } else {
        EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "rank " << r << " status " << status;
      }
    }
    ::close(reportFd_);
  }

  int size() const { return n_; }
  void kill(int rank) { EXPECT_EQ(::kill(pids_[rank], SIGKILL), 0); }

  // Next report line, or false at the deadline / when every child closed the pipe.
  bool readLine(std::string& line, Clock::time_point until) {
    size_t nl;
    while ((nl = pending_.find('\n')) == std::string::npos) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
      pollfd p{reportFd_, POLLIN, 0};
      if (left <= 0 || ::poll(&p, 1, static_cast<int>(left)) <= 0) return false;
      char buf[4096];
      ssize_t got = ::read(reportFd_, buf, sizeof(buf));
      if (got <= 0) return false;
      pending_.append(buf, got);
    }
    line = pending_.substr(0, nl);
    pending_.erase(0, nl + 1);
    return true;
  }

 private:
  int n_;
  int victim_;
  std::vector<int> commandFds_;
  std::vector<pid_t> pids_;
  int reportFd_ = -1;
  std::string pending_;
  std::unique_ptr<TcpStoreServer> server_;
};

// Runs the checks on every rank and returns each rank's report.
std::vector<Report> run(const Scenario& scenario) {
  Job job(scenario);
  std::vector<Report> reports(job.size());
  const auto until = Clock::now() + 40s;
  std::string line;
  for (int got = 0; got < job.size() && job.readLine(line, until); ++got) {
    std::istringstream words(line);
    std::string kind;
    int rank = -1;
    words >> kind >> rank;
    if (kind == "ok" && rank >= 0 && rank < job.size()) {
      words >> reports[rank].transport >> reports[rank].algo >> reports[rank].hash;
    } else {
      ADD_FAILURE() << line;
    }
  }
  return reports;
}

void expectAgreement(const std::vector<Report>& reports, const std::string& algo) {
  for (size_t r = 0; r < reports.size(); ++r) {
    EXPECT_EQ(reports[r].transport, "shm+tcp") << "rank " << r;
    EXPECT_EQ(reports[r].algo, algo) << "rank " << r;
    EXPECT_EQ(reports[r].hash, reports[0].hash) << "rank " << r << " differs from rank 0";
  }
}

TEST(HierarchicalMultiProcess, TwoHostsTwoRanks) { expectAgreement(run({{"a", "a", "b", "b"}, {}}), "hierarchical"); }

TEST(HierarchicalMultiProcess, TwoHostsThreeRanksInterleavedSmallSpaces) {
  // Small shared buffers: many chunks per collective.
  expectAgreement(run({{"a", "b", "a", "b", "a", "b"}, {{"HOROVOD_SHM_SPACE_BYTES", "65536"}}}), "hierarchical");
}

TEST(HierarchicalMultiProcess, ForcedOnUnevenHostsFallsBack) {
  expectAgreement(run({{"a", "b", "b"}, {{"HOROVOD_ALLREDUCE_ALGO", "hierarchical"}}}), "ring");
}

TEST(HierarchicalMultiProcess, ForcedFlatAlgorithmIsHonoured) {
  expectAgreement(run({{"a", "a", "b", "b"}, {{"HOROVOD_ALLREDUCE_ALGO", "ring"}}}), "ring");
}

}  // namespace
}  // namespace hvd

namespace hvd {
namespace {

// A rank SIGKILLed while every rank loops on hierarchical allreduces: each survivor fails with
// PeerLost within a few seconds (directly, or because a host peer that failed exited), never a
// hang until the 10 s step timeout.
TEST(HierarchicalMultiProcess, KilledRankFailsEverySurvivor) {
  for (int victim : {3, 0}) {
    SCOPED_TRACE("victim " + std::to_string(victim));
    Job job({{"a", "b", "a", "b"}, {}, victim});
    const int n = job.size();
    std::string line;
    int ready = 0;
    const auto readyBy = Clock::now() + 20s;
    while (ready < n && job.readLine(line, readyBy)) {
      ASSERT_EQ(line.rfind("ready", 0), 0u) << line;
      ready++;
    }
    ASSERT_EQ(ready, n);
    job.kill(victim);
    const auto killedAt = Clock::now();
    int lost = 0;
    while (lost < n - 1 && job.readLine(line, killedAt + 8s)) {
      EXPECT_EQ(line.rfind("lost", 0), 0u) << line;
      EXPECT_LT(Clock::now() - killedAt, 5s) << line;
      lost++;
    }
    EXPECT_EQ(lost, n - 1);
  }
}

}  // namespace
}  // namespace hvd
