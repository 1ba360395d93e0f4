// Real processes for tests of the public API: forks `n` ranks that rendezvous, like under
// horovodrun, through a TcpStoreServer owned by the parent, and runs body(rank) in each.
//
// Contract: returns each rank's exit code (body's return value; 1 if it threw; -signal if it
// was killed). Every child is bounded by alarm(limit); the parent SIGKILLs stragglers 5 s after
// that, so a hang fails the test instead of blocking the suite. The server starts after the
// forks (children never inherit its thread) and its port reaches them through a pipe.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "horovod/errors.h"
#include "store/tcp_store_server.h"

namespace hvd::test_support {

// Exit codes of forked ranks (tests add their own from 5 up).
constexpr int kOk = 0;
constexpr int kFailed = 1;
constexpr int kWrongError = 2;
constexpr int kTooSlow = 3;
constexpr int kNoError = 4;

struct ForkedRanksOptions {
  std::string transport = "shm";       // HOROVOD_TRANSPORT
  std::string hostname = "test-host";  // HOROVOD_HOSTNAME of every rank (one host)
  std::chrono::seconds limit{40};
};

inline std::vector<int> runForkedRanks(int n, const std::function<int(int)>& body,
                                       const ForkedRanksOptions& options = {}) {
  static const char kSecret[] = "00112233445566778899aabbccddeeff";
  std::vector<int> pipes(n);
  std::vector<pid_t> pids(n);
  for (int r = 0; r < n; ++r) {
    int fds[2];
    if (pipe(fds) != 0) throw std::runtime_error("pipe");
    pid_t pid = fork();
    if (pid == 0) {
      close(fds[1]);
      uint16_t port = 0;
      if (read(fds[0], &port, sizeof(port)) != sizeof(port)) _exit(100);
      setenv("HOROVOD_RANK", std::to_string(r).c_str(), 1);
      setenv("HOROVOD_SIZE", std::to_string(n).c_str(), 1);
      setenv("HOROVOD_LOCAL_RANK", std::to_string(r).c_str(), 1);
      setenv("HOROVOD_LOCAL_SIZE", std::to_string(n).c_str(), 1);
      setenv("HOROVOD_HOSTNAME", options.hostname.c_str(), 1);
      setenv("HOROVOD_GLOO_RENDEZVOUS_ADDR", "127.0.0.1", 1);
      setenv("HOROVOD_GLOO_RENDEZVOUS_PORT", std::to_string(port).c_str(), 1);
      setenv("HOROVOD_SECRET_KEY", kSecret, 1);
      setenv("HOROVOD_TRANSPORT", options.transport.c_str(), 1);
      setenv("HOROVOD_GLOO_TIMEOUT_SECONDS", "20", 1);
      alarm(static_cast<unsigned>(options.limit.count()));  // a hang kills the child
      int code = 1;
      try {
        code = body(r);
      } catch (const std::exception& e) {
        fprintf(stderr, "rank %d: %s\n", r, e.what());
      }
      _exit(code);
    }
    close(fds[0]);
    pipes[r] = fds[1];
    pids[r] = pid;
  }
  std::vector<int> codes(n, -999);
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  uint16_t port = server.port();
  for (int r = 0; r < n; ++r) {
    if (write(pipes[r], &port, sizeof(port)) != sizeof(port)) ADD_FAILURE() << "pipe write";
    close(pipes[r]);
  }
  auto deadline = std::chrono::steady_clock::now() + options.limit + std::chrono::seconds(5);
  for (int left = n; left > 0;) {
    for (int r = 0; r < n; ++r) {
      int status = 0;
      if (codes[r] == -999 && waitpid(pids[r], &status, WNOHANG) == pids[r]) {
        codes[r] = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
        --left;
      }
    }
    if (std::chrono::steady_clock::now() > deadline) {
      for (int r = 0; r < n; ++r) {
        if (codes[r] == -999) kill(pids[r], SIGKILL);
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return codes;
}

// The body of a "kill a rank in the middle of an operation" test: runs op() in a loop; at step
// 30 rank `victim` SIGKILLs itself, and every other rank's op() must throw PeerLost naming it
// within 5 seconds. A survivor then stays alive a while (its own exit must not be what the other
// survivors detect first) and returns afterLoss() (kOk when not given), or why it failed.
inline int runUntilPeerLost(int rank, int victim, const std::function<void()>& op,
                            const std::function<int()>& afterLoss = {}) {
  for (int step = 0; step <= 100000; ++step) {
    if (rank == victim && step == 30) raise(SIGKILL);
    auto start = std::chrono::steady_clock::now();
    try {
      op();
    } catch (const PeerLost& e) {
      double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      fprintf(stderr, "rank %d: PeerLost(rank %d) after %.3f s: %s\n", rank, e.rank(), seconds, e.what());
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));
      if (e.rank() != victim) return kWrongError;
      if (seconds > 5.0) return kTooSlow;
      return afterLoss ? afterLoss() : kOk;
    } catch (const std::exception& e) {
      fprintf(stderr, "rank %d: unexpected error type: %s\n", rank, e.what());
      return kWrongError;
    }
  }
  return kNoError;
}

}  // namespace hvd::test_support
