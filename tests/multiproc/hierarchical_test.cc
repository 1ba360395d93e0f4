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
    writeLine(reportFd, "ok " + std::to_string(rank) + " " + transport->name() + " " + algo + " " +
                            std::to_string(hash));
    return 0;
  } catch (const std::exception& e) {
    writeLine(reportFd, "error " + std::to_string(rank) + " " + e.what());
    return 13;
  }
}

struct Report {
  std::string transport, algo, hash;
};

// Forks one child per rank, serves the rendezvous, waits (bounded) and returns each rank's report.
std::vector<Report> run(const Scenario& scenario) {
  static int job = 0;
  const int n = static_cast<int>(scenario.hostOf.size());
  const std::string jobId = "hier-mp-" + std::to_string(::getpid()) + "-" + std::to_string(++job);
  int reportPipe[2];
  EXPECT_EQ(::pipe(reportPipe), 0);
  std::vector<int> commandFds;
  std::vector<pid_t> pids;
  // Fork before any thread exists in this process (the server starts below).
  for (int r = 0; r < n; ++r) {
    int command[2];
    EXPECT_EQ(::pipe(command), 0);
    pid_t pid = ::fork();
    if (pid == 0) {
      ::close(reportPipe[0]);
      ::close(command[1]);
      ::_exit(child(r, scenario, jobId, command[0], reportPipe[1]));
    }
    ::close(command[0]);
    commandFds.push_back(command[1]);
    pids.push_back(pid);
  }
  ::close(reportPipe[1]);
  std::vector<Report> reports(n);
  {
    TcpStoreServer server("127.0.0.1", 0, kSecret);
    uint16_t port = server.port();
    for (int fd : commandFds) EXPECT_EQ(::write(fd, &port, sizeof(port)), static_cast<ssize_t>(sizeof(port)));

    // Read reports until every rank has written one or the deadline.
    std::string text;
    int lines = 0;
    const auto until = Clock::now() + 40s;
    while (lines < n) {
      const int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count());
      pollfd p{reportPipe[0], POLLIN, 0};
      if (left <= 0 || ::poll(&p, 1, left) <= 0) break;
      char buf[4096];
      ssize_t got = ::read(reportPipe[0], buf, sizeof(buf));
      if (got <= 0) break;
      text.append(buf, got);
      lines = static_cast<int>(std::count(text.begin(), text.end(), '\n'));
    }
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream words(line);
      std::string kind;
      int rank = -1;
      words >> kind >> rank;
      if (kind == "ok" && rank >= 0 && rank < n) {
        words >> reports[rank].transport >> reports[rank].algo >> reports[rank].hash;
      } else {
        ADD_FAILURE() << line;
      }
    }
  }
  for (int r = 0; r < n; ++r) {
    ::close(commandFds[r]);
    int status = 0;
    // Children exit right after reporting; kill stragglers so the test cannot hang.
    const auto until = Clock::now() + 10s;
    pid_t done = 0;
    while ((done = ::waitpid(pids[r], &status, WNOHANG)) == 0 && Clock::now() < until) {
      pollfd none{-1, 0, 0};
      ::poll(&none, 0, 10);
    }
    if (done == 0) {
      ::kill(pids[r], SIGKILL);
      ::waitpid(pids[r], &status, 0);
      ADD_FAILURE() << "rank " << r << " did not exit";
    } else {
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "rank " << r << " status " << status;
    }
  }
  ::close(reportPipe[0]);
  return reports;
}

void expectAgreement(const std::vector<Report>& reports, const std::string& algo) {
  for (size_t r = 0; r < reports.size(); ++r) {
    EXPECT_EQ(reports[r].transport, "shm+tcp") << "rank " << r;
    EXPECT_EQ(reports[r].algo, algo) << "rank " << r;
    EXPECT_EQ(reports[r].hash, reports[0].hash) << "rank " << r << " differs from rank 0";
  }
}

TEST(HierarchicalMultiProcess, TwoHostsTwoRanks) {
  expectAgreement(run({{"a", "a", "b", "b"}, {}}), "hierarchical");
}

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
