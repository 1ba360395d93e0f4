// Micro benchmark of the shm transport between two processes: 8-byte ping-pong (data plane and
// mailbox), SharedSpace barrier, and 64 MiB streaming. Prints numbers, asserts only correctness.
// Disabled by default (timings on a shared 2-core machine are noise); run with
//   test_transport_shm --gtest_also_run_disabled_tests --gtest_filter='*Bench*'
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include <gtest/gtest.h>

#include "shm_test_util.h"

namespace hvd::shm::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

double percentileUs(std::vector<double>& v, double p) {
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(p * (v.size() - 1))];
}

int benchRank(int r, std::shared_ptr<SharedTestStore> store, const std::string& job) {
  ShmOptions options = ShmOptions::fromEnvironment();
  ShmTransport t(makeContext(r, 2, store, job), options);
  const int peer = 1 - r;
  auto deadline = [] { return Deadline::after(30s); };
  const int iterations = 20000;
  std::vector<double> rtt;
  rtt.reserve(iterations);

  // Data plane ping-pong, 8 bytes.
  uint64_t word = 0;
  for (int i = -1000; i < iterations; ++i) {
    auto start = Clock::now();
    if (r == 0) {
      t.send(peer, &word, 8, deadline());
      t.recv(peer, &word, 8, deadline());
    } else {
      t.recv(peer, &word, 8, deadline());
      ++word;
      t.send(peer, &word, 8, deadline());
    }
    if (i >= 0) rtt.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
  }
  if (r == 0) {
    if (word != static_cast<uint64_t>(iterations + 1000)) return 2;
    std::printf("[ shm bench ] send/recv 8 B round trip: p50 %.2f us, p90 %.2f us, p99 %.2f us\n",
                percentileUs(rtt, 0.5), percentileUs(rtt, 0.9), percentileUs(rtt, 0.99));
  }

  // Mailbox ping-pong, 8 bytes.
  rtt.clear();
  for (int i = -1000; i < iterations; ++i) {
    auto start = Clock::now();
    if (r == 0) t.post(peer, &word, 8);
    std::optional<MailboxMessage> m;
    while (!(m = t.poll())) t.waitForMessage(deadline());
    if (r == 1) t.post(peer, m->bytes.data(), m->bytes.size());
    if (i >= 0) rtt.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
  }
  if (r == 0) {
    std::printf("[ shm bench ] post/poll 8 B round trip:  p50 %.2f us, p90 %.2f us, p99 %.2f us\n",
                percentileUs(rtt, 0.5), percentileUs(rtt, 0.9), percentileUs(rtt, 0.99));
  }

  // SharedSpace barrier.
  SharedSpace* space = t.sharedSpace({0, 1}, deadline());
  rtt.clear();
  for (int i = -1000; i < iterations; ++i) {
    auto start = Clock::now();
    space->barrier(deadline());
    if (i >= 0) rtt.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count());
  }
  if (r == 0) {
    std::printf("[ shm bench ] SharedSpace barrier (2 ranks): p50 %.2f us, p90 %.2f us\n", percentileUs(rtt, 0.5),
                percentileUs(rtt, 0.9));
  }

  // Streaming: 64 MiB one way, then both ways with sendRecv.
  const size_t bytes = size_t{64} << 20;
  std::vector<uint8_t> out(bytes, static_cast<uint8_t>(r + 1)), in(bytes);
  for (int mode = 0; mode < 2; ++mode) {
    std::vector<double> seconds;
    for (int rep = 0; rep < 6; ++rep) {
      space->barrier(deadline());
      auto start = Clock::now();
      if (mode == 0) {
        if (r == 0) t.send(peer, out.data(), bytes, deadline());
        else t.recv(peer, in.data(), bytes, deadline());
        uint8_t ack = 0;
        if (r == 1) t.send(peer, &ack, 1, deadline());
        else t.recv(peer, &ack, 1, deadline());
      } else {
        t.sendRecv(peer, out.data(), bytes, peer, in.data(), bytes, deadline());
      }
      if (rep > 0) seconds.push_back(std::chrono::duration<double>(Clock::now() - start).count());
    }
    if (r == 1 || mode == 1) {
      if (in[0] != static_cast<uint8_t>(peer + 1) || in[bytes - 1] != static_cast<uint8_t>(peer + 1)) return 3;
    }
    if (r == 0) {
      std::sort(seconds.begin(), seconds.end());
      double best = seconds.front(), median = seconds[seconds.size() / 2];
      std::printf("[ shm bench ] 64 MiB %s: median %.2f GB/s, best %.2f GB/s (per direction)\n",
                  mode == 0 ? "send->recv   " : "sendRecv both", bytes / median / 1e9, bytes / best / 1e9);
    }
  }
  space->barrier(deadline());
  return 0;
}

TEST(ShmBench, DISABLED_TwoProcesses) {
  auto store = std::make_shared<SharedTestStore>();
  std::string job = uniqueJobId();
  std::fflush(stdout);
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::alarm(120);
    int code = 1;
    try {
      code = benchRank(1, store, job);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "rank 1: %s\n", e.what());
    }
    std::fflush(stdout);
    ::_exit(code);
  }
  int code = 1;
  try {
    code = benchRank(0, store, job);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "rank 0: " << e.what();
    ::kill(child, SIGKILL);
  }
  EXPECT_EQ(code, 0);
  int status = 0;
  ::waitpid(child, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

}  // namespace
}  // namespace hvd::shm::testing
