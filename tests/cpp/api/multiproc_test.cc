// Real processes: forked ranks rendezvous through a TcpStoreServer in the parent, like under
// horovodrun, and run the public API over the real transports. One test SIGKILLs a rank in the
// middle of an allreduce loop: the survivors' operations must fail with PeerLost naming it
// within 5 seconds. Every child is bounded by a deadline; the parent kills stragglers.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "horovod/horovod.h"
#include "support/forked_ranks.h"

namespace hvd {
namespace {

using test_support::kFailed;
using test_support::kNoError;
using test_support::kOk;
using test_support::kWrongError;

// The three-rank jobs of these tests, over `transport`.
std::vector<int> runRanks(int n, const std::string& transport, const std::function<int(int)>& body) {
  return test_support::runForkedRanks(n, body, {transport, "mp-host", std::chrono::seconds(40)});
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
    return test_support::runUntilPeerLost(
        rank, 2, [&] { allreduce(floats(a), floats(b), o); },
        [&] {
          // Later operations fail the same way, at once.
          try {
            allreduce(floats(a), floats(b), o);
            return kNoError;
          } catch (const PeerLost& again) {
            return again.rank() == 2 ? kOk : kWrongError;
          }
        });
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
