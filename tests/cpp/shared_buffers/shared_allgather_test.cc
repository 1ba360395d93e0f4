// The shared-output allgather (the allgather algorithm "shm_outputs") over real processes: forked ranks on
// the shm transport run the public API. Checks every element against its expected value for
// uneven per-rank sizes across the path's thresholds (pooled output, streaming stores, chunks),
// that the path is taken where it should be and not below it, that a rank whose output is not
// shared sends everyone to the staged path (with right results), that the same outputs are
// reused in a steady loop, and that a rank killed mid-op gives PeerLost on the others.
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "horovod/horovod.h"
#include "shared_buffers/runtime_counts.h"
#include "support/forked_ranks.h"

namespace hvd {
namespace {

using test_support::kOk;
constexpr int kWrongPath = 5;
constexpr int kMismatch = 6;

std::vector<int> runRanks(int n, const std::function<int(int)>& body, int limitSeconds = 60) {
  return test_support::runForkedRanks(n, body, {"shm", "shared-host", std::chrono::seconds(limitSeconds)});
}

TensorView viewOf(void* data, DataType dtype, std::vector<int64_t> shape) {
  TensorView view;
  view.data = data;
  view.dtype = dtype;
  view.shape = std::move(shape);
  return view;
}

// Rows of rank r in case `c`: uneven, so blocks start at odd offsets of the output.
int64_t rowsOf(int r, int64_t base) { return base + 3 * r + 1; }

// Element i of rank r's block.
int32_t valueOf(int r, size_t i) { return static_cast<int32_t>((i * 2654435761u) ^ (uint32_t(r) << 28)); }

// Allgathers rows of `cols` int32 from every rank and checks every element; returns kOk,
// kMismatch, or kWrongPath when the path taken is not `wantShared`.
int gatherAndCheck(int rank, int n, int64_t baseRows, int64_t cols, bool wantShared, const std::string& name) {
  const int64_t mine = rowsOf(rank, baseRows);
  std::vector<int32_t> in(static_cast<size_t>(mine * cols));
  for (size_t i = 0; i < in.size(); ++i) in[i] = valueOf(rank, i);
  const TensorView view = viewOf(in.data(), DataType::kInt32, {mine, cols});
  Options o;
  o.name = name;
  const uint64_t before = test_support::sharedAllgatherCount();
  OwnedTensor out = allgather(view, o);
  if ((test_support::sharedAllgatherCount() == before + 1) != wantShared) {
    std::fprintf(stderr, "rank %d %s: shared-output path %s\n", rank, name.c_str(),
                 wantShared ? "not taken" : "taken unexpectedly");
    return kWrongPath;
  }
  int64_t totalRows = 0;
  for (int r = 0; r < n; ++r) totalRows += rowsOf(r, baseRows);
  if (out.view.shape != std::vector<int64_t>{totalRows, cols}) return kMismatch;
  const auto* got = static_cast<const int32_t*>(out.view.data);
  size_t at = 0;
  for (int r = 0; r < n; ++r) {
    const size_t count = static_cast<size_t>(rowsOf(r, baseRows) * cols);
    for (size_t i = 0; i < count; ++i, ++at) {
      if (got[at] != valueOf(r, i)) {
        std::fprintf(stderr, "rank %d %s: element %zu of rank %d's block is wrong\n", rank, name.c_str(), i, r);
        return kMismatch;
      }
    }
  }
  return kOk;
}

TEST(SharedAllgather, RightResultsAcrossSizesAndThresholds) {
  auto codes = runRanks(
      3,
      [](int rank) {
        init();
        struct Case {
          int64_t baseRows, cols;
          bool shared;
        };
        // Output bytes: ~1 KiB and ~200 KiB (below the pooled size: staged), ~300 KiB, ~2.4 MiB
        // (several chunks), ~12 MiB (streaming stores) and ~13 MiB with rows of 5 int32.
        const std::vector<Case> cases = {{20, 4, false},    {16000, 1, false},  {25000, 1, true},
                                         {200000, 1, true}, {1000000, 1, true}, {220000, 5, true}};
        int id = 0;
        for (const Case& c : cases) {
          int code = gatherAndCheck(rank, 3, c.baseRows, c.cols, c.shared, "gather." + std::to_string(id++));
          if (code != kOk) return code;
        }
        // A steady loop under one name: the pool hands the same shared blocks back.
        for (int step = 0; step < 10; ++step) {
          int code = gatherAndCheck(rank, 3, 100000, 1, true, "steady");
          if (code != kOk) return code;
        }
        barrier();
        shutdown();
        return kOk;
      },
      120);
  EXPECT_EQ(codes, (std::vector<int>{kOk, kOk, kOk}));
}

// Rank 1 keeps its outputs private (HOROVOD_SHARED_INPLACE=0 there only): every rank takes the
// staged path, with right results, and nobody waits for a protocol the others skipped.
TEST(SharedAllgather, RankWithoutSharedOutputSendsAllToTheStagedPath) {
  auto codes = runRanks(2, [](int rank) {
    if (rank == 1) setenv("HOROVOD_SHARED_INPLACE", "0", 1);
    init();
    for (int step = 0; step < 3; ++step) {
      int code = gatherAndCheck(rank, 2, 300000, 1, false, "mixed");
      if (code != kOk) return code;
    }
    barrier();
    shutdown();
    return kOk;
  });
  EXPECT_EQ(codes, (std::vector<int>{kOk, kOk}));
}

// Under the pool's budget the outputs of a steady loop are two shared blocks, mapped once.
TEST(SharedAllgather, SteadyLoopReusesTwoBlocks) {
  auto codes = runRanks(2, [](int rank) {
    init();
    OwnedTensor held;
    std::vector<float> in(size_t(1) << 20, float(rank));  // 4 MiB per rank, 8 MiB outputs
    const TensorView view = viewOf(in.data(), DataType::kFloat32, {int64_t(in.size())});
    Options o;
    o.name = "loop";
    const size_t mappedBefore = test_support::outputBlocksMapped();
    for (int step = 0; step < 20; ++step) {
      OwnedTensor next = allgather(view, o);
      const float* f = static_cast<const float*>(next.view.data);
      if (f[0] != 0.0f || f[in.size()] != 1.0f) return kMismatch;
      held = std::move(next);  // the previous output goes back to the pool here
    }
    if (test_support::sharedAllgatherCount() != 20) return kWrongPath;
    const size_t mapped = test_support::outputBlocksMapped() - mappedBefore;
    if (mapped != 2) {
      std::fprintf(stderr, "rank %d: %zu blocks mapped for 20 steps\n", rank, mapped);
      return kWrongPath;
    }
    barrier();
    shutdown();
    return kOk;
  });
  EXPECT_EQ(codes, (std::vector<int>{kOk, kOk}));
}

TEST(SharedAllgather, KilledRankIsReportedAsPeerLost) {
  auto codes = runRanks(3, [](int rank) {
    init();
    std::vector<float> in(size_t(1) << 18, float(rank));  // 1 MiB per rank
    const TensorView view = viewOf(in.data(), DataType::kFloat32, {int64_t(in.size())});
    Options o;
    o.name = "kill";
    return test_support::runUntilPeerLost(
        rank, 2, [&] { allgather(view, o); },
        [] { return test_support::sharedAllgatherCount() < 30 ? kWrongPath : kOk; });
  });
  EXPECT_EQ(codes[0], kOk);
  EXPECT_EQ(codes[1], kOk);
  EXPECT_EQ(codes[2], -SIGKILL);
}

}  // namespace
}  // namespace hvd
