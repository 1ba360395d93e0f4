// Real processes: forked ranks rendezvous through a TcpStoreServer in the parent, like under
// horovodrun, and run the public API over the real transports. One test SIGKILLs a rank in the
// middle of an allreduce loop: the survivors' operations must fail with PeerLost naming it
// within 5 seconds. Every child is bounded by a deadline; the parent kills stragglers.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "horovod/horovod.h"
#include "store/tcp_store_server.h"

namespace hvd {
namespace {

using Clock = std::chrono::steady_clock;

// Child exit codes.
constexpr int kOk = 0;
constexpr int kFailed = 1;
constexpr int kWrongError = 2;
constexpr int kTooSlow = 3;
constexpr int kNoError = 4;

// Forks `n` ranks running body(rank) with the job's environment; returns their exit codes
// (-signal for a signal). The parent owns the rendezvous server (started after the forks, so
// the children never inherit its thread) and sends its port through a pipe.
std::vector<int> runRanks(int n, const std::string& transport, const std::function<int(int)>& body,
                          std::chrono::seconds limit = std::chrono::seconds(40)) {
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
      setenv("HOROVOD_HOSTNAME", "mp-host", 1);
      setenv("HOROVOD_GLOO_RENDEZVOUS_ADDR", "127.0.0.1", 1);
      setenv("HOROVOD_GLOO_RENDEZVOUS_PORT", std::to_string(port).c_str(), 1);
      setenv("HOROVOD_SECRET_KEY", "00112233445566778899aabbccddeeff", 1);
      setenv("HOROVOD_TRANSPORT", transport.c_str(), 1);
      setenv("HOROVOD_GLOO_TIMEOUT_SECONDS", "20", 1);
      alarm(static_cast<unsigned>(limit.count()));  // a hang kills the child
      int code = kFailed;
      try {
        code = body(r);
      } catch (const std::exception& e) {
        fprintf(stderr, "rank %d: %s\n", r, e.what());
        code = kFailed;
      }
      _exit(code);
    }
    close(fds[0]);
    pipes[r] = fds[1];
    pids[r] = pid;
  }
  std::vector<int> codes(n, -999);
  {
    TcpStoreServer server("127.0.0.1", 0, "00112233445566778899aabbccddeeff");
    uint16_t port = server.port();
    for (int r = 0; r < n; ++r) {
      if (write(pipes[r], &port, sizeof(port)) != sizeof(port)) ADD_FAILURE() << "pipe write";
      close(pipes[r]);
    }
    auto deadline = Clock::now() + limit + std::chrono::seconds(5);
    int left = n;
    while (left > 0) {
      for (int r = 0; r < n; ++r) {
        if (codes[r] != -999) continue;
        int status = 0;
        if (waitpid(pids[r], &status, WNOHANG) == pids[r]) {
          codes[r] = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
          --left;
        }
      }
      if (Clock::now() > deadline) {
        for (int r = 0; r < n; ++r) {
          if (codes[r] == -999) kill(pids[r], SIGKILL);
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  return codes;
}

TensorView floats(std::vector<float>& v) {
  TensorView t;
  t.data = v.data();
  t.dtype = DataType::kFloat32;
  t.shape = {static_cast<int64_t>(v.size())};
  return t;
}

class MultiProcess : public ::testing::TestWithParam<std::string> {};

TEST_P(MultiProcess, CollectivesAcrossProcesses) {
  auto codes = runRanks(3, GetParam(), [](int rank) {
    init();
    if (hvd::rank() != rank || hvd::size() != 3) return kFailed;
    for (int step = 0; step < 20; ++step) {
      std::vector<float> a(1000, static_cast<float>(rank + step)), b(1000);
      Options o;
      o.name = "mp.ar";
      allreduce(floats(a), floats(b), o);
      for (float f : b) {
        if (f != 3.0f * step + 3.0f) return kFailed;
      }
    }
    std::vector<float> g(static_cast<size_t>(rank + 1), static_cast<float>(rank));
    Options o;
    o.name = "mp.ag";
    OwnedTensor out = allgather(floats(g), o);
    if (out.view.shape[0] != 6) return kFailed;
    barrier();
    shutdown();
    // init -> shutdown -> init keeps rank and size.
    init();
    if (hvd::rank() != rank || hvd::size() != 3) return kFailed;
    std::vector<float> c(4, 1.0f), d(4);
    o.name = "mp.again";
    allreduce(floats(c), floats(d), o);
    if (d[0] != 3.0f) return kFailed;
    shutdown();
    return kOk;
  });
  EXPECT_EQ(codes, (std::vector<int>{kOk, kOk, kOk}));
}

TEST_P(MultiProcess, KilledRankIsReportedAsPeerLost) {
  auto codes = runRanks(3, GetParam(), [](int rank) {
    init();
    std::vector<float> a(1 << 16, 1.0f), b(a.size());
    Options o;
    o.name = "mp.kill";
    for (int step = 0;; ++step) {
      if (rank == 2 && step == 30) raise(SIGKILL);
      Clock::time_point start = Clock::now();
      try {
        allreduce(floats(a), floats(b), o);
      } catch (const PeerLost& e) {
        double seconds = std::chrono::duration<double>(Clock::now() - start).count();
        fprintf(stderr, "rank %d: PeerLost(rank %d) after %.3f s: %s\n", rank, e.rank(), seconds, e.what());
        // Stay alive a while, like a real survivor: our exit must not be what the other
        // survivor detects first.
        std::this_thread::sleep_for(std::chrono::milliseconds(1500));
        if (e.rank() != 2) return kWrongError;
        if (seconds > 5.0) return kTooSlow;
        // Later operations fail the same way, at once.
        try {
          allreduce(floats(a), floats(b), o);
          return kNoError;
        } catch (const PeerLost& again) {
          if (again.rank() != 2) return kWrongError;
        }
        return kOk;
      } catch (const std::exception& e) {
        fprintf(stderr, "rank %d: unexpected error type: %s\n", rank, e.what());
        return kWrongError;
      }
      if (step > 100000) return kNoError;
    }
  });
  EXPECT_EQ(codes[0], kOk);
  EXPECT_EQ(codes[1], kOk);
  EXPECT_EQ(codes[2], -SIGKILL);
}

TEST_P(MultiProcess, ShutdownOnOneRankFailsTheOthers) {
  auto codes = runRanks(3, GetParam(), [](int rank) {
    init();
    std::vector<float> a(8, 1.0f), b(8);
    Options o;
    o.name = "mp.warm";
    allreduce(floats(a), floats(b), o);
    if (rank == 1) {
      shutdown();
      return kOk;
    }
    o.name = "mp.never";  // rank 1 never submits it
    try {
      allreduce(floats(a), floats(b), o);
      return kNoError;
    } catch (const Aborted& e) {
      if (std::string(e.what()).find("Horovod has been shut down.") != 0) return kWrongError;
    } catch (const std::exception& e) {
      fprintf(stderr, "rank %d: %s\n", rank, e.what());
      return kWrongError;
    }
    shutdown();
    return kOk;
  });
  EXPECT_EQ(codes, (std::vector<int>{kOk, kOk, kOk}));
}

INSTANTIATE_TEST_SUITE_P(Transports, MultiProcess, ::testing::Values("tcp", "shm", "auto"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace hvd
