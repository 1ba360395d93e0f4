// The host-staged GPU backend (backends/cuda/staged_backend.h) in real processes at 2 and 3
// ranks, on the host-memory CUDA stand-in (HOROVOD_CUDA_LIBRARY / HOROVOD_NCCL_LIBRARY point the
// loader at it): every collective and dtype with real numbers, fusion, process sets,
// pre/postscale, a producer stream that finishes late, chunked copies, a killed rank and the
// knobs' errors. Every input is written on a producer stream and enqueued without a host sync,
// so a copy the backend does not order after it is reported by the stand-in's ordering checker
// (the CUDA call fails, and so does the collective). Each child is bounded (forked_ranks.h).
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "gpu_device.h"
#include "support/forked_ranks.h"
#include "support/gpu_adasum_cases.h"

namespace hvd {
namespace {

using test::DeviceTensor;
using test::download;
using test_support::kFailed;
using test_support::kOk;

constexpr int kWrongValue = 5;

// Every rank of an `n`-rank job runs body(rank) with the stand-in as CUDA and NCCL and `env` set.
std::vector<int> runGpuRanks(int n, const std::vector<std::pair<std::string, std::string>>& env,
                             const std::function<int(int)>& body) {
  return test_support::runForkedRanks(n,
                                      [&](int rank) {
                                        setenv("HOROVOD_CUDA_LIBRARY", HVD_CUDA_STANDIN, 1);
                                        setenv("HOROVOD_NCCL_LIBRARY", HVD_CUDA_STANDIN, 1);
                                        setenv("HOROVOD_GPU_OPERATIONS", "HOST", 1);
                                        for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
                                        return body(rank);
                                      },
                                      {"shm", "gpu-host", std::chrono::seconds(60)});
}

// Compares, printing the first mismatch.
bool expectValues(const std::vector<double>& got, const std::function<double(size_t)>& want, const std::string& what,
                  double tolerance = 0) {
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::fabs(got[i] - want(i)) > tolerance) {
      fprintf(stderr, "%s: element %zu is %g, expected %g\n", what.c_str(), i, got[i], want(i));
      return false;
    }
  }
  return true;
}

bool isFloat(DataType t) {
  return t == DataType::kFloat16 || t == DataType::kBFloat16 || t == DataType::kFloat32 || t == DataType::kFloat64;
}

// One of each collective in `dtype` on the default set of `n` ranks; kOk when every value is right.
int everyCollective(int rank, int n, DataType dtype) {
  const std::string tag = std::string(dataTypeName(dtype));
  Options o;
  // Allreduce: sum (bool: max) of 12 elements; floats as Average with pre/postscale.
  DeviceTensor in(dtype, {12}), out(dtype, {12});
  for (size_t i = 0; i < 12; ++i) {
    in.host.set(i, dtype == DataType::kBool ? (i % 3 == static_cast<size_t>(rank)) : (rank + 1) + (i % 5));
  }
  in.upload();
  o.name = "ar." + tag;
  o.op = dtype == DataType::kBool ? ReduceOp::kMax : isFloat(dtype) ? ReduceOp::kAverage : ReduceOp::kSum;
  if (isFloat(dtype)) {
    o.prescale = 3.0;
    o.postscale = 0.5;
  }
  allreduce(in.view(), out.view(), o);
  const double ranksSum = n * (n + 1) / 2.0;
  auto arWant = [&](size_t i) {
    if (dtype == DataType::kBool) return (i % 3) < static_cast<size_t>(n) ? 1.0 : 0.0;
    const double sum = ranksSum + n * static_cast<double>(i % 5);
    return isFloat(dtype) ? 1.5 * sum / n : sum;
  };
  if (!expectValues(download(out.view()), arWant, "allreduce " + tag)) return kWrongValue;

  // Allgather: rank r gives r+1 rows of 3.
  DeviceTensor rows(dtype, {rank + 1, 3});
  for (size_t i = 0; i < rows.host.count(); ++i) rows.host.set(i, dtype == DataType::kBool ? 1 : rank * 10 + i);
  rows.upload();
  o = {};
  o.name = "ag." + tag;
  OwnedTensor gathered = allgather(rows.view(), o);
  if (gathered.view.device.kind != DeviceKind::kCuda || gathered.view.shape[0] != n * (n + 1) / 2) return kFailed;
  std::vector<double> want;
  for (int r = 0; r < n; ++r) {
    for (int i = 0; i < (r + 1) * 3; ++i) want.push_back(dtype == DataType::kBool ? 1 : r * 10 + i);
  }
  if (!expectValues(download(gathered.view), [&](size_t i) { return want[i]; }, "allgather " + tag)) {
    return kWrongValue;
  }

  // Broadcast from the last rank.
  DeviceTensor b(dtype, {7});
  for (size_t i = 0; i < 7; ++i) b.host.set(i, dtype == DataType::kBool ? (rank == n - 1) : rank * 5 + i);
  b.upload();
  o = {};
  o.name = "bc." + tag;
  o.root = n - 1;
  broadcast(b.view(), o);
  auto bcWant = [&](size_t i) { return dtype == DataType::kBool ? 1.0 : (n - 1) * 5 + static_cast<double>(i); };
  if (!expectValues(download(b.view()), bcWant, "broadcast " + tag)) return kWrongValue;

  // Alltoall: to set rank p, p+1 rows of 2 holding (rank, p, j).
  std::vector<int32_t> splits;
  int64_t sendRows = 0;
  for (int p = 0; p < n; ++p) {
    splits.push_back(p + 1);
    sendRows += p + 1;
  }
  auto a2aValue = [&](int from, int to, int j) { return dtype == DataType::kBool ? 1.0 : from * 20 + to * 6 + j; };
  DeviceTensor a2a(dtype, {sendRows, 2});
  size_t k = 0;
  for (int p = 0; p < n; ++p) {
    for (int j = 0; j < (p + 1) * 2; ++j) a2a.host.set(k++, a2aValue(rank, p, j));
  }
  a2a.upload();
  o = {};
  o.name = "a2a." + tag;
  o.splits = splits;
  std::vector<int32_t> received;
  OwnedTensor exchanged = alltoall(a2a.view(), o, &received);
  want.clear();
  for (int p = 0; p < n; ++p) {
    if (received[p] != rank + 1) return kFailed;
    for (int j = 0; j < (rank + 1) * 2; ++j) want.push_back(a2aValue(p, rank, j));
  }
  if (exchanged.view.device.kind != DeviceKind::kCuda ||
      !expectValues(download(exchanged.view), [&](size_t i) { return want[i]; }, "alltoall " + tag)) {
    return kWrongValue;
  }

  // Reducescatter (sum; bool: max) of 2n+1 rows of 2: rank r gets its rows of the sum.
  if (dtype != DataType::kBool) {
    const int64_t rowsTotal = 2 * n + 1;
    DeviceTensor rs(dtype, {rowsTotal, 2});
    for (size_t i = 0; i < rs.host.count(); ++i) rs.host.set(i, (rank + 1) + (i % 4));
    rs.upload();
    const int64_t mine = rowsTotal / n + (rank < rowsTotal % n ? 1 : 0);
    int64_t first = 0;
    for (int q = 0; q < rank; ++q) first += rowsTotal / n + (q < rowsTotal % n ? 1 : 0);
    DeviceTensor rsOut(dtype, {mine, 2});
    o = {};
    o.name = "rs." + tag;
    reducescatter(rs.view(), rsOut.view(), o);
    auto rsWant = [&](size_t i) { return ranksSum + n * static_cast<double>((first * 2 + i) % 4); };
    if (!expectValues(download(rsOut.view()), rsWant, "reducescatter " + tag)) return kWrongValue;
  }
  return kOk;
}

class StagedRanks : public ::testing::TestWithParam<int> {};

TEST_P(StagedRanks, EveryCollectiveAndDtype) {
  const int n = GetParam();
  auto codes = runGpuRanks(n, {}, [n](int rank) {
    init();
    for (DataType dtype : test::allDataTypes()) {
      if (int code = everyCollective(rank, n, dtype); code != kOk) return code;
    }
    barrier();
    // Every data collective ran through the staged backend.
    if (test::countOf("cuda_staged", "staged_allgatherv") != test::allDataTypes().size()) return kFailed;
    if (test::countOf("cuda_staged", "staged_alltoallv") != test::allDataTypes().size()) return kFailed;
    shutdown();
    return kOk;
  });
  EXPECT_EQ(codes, std::vector<int>(static_cast<size_t>(n), kOk));
}

TEST_P(StagedRanks, ReduceOpsFusionAndChunks) {
  const int n = GetParam();
  // Chunks of 64 KiB: the 1 MiB tensors below move in 16 overlapped pieces.
  auto codes = runGpuRanks(n, {{"HOROVOD_GPU_STAGED_CHUNK_BYTES", "65536"}}, [n](int rank) {
    init();
    Options o;
    for (ReduceOp op : {ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct}) {
      DeviceTensor in(DataType::kFloat32, {9}), out(DataType::kFloat32, {9});
      for (size_t i = 0; i < 9; ++i) in.host.set(i, (rank + 1) * (i % 2 ? 1.0 : -1.0));
      in.upload();
      o.name = "op." + std::to_string(static_cast<int>(op));
      o.op = op;
      allreduce(in.view(), out.view(), o);
      auto want = [&](size_t i) {
        const double sign = i % 2 ? 1.0 : -1.0;
        if (op == ReduceOp::kProduct) {
          double p = 1;
          for (int r = 1; r <= n; ++r) p *= r * sign;
          return p;
        }
        const bool top = (op == ReduceOp::kMax) == (sign > 0);
        return sign * (top ? n : 1);
      };
      if (!expectValues(download(out.view()), want, "reduce op")) return kWrongValue;
    }

    // A group of five tensors of different sizes is one fused collective.
    std::vector<std::unique_ptr<DeviceTensor>> ins, outs;
    std::vector<TensorView> inViews, outViews;
    for (int t = 0; t < 5; ++t) {
      ins.push_back(std::make_unique<DeviceTensor>(DataType::kFloat64, std::vector<int64_t>{t * 100 + 3}));
      outs.push_back(std::make_unique<DeviceTensor>(DataType::kFloat64, std::vector<int64_t>{t * 100 + 3}));
      for (size_t i = 0; i < ins.back()->host.count(); ++i) ins.back()->host.set(i, rank * 1000 + t * 10 + i);
      ins.back()->upload();
      inViews.push_back(ins.back()->view());
      outViews.push_back(outs.back()->view());
    }
    const uint64_t before = test::countOf("cuda_staged");
    o = {};
    o.name = "fused";
    groupedAllreduceAsync(inViews, outViews, o)->wait();
    if (test::countOf("cuda_staged") != before + 1) return kFailed;
    for (int t = 0; t < 5; ++t) {
      auto want = [&](size_t i) { return 1000.0 * n * (n - 1) / 2 + n * (t * 10.0 + i); };
      if (!expectValues(download(outViews[t]), want, "fused allreduce")) return kWrongValue;
    }
    // Grouped allgather and reducescatter use the fused layouts.
    o.name = "fused.ag";
    WorkPtr ag = groupedAllgatherAsync({inViews[0], inViews[1]}, o);
    ag->wait();
    for (int t = 0; t < 2; ++t) {
      const auto got = download(ag->outputs()[t].view);
      const size_t len = static_cast<size_t>(t * 100 + 3);
      if (!expectValues(got, [&](size_t i) { return 1000.0 * (i / len) + t * 10 + i % len; }, "fused allgather")) {
        return kWrongValue;
      }
    }

    // Grouped reducescatter: tensors of 2n+1 rows of 1 and n rows of 2; rank r keeps its rows.
    {
      const std::vector<std::vector<int64_t>> shapes = {{2 * n + 1, 1}, {n, 2}};
      std::vector<std::unique_ptr<DeviceTensor>> rsIn, rsOut;
      std::vector<TensorView> rsInViews, rsOutViews;
      for (size_t t = 0; t < shapes.size(); ++t) {
        rsIn.push_back(std::make_unique<DeviceTensor>(DataType::kInt32, shapes[t]));
        const size_t cols = static_cast<size_t>(shapes[t][1]);
        for (size_t i = 0; i < rsIn.back()->host.count(); ++i) {
          rsIn.back()->host.set(i, (rank + 1) * (t + 1) + 10.0 * (i / cols));
        }
        rsIn.back()->upload();
        const int64_t rows = shapes[t][0] / n + (rank < shapes[t][0] % n ? 1 : 0);
        rsOut.push_back(std::make_unique<DeviceTensor>(DataType::kInt32, std::vector<int64_t>{rows, shapes[t][1]}));
        rsInViews.push_back(rsIn.back()->view());
        rsOutViews.push_back(rsOut.back()->view());
      }
      o = {};
      o.name = "fused.rs";
      groupedReducescatterAsync(rsInViews, rsOutViews, o)->wait();
      for (size_t t = 0; t < shapes.size(); ++t) {
        int64_t first = 0;  // this rank's first row
        for (int q = 0; q < rank; ++q) first += shapes[t][0] / n + (q < shapes[t][0] % n ? 1 : 0);
        const size_t cols = static_cast<size_t>(shapes[t][1]);
        auto want = [&](size_t i) { return (t + 1) * n * (n + 1) / 2.0 + 10.0 * n * (first + i / cols); };
        if (!expectValues(download(rsOutViews[t]), want, "fused reducescatter")) {
          return kWrongValue;
        }
      }
    }

    // Chunked: 1 MiB allreduce (Average) in place and a 1 MiB broadcast.
    DeviceTensor big(DataType::kFloat32, {1 << 18});
    for (size_t i = 0; i < big.host.count(); ++i) big.host.set(i, rank + static_cast<double>(i % 1000));
    big.upload();
    o = {};
    o.name = "big";
    o.op = ReduceOp::kAverage;
    allreduce(big.view(), big.view(), o);
    if (!expectValues(download(big.view()), [&](size_t i) { return (n - 1) / 2.0 + i % 1000; }, "chunked allreduce")) {
      return kWrongValue;
    }
    for (size_t i = 0; i < big.host.count(); ++i) big.host.set(i, rank * 3 + static_cast<double>(i % 777));
    big.upload();
    o.name = "big.bc";
    o.root = 1;
    broadcast(big.view(), o);
    if (!expectValues(download(big.view()), [&](size_t i) { return 3.0 + i % 777; }, "chunked broadcast")) {
      return kWrongValue;
    }
    shutdown();
    return kOk;
  });
  EXPECT_EQ(codes, std::vector<int>(static_cast<size_t>(n), kOk));
}

INSTANTIATE_TEST_SUITE_P(Ranks, StagedRanks, ::testing::Values(2, 3));

// A producer stream still busy with a long chain of copies when the collective is enqueued: the
// staged copies wait for it on the device, and the result is the producer's last write.
TEST(StagedBackend, LateProducerAndProcessSet) {
  auto codes = runGpuRanks(3, {}, [](int rank) {
    InitOptions options;
    options.processSets = {{0, 2}};
    init(options);
    const auto& api = test::gpuApi();
    DeviceTensor in(DataType::kFloat32, {1 << 16}), scratch(DataType::kFloat32, {1 << 16});
    for (size_t i = 0; i < in.host.count(); ++i) in.host.set(i, -1.0);
    in.upload();
    // 200 device copies of 256 KiB into `in`, then the real values: all queued, none done.
    for (int k = 0; k < 200; ++k) {
      test::check(api.rt.memcpyAsync(in.view().data, scratch.view().data, 1 << 18, cudaMemcpyDeviceToDevice,
                                     test::producerStream()),
                  "cudaMemcpyAsync(D2D)");
    }
    for (size_t i = 0; i < in.host.count(); ++i) in.host.set(i, rank + 1.0);
    in.upload();
    Options o;
    o.name = "late";
    allreduce(in.view(), in.view(), o);
    if (!expectValues(download(in.view()), [](size_t) { return 6.0; }, "late producer")) return kWrongValue;
    if (rank != 1) {  // process set 1: ranks 0 and 2
      o.processSet = 1;
      o.name = "set.ar";
      for (size_t i = 0; i < in.host.count(); ++i) in.host.set(i, rank + 1.0);
      in.upload();
      allreduce(in.view(), in.view(), o);
      if (!expectValues(download(in.view()), [](size_t) { return 4.0; }, "set allreduce")) return kWrongValue;
      o.name = "set.ag";
      DeviceTensor mine(DataType::kInt32, {2});
      mine.host.set(0, rank);
      mine.host.set(1, rank);
      mine.upload();
      OwnedTensor all = allgather(mine.view(), o);
      if (!expectValues(download(all.view), [](size_t i) { return i < 2 ? 0.0 : 2.0; }, "set allgather")) {
        return kWrongValue;
      }
    }
    barrier();
    shutdown();
    return kOk;
  });
  EXPECT_EQ(codes, (std::vector<int>{kOk, kOk, kOk}));
}

TEST(StagedBackend, KilledRankIsReportedAsPeerLost) {
  auto codes = runGpuRanks(3, {}, [](int rank) {
    init();
    DeviceTensor t(DataType::kFloat32, {1 << 14});
    t.upload();
    Options o;
    o.name = "kill";
    return test_support::runUntilPeerLost(rank, 1, [&] { allreduce(t.view(), t.view(), o); });
  });
  EXPECT_EQ(codes[0], kOk);
  EXPECT_EQ(codes[1], -SIGKILL);
  EXPECT_EQ(codes[2], kOk);
}

// What init() (or the first GPU collective) says about the GPU knobs: kOk when it threw `type`
// with every text in its message.
template <class Type>
int expectFailure(const std::function<void()>& step, const std::vector<std::string>& texts) {
  try {
    step();
  } catch (const Type& e) {
    for (const auto& text : texts) {
      if (std::string(e.what()).find(text) == std::string::npos) {
        fprintf(stderr, "message lacks '%s': %s\n", text.c_str(), e.what());
        return kFailed;
      }
    }
    return kOk;
  } catch (const std::exception& e) {
    fprintf(stderr, "unexpected error: %s\n", e.what());
    return kFailed;
  }
  return test_support::kNoError;
}

// GPU Adasum (support/gpu_adasum_cases.h) on the staged copy: the same meaning as through NCCL.
test::GpuIo stagedIo(std::vector<std::unique_ptr<DeviceTensor>>& tensors) {
  test::GpuIo io;
  io.upload = [&tensors](const std::vector<double>& values, DataType dtype) {
    tensors.push_back(std::make_unique<DeviceTensor>(dtype, std::vector<int64_t>{static_cast<int64_t>(values.size())}));
    for (size_t i = 0; i < values.size(); ++i) tensors.back()->host.set(i, values[i]);
    tensors.back()->upload();
    return tensors.back()->view();
  };
  io.download = [](const TensorView& t) { return download(t); };
  return io;
}

// Rank `rank` on host hostOf[rank] (the ranks of a host consecutive), across hosts over TCP.
void placeOnHost(const std::vector<std::string>& hostOf, int rank) {
  int localRank = 0, localSize = 0;
  for (size_t r = 0; r < hostOf.size(); ++r) {
    if (hostOf[r] != hostOf[static_cast<size_t>(rank)]) continue;
    if (static_cast<int>(r) < rank) ++localRank;
    ++localSize;
  }
  setenv("HOROVOD_HOSTNAME", hostOf[static_cast<size_t>(rank)].c_str(), 1);
  setenv("HOROVOD_LOCAL_RANK", std::to_string(localRank).c_str(), 1);
  setenv("HOROVOD_LOCAL_SIZE", std::to_string(localSize).c_str(), 1);
  setenv("HOROVOD_TRANSPORT", "auto", 1);
}

// `hostOf` places the ranks; every rank runs the Adasum cases with `localSize` ranks per host.
void expectStagedAdasum(const std::vector<std::string>& hostOf, int localSize) {
  const int n = static_cast<int>(hostOf.size());
  auto codes = runGpuRanks(n, {}, [&](int rank) {
    placeOnHost(hostOf, rank);
    init();
    std::vector<std::unique_ptr<DeviceTensor>> tensors;
    const int code = test::gpuAdasumCases(rank, n, localSize, stagedIo(tensors), "cuda_staged", "staged_adasum");
    tensors.clear();
    shutdown();
    return code;
  });
  EXPECT_EQ(codes, std::vector<int>(static_cast<size_t>(n), kOk));
}

TEST(StagedAdasum, OneHostIsTheAverage) {
  expectStagedAdasum({"gpu-host", "gpu-host"}, 2);
  expectStagedAdasum({"gpu-host", "gpu-host", "gpu-host"}, 3);  // any number of ranks on one host
}

TEST(StagedAdasum, TwoHostsOfTwoRanks) { expectStagedAdasum({"host-a", "host-a", "host-b", "host-b"}, 2); }

TEST(StagedAdasum, TwoHostsOfOneRank) { expectStagedAdasum({"host-a", "host-b"}, 1); }

// Hosts of different sizes, and three hosts: refused on every rank in Horovod's words.
TEST(StagedAdasum, RefusedOnUnevenOrNonPowerOfTwoHosts) {
  const std::pair<std::vector<std::string>, std::string> cases[] = {
      {{"host-a", "host-a", "host-b"}, "Running GPU Adasum on heterogeneous cluster is not supported yet"},
      {{"host-a", "host-b", "host-c"}, "Running GPU Adasum with non-power of 2 nodes is not supported yet"}};
  for (const auto& [hostOf, message] : cases) {
    auto codes = runGpuRanks(3, {}, [&](int rank) {
      placeOnHost(hostOf, rank);
      init();
      std::vector<std::unique_ptr<DeviceTensor>> tensors;
      const int code = test::gpuAdasumRefused(rank, stagedIo(tensors), message);
      tensors.clear();
      shutdown();
      return code;
    });
    EXPECT_EQ(codes, (std::vector<int>{kOk, kOk, kOk})) << message;
  }
}

bool ncclBackendBuilt() {
  const auto names = engine::backendNames(DeviceKind::kCuda);
  return std::find(names.begin(), names.end(), "nccl") != names.end();
}

TEST(StagedBackend, BadKnobValuesFailInit) {
  auto codes = runGpuRanks(1, {{"HOROVOD_GPU_OPERATIONS", "gloo"}}, [](int) {
    return expectFailure<InvalidArgument>([] { init(); },
                                          {"HOROVOD_GPU_OPERATIONS='gloo'", "accepted values are NCCL and HOST"});
  });
  EXPECT_EQ(codes, std::vector<int>{kOk});
  codes = runGpuRanks(1, {{"HOROVOD_GPU_ALLREDUCE", "NCCL"}}, [](int) {
    return expectFailure<InvalidArgument>(
        [] { init(); }, {"HOROVOD_GPU_OPERATIONS=HOST", "HOROVOD_GPU_ALLREDUCE=NCCL", "one implementation"});
  });
  EXPECT_EQ(codes, std::vector<int>{kOk});
  // NCCL asked for where it cannot be loaded: init names what the loader tried.
  codes = runGpuRanks(
      1, {{"HOROVOD_GPU_OPERATIONS", "NCCL"}, {"HOROVOD_NCCL_LIBRARY", "/nonexistent/libnccl.so.2"}}, [](int) {
        const bool ncclBuilt = ncclBackendBuilt();
        return expectFailure<InvalidArgument>(
            [] { init(); }, ncclBuilt
                                ? std::vector<std::string>{"HOROVOD_GPU_OPERATIONS=NCCL", "/nonexistent/libnccl.so.2"}
                                : std::vector<std::string>{"HOROVOD_GPU_OPERATIONS=NCCL", "no NCCL backend"});
      });
  EXPECT_EQ(codes, std::vector<int>{kOk});
}

// Ranks that disagree on the GPU settings fail their first GPU collective, naming the ranks.
TEST(StagedBackend, RanksThatDisagreeAreNamed) {
  auto codes = runGpuRanks(3, {}, [](int rank) {
    if (rank == 2) setenv("HOROVOD_GPU_STAGED_CHUNK_BYTES", "1024", 1);
    init();
    DeviceTensor t(DataType::kFloat32, {4});
    t.upload();
    Options o;
    o.name = "disagree";
    int code = expectFailure<Error>(
        [&] { allreduce(t.view(), t.view(), o); },
        {"ranks differ in HOROVOD_GPU_STAGED_CHUNK_BYTES", "ranks 0, 1: 4194304", "ranks 2: 1024"});
    // CPU tensors are not affected.
    std::vector<float> a(4, 1.0f);
    TensorView v;
    v.data = a.data();
    v.shape = {4};
    o.name = "cpu.after";
    allreduce(v, v, o);
    if (a[0] != 3.0f) return kFailed;
    shutdown();
    return code;
  });
  EXPECT_EQ(codes, (std::vector<int>{kOk, kOk, kOk}));
}

// A rank that cannot load the CUDA runtime is named on every rank, none waits for it.
TEST(StagedBackend, RankWithoutCudaRuntimeIsNamed) {
  auto codes = runGpuRanks(2, {}, [](int rank) {
    if (rank == 1) setenv("HOROVOD_CUDA_LIBRARY", "/nonexistent/libcudart.so.13", 1);
    init();
    std::vector<float> hostData(4, 1.0f);
    std::unique_ptr<DeviceTensor> t;
    TensorView v;
    if (rank == 0) {
      t = std::make_unique<DeviceTensor>(DataType::kFloat32, std::vector<int64_t>{4});
      t->upload();
      v = t->view();
    } else {  // never touched: the set fails before any copy
      v.data = hostData.data();
      v.shape = {4};
      v.device = Device{DeviceKind::kCuda, 0, nullptr};
    }
    Options o;
    o.name = "no.runtime";
    std::vector<std::string> texts = {"could not be loaded on ranks 1"};
    if (rank == 1) texts.push_back("/nonexistent/libcudart.so.13");
    int code = expectFailure<Error>([&] { allreduce(v, v, o); }, texts);
    shutdown();
    return code;
  });
  EXPECT_EQ(codes, (std::vector<int>{kOk, kOk}));
}

// Ranks sharing one GPU: by default the set agrees on the host-staged path; asking for NCCL
// fails naming the ranks (or, in a build without the NCCL backend, fails init).
TEST(StagedBackend, RanksOnOneGpu) {
  auto codes = runGpuRanks(2, {{"HOROVOD_GPU_OPERATIONS", ""}}, [](int rank) {
    init();
    DeviceTensor t(DataType::kFloat32, {8});
    for (size_t i = 0; i < 8; ++i) t.host.set(i, rank + 1.0);
    t.upload();
    Options o;
    o.name = "shared.gpu";
    allreduce(t.view(), t.view(), o);
    if (!expectValues(download(t.view()), [](size_t) { return 3.0; }, "default choice")) return kWrongValue;
    if (test::countOf("cuda_staged") != 1) return kFailed;
    shutdown();
    return kOk;
  });
  EXPECT_EQ(codes, (std::vector<int>{kOk, kOk}));
  codes = runGpuRanks(2, {{"HOROVOD_GPU_OPERATIONS", "NCCL"}}, [](int) {
    if (!ncclBackendBuilt()) return expectFailure<InvalidArgument>([] { init(); }, {"no NCCL backend"});
    init();
    DeviceTensor t(DataType::kFloat32, {8});
    t.upload();
    Options o;
    o.name = "shared.gpu.nccl";
    int code = expectFailure<Error>([&] { allreduce(t.view(), t.view(), o); },
                                    {"NCCL cannot run several ranks on one GPU", "ranks 0, 1 on GPU 0"});
    shutdown();
    return code;
  });
  EXPECT_EQ(codes, (std::vector<int>{kOk, kOk}));
}

}  // namespace
}  // namespace hvd
