// Real processes: ranks are forked children that meet through a TcpStoreServer; one is
// SIGKILLed while every rank is blocked, and each survivor must fail with PeerLost naming it
// within 5 seconds. Everything is bounded (alarm() in children, poll timeouts in the parent).
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <map>
#include <sstream>
#include <string>

#include "store/tcp_store.h"
#include "store/tcp_store_server.h"
#include "transport/transport.h"

namespace hvd {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr int kRanks = 4;
constexpr int kVictim = 2;
const char* kSecret = "multiproc-secret";

void writeLine(int fd, const std::string& line) {
  std::string text = line + "\n";
  (void)!::write(fd, text.data(), text.size());
}

// Child body: returns the exit code.
int child(int rank, int commandFd, int reportFd) {
  ::alarm(30);
  uint16_t port = 0;
  if (::read(commandFd, &port, sizeof(port)) != sizeof(port)) return 10;
  try {
    TransportContext context;
    context.rank = rank;
    context.size = kRanks;
    context.hostOf.assign(kRanks, "localhost");
    context.store = std::make_shared<PrefixStore>(
        "tcp", std::make_shared<TcpStore>("127.0.0.1", port, kSecret, Deadline::after(10s)));
    context.jobId = "multiproc";
    context.secret = kSecret;
    context.timeout = 10000ms;
    auto t = makeTransport("tcp", context);
    // Warm-up ring exchange proves the mesh works.
    int next = (rank + 1) % kRanks, prev = (rank + kRanks - 1) % kRanks;
    std::vector<uint8_t> out(1 << 20, static_cast<uint8_t>(rank)), in(1 << 20);
    t->sendRecv(next, out.data(), out.size(), prev, in.data(), in.size(), Deadline::after(10s));
    if (in[12345] != prev) return 11;
    writeLine(reportFd, "ready " + std::to_string(rank));
    // Block in different kinds of waits; none of them involves an answer that will come.
    auto start = Clock::now();
    try {
      uint8_t buf[64];
      switch (rank) {
        case 0: t->recv(1, buf, sizeof(buf), Deadline::after(20s)); break;      // not the victim
        case 1:
          while (t->waitForMessage(Deadline::after(20s))) {
          }
          break;       // mailbox
        case 2: t->recv(0, buf, sizeof(buf), Deadline::after(20s)); break;      // the victim
        case 3: t->recv(kVictim, buf, sizeof(buf), Deadline::after(20s)); break;  // the victim's stream
      }
      writeLine(reportFd, "noerror " + std::to_string(rank));
      return 12;
    } catch (const PeerLost& e) {
      auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
      writeLine(reportFd, "lost " + std::to_string(rank) + " " + std::to_string(e.rank()) + " " + std::to_string(ms) +
                              " " + e.what());
    }
    // Stay up until the parent has every report (our exit would be the others' loss).
    char go;
    (void)!::read(commandFd, &go, 1);
    return 0;
  } catch (const std::exception& e) {
    writeLine(reportFd, "error " + std::to_string(rank) + " " + e.what());
    return 13;
  }
}

TEST(TcpMultiProcess, SigkilledRankFailsEverySurvivorNamingIt) {
  int reportPipe[2];
  ASSERT_EQ(::pipe(reportPipe), 0);
  std::vector<int> commandFds;
  std::vector<pid_t> pids;
  // Fork before any thread exists in this process (the server starts below).
  for (int r = 0; r < kRanks; ++r) {
    int command[2];
    ASSERT_EQ(::pipe(command), 0);
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::close(reportPipe[0]);
      ::close(command[1]);
      ::_exit(child(r, command[0], reportPipe[1]));
    }
    ::close(command[0]);
    commandFds.push_back(command[1]);
    pids.push_back(pid);
  }
  ::close(reportPipe[1]);

  TcpStoreServer server("127.0.0.1", 0, kSecret);
  uint16_t port = server.port();
  for (int fd : commandFds) ASSERT_EQ(::write(fd, &port, sizeof(port)), static_cast<ssize_t>(sizeof(port)));

  // Collect lines until `want` lines matching prefix arrived, or the deadline.
  std::string pending;
  std::vector<std::string> lines;
  auto readLines = [&](Clock::time_point until) {
    char buf[4096];
    pollfd p{reportPipe[0], POLLIN, 0};
    int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count());
    if (left <= 0 || ::poll(&p, 1, left) <= 0) return false;
    ssize_t n = ::read(reportPipe[0], buf, sizeof(buf));
    if (n <= 0) return false;
    pending.append(buf, n);
    size_t nl;
    while ((nl = pending.find('\n')) != std::string::npos) {
      lines.push_back(pending.substr(0, nl));
      pending.erase(0, nl + 1);
    }
    return true;
  };
  auto count = [&](const std::string& prefix) {
    int c = 0;
    for (const auto& l : lines) c += l.rfind(prefix, 0) == 0;
    return c;
  };
  auto until = Clock::now() + 20s;
  while (count("ready") < kRanks && count("error") == 0 && readLines(until)) {
  }
  ASSERT_EQ(count("ready"), kRanks) << (lines.empty() ? "" : lines.back());

  std::this_thread::sleep_for(300ms);  // let every rank block
  auto killedAt = Clock::now();
  ASSERT_EQ(::kill(pids[kVictim], SIGKILL), 0);
  std::map<int, double> noticedAfterMs;
  until = Clock::now() + 10s;
  while (count("lost") + count("noerror") + count("error") < kRanks - 1 && readLines(until)) {
    for (const auto& l : lines) {
      int rank;
      if (l.rfind("lost", 0) == 0 && std::sscanf(l.c_str(), "lost %d", &rank) == 1 && !noticedAfterMs.count(rank)) {
        noticedAfterMs[rank] = std::chrono::duration<double, std::milli>(Clock::now() - killedAt).count();
      }
    }
  }
  for (int r = 0; r < kRanks; ++r) {
    char go = 'x';
    if (r != kVictim) (void)!::write(commandFds[r], &go, 1);  // the victim's pipe has no reader
    ::close(commandFds[r]);
  }
  for (int r = 0; r < kRanks; ++r) {
    int status = 0;
    ASSERT_EQ(::waitpid(pids[r], &status, 0), pids[r]);
    if (r == kVictim) {
      EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    } else {
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "rank " << r << " status " << status;
    }
  }
  ::close(reportPipe[0]);

  EXPECT_EQ(count("lost"), kRanks - 1);
  for (const auto& l : lines) {
    if (l.rfind("lost", 0) != 0) continue;
    int rank = -1, lostRank = -1;
    long ms = -1;
    ASSERT_EQ(std::sscanf(l.c_str(), "lost %d %d %ld", &rank, &lostRank, &ms), 3) << l;
    EXPECT_EQ(lostRank, kVictim) << l;
    EXPECT_NE(l.find("lost connection to rank " + std::to_string(kVictim)), std::string::npos) << l;
    EXPECT_LT(noticedAfterMs[rank], 5000.0) << l;
  }
}

}  // namespace
}  // namespace hvd
