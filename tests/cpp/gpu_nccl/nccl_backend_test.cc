// The NCCL backend (backends/cuda/nccl_backend.h) end to end on the host-memory stand-in
// (tests/gpu/standin): forked ranks, each on its own "GPU", through the public API with CUDA
// tensors, at 2 and 3 ranks. The loader is pointed at the stand-in (HOROVOD_CUDA_LIBRARY /
// HOROVOD_NCCL_LIBRARY), whose NCCL really moves the numbers between the processes and whose
// ordering checker fails any device access not ordered after its producer (a sticky error, so
// every later call of that rank fails too): a passing rank had no ordering violation.
//
// Every rank checks real numbers against a host computation and returns an exit code; each test
// is bounded by the forked ranks' alarm.
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "backends/cuda/cuda_library.h"
#include "backends/cuda/device_wide.h"
#include "collectives/reduce.h"
#include "horovod/horovod.h"
#include "support/forked_ranks.h"
#include "support/gpu_adasum_cases.h"

// HVD_CUDA_STANDIN: the stand-in library's path (tests/cpp/CMakeLists.txt).

namespace hvd::test {
namespace {

using test_support::kFailed;
using test_support::kOk;
using test_support::runForkedRanks;

constexpr int kWrongValue = 5;

// The few stand-in entry points the test itself uses to put data on and off its "GPU".
struct TestGpu {
  decltype(&::cudaSetDevice) setDevice;
  cudaError_t (*malloc)(void**, size_t);
  decltype(&::cudaFree) free;
  decltype(&::cudaMemcpyAsync) memcpyAsync;
  decltype(&::cudaMemsetAsync) memsetAsync;
  decltype(&::cudaStreamCreateWithFlags) streamCreate;
  decltype(&::cudaStreamSynchronize) streamSynchronize;
  cudaStream_t stream = nullptr;
  int index = 0;

  static TestGpu& open(int index) {
    static TestGpu d;
    void* lib = dlopen(HVD_CUDA_STANDIN, RTLD_NOW | RTLD_GLOBAL);
    if (lib == nullptr) throw std::runtime_error(std::string("dlopen stand-in: ") + dlerror());
    auto sym = [&](const char* name) {
      void* p = dlsym(lib, name);
      if (p == nullptr) throw std::runtime_error(std::string("stand-in lacks ") + name);
      return p;
    };
    d.setDevice = reinterpret_cast<decltype(d.setDevice)>(sym("cudaSetDevice"));
    d.malloc = reinterpret_cast<decltype(d.malloc)>(sym("cudaMalloc"));
    d.free = reinterpret_cast<decltype(d.free)>(sym("cudaFree"));
    d.memcpyAsync = reinterpret_cast<decltype(d.memcpyAsync)>(sym("cudaMemcpyAsync"));
    d.memsetAsync = reinterpret_cast<decltype(d.memsetAsync)>(sym("cudaMemsetAsync"));
    d.streamCreate = reinterpret_cast<decltype(d.streamCreate)>(sym("cudaStreamCreateWithFlags"));
    d.streamSynchronize = reinterpret_cast<decltype(d.streamSynchronize)>(sym("cudaStreamSynchronize"));
    d.index = index;
    check(d.setDevice(index), "cudaSetDevice");
    check(d.streamCreate(&d.stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    return d;
  }
  static void check(cudaError_t e, const char* what) {
    if (e != cudaSuccess) throw std::runtime_error(std::string(what) + " failed: " + std::to_string(e));
  }
  // A device tensor holding `host`, uploaded on the producer stream. `wait`: the host waits for
  // the upload (then `host` may go); else the backend must order itself after it, and `host` must
  // outlive the collective.
  template <class T>
  TensorView upload(const std::vector<T>& host, DataType dtype, std::vector<int64_t> shape = {}, bool wait = true) {
    void* p = nullptr;
    check(malloc(&p, std::max<size_t>(host.size() * sizeof(T), 1)), "cudaMalloc");
    if (!host.empty())
      check(memcpyAsync(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice, stream), "upload");
    if (wait) check(streamSynchronize(stream), "cudaStreamSynchronize");
    TensorView v;
    v.data = p;
    v.dtype = dtype;
    v.shape = shape.empty() ? std::vector<int64_t>{static_cast<int64_t>(host.size())} : std::move(shape);
    v.device.kind = DeviceKind::kCuda;
    v.device.index = index;
    v.device.stream = stream;
    return v;
  }
  template <class T>
  std::vector<T> download(const TensorView& v) {
    std::vector<T> host(static_cast<size_t>(v.numElements()));
    if (!host.empty())
      check(memcpyAsync(host.data(), v.data, host.size() * sizeof(T), cudaMemcpyDeviceToHost, stream), "download");
    check(streamSynchronize(stream), "cudaStreamSynchronize");
    return host;
  }
};

// Runs body(rank, device) in `n` forked ranks with the stand-in as CUDA and NCCL; true when every
// rank returned kOk.
// `prepare(rank)`, when given, runs in the rank's process before init (per-rank settings).
bool onRanks(int n, const std::function<int(int, TestGpu&)>& body, int victim = -1,
             const std::function<void(int)>& prepare = nullptr) {
  setenv("HOROVOD_CUDA_LIBRARY", HVD_CUDA_STANDIN, 1);
  setenv("HOROVOD_NCCL_LIBRARY", HVD_CUDA_STANDIN, 1);
  setenv("HVD_STANDIN_DEVICES", "4", 1);
  std::vector<int> codes = runForkedRanks(n, [&](int rank) {
    if (prepare) prepare(rank);
    TestGpu& d = TestGpu::open(rank);  // one GPU per rank: NCCL is chosen
    hvd::init();
    const int code = body(rank, d);
    hvd::shutdown();
    return code;
  });
  bool ok = true;
  for (int r = 0; r < n; ++r) {
    if (r == victim) continue;
    if (codes[r] != kOk) {
      ADD_FAILURE() << "rank " << r << " of " << n << " exited with " << codes[r];
      ok = false;
    }
  }
  return ok;
}

Options named(const std::string& name, ReduceOp op = ReduceOp::kSum) {
  Options o;
  o.name = name;
  o.op = op;
  return o;
}

// Rank r contributes (r + 1) * (i % 3 + 1) at index i; the expected reduction of that over n ranks.
double expected(ReduceOp op, int n, int i, bool isBool) {
  double acc = op == ReduceOp::kProduct ? 1 : op == ReduceOp::kMin ? 1e30 : op == ReduceOp::kMax ? -1e30 : 0;
  for (int r = 0; r < n; ++r) {
    const double v = isBool ? ((r + i) % 2) : (r + 1) * (i % 3 + 1);
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAverage: acc += v; break;
      case ReduceOp::kMin: acc = std::min(acc, v); break;
      case ReduceOp::kMax: acc = std::max(acc, v); break;
      case ReduceOp::kProduct: acc *= v; break;
      default: break;
    }
  }
  if (isBool) return (op == ReduceOp::kSum || op == ReduceOp::kMax) ? (acc > 0) : (acc != 0 && acc >= 1);
  return op == ReduceOp::kAverage ? acc / n : acc;
}

// Host values of `dtype` as doubles, and back.
std::vector<uint8_t> encode(DataType dtype, const std::vector<double>& values) {
  std::vector<uint8_t> out(values.size() * dataTypeSize(dtype));
  for (size_t i = 0; i < values.size(); ++i) {
    uint8_t* p = out.data() + i * dataTypeSize(dtype);
    const double v = values[i];
    switch (dtype) {
      case DataType::kUInt8:
      case DataType::kBool: *p = static_cast<uint8_t>(v); break;
      case DataType::kInt8: *reinterpret_cast<int8_t*>(p) = static_cast<int8_t>(v); break;
      case DataType::kInt32: *reinterpret_cast<int32_t*>(p) = static_cast<int32_t>(v); break;
      case DataType::kInt64: *reinterpret_cast<int64_t*>(p) = static_cast<int64_t>(v); break;
      case DataType::kFloat16: *reinterpret_cast<uint16_t*>(p) = floatToHalf(static_cast<float>(v)); break;
      case DataType::kBFloat16: *reinterpret_cast<uint16_t*>(p) = floatToBfloat16(static_cast<float>(v)); break;
      case DataType::kFloat32: *reinterpret_cast<float*>(p) = static_cast<float>(v); break;
      case DataType::kFloat64: *reinterpret_cast<double*>(p) = v; break;
      default: break;
    }
  }
  return out;
}
double decode(DataType dtype, const std::vector<uint8_t>& bytes, size_t i) {
  const uint8_t* p = bytes.data() + i * dataTypeSize(dtype);
  switch (dtype) {
    case DataType::kUInt8:
    case DataType::kBool: return *p;
    case DataType::kInt8: return *reinterpret_cast<const int8_t*>(p);
    case DataType::kInt32: return *reinterpret_cast<const int32_t*>(p);
    case DataType::kInt64: return static_cast<double>(*reinterpret_cast<const int64_t*>(p));
    case DataType::kFloat16: return halfToFloat(*reinterpret_cast<const uint16_t*>(p));
    case DataType::kBFloat16: return bfloat16ToFloat(*reinterpret_cast<const uint16_t*>(p));
    case DataType::kFloat32: return *reinterpret_cast<const float*>(p);
    case DataType::kFloat64: return *reinterpret_cast<const double*>(p);
    default: return 0;
  }
}

bool nearly(double got, double want, DataType dtype) {
  const double tolerance = dtype == DataType::kBFloat16 ? 0.02 : dtype == DataType::kFloat16 ? 0.002 : 1e-9;
  return std::fabs(got - want) <= tolerance * std::max(1.0, std::fabs(want));
}

// Every dtype NCCL reduces, every operator, single tensors and a fused response of many small
// ones (enqueued together), with real numbers; then that the nccl backend ran them with
// `algorithm` (and no other allreduce algorithm).
int allreduceEveryDtypeAndOperator(int n, int rank, TestGpu& d, const std::string& algorithm) {
  const std::vector<DataType> dtypes = {DataType::kUInt8,   DataType::kInt8,    DataType::kInt32,
                                        DataType::kInt64,   DataType::kFloat16, DataType::kBFloat16,
                                        DataType::kFloat32, DataType::kFloat64, DataType::kBool};
  const std::vector<ReduceOp> ops = {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct,
                                     ReduceOp::kAverage};
  struct Pending {
    WorkPtr work;
    TensorView out;
    DataType dtype;
    ReduceOp op;
    size_t count;
  };
  std::vector<Pending> pending;
  int tensor = 0;
  for (DataType dtype : dtypes) {
    for (ReduceOp op : ops) {
      if (dtype == DataType::kBool && op == ReduceOp::kAverage) continue;
      const bool isInt = !isFloatingPoint(dtype);
      if (isInt && op == ReduceOp::kAverage && dtype != DataType::kInt32 && dtype != DataType::kInt64) continue;
      if (dtype == DataType::kInt8 && op == ReduceOp::kProduct) continue;  // 162 does not fit
      if (dtype == DataType::kUInt8 && op == ReduceOp::kProduct && n > 3) continue;  // 4! * 3^4 does not fit
      for (size_t count : {size_t(5), size_t(1000)}) {
        std::vector<double> values(count);
        for (size_t i = 0; i < count; ++i) {
          values[i] = dtype == DataType::kBool ? (rank + i) % 2 : (rank + 1) * (i % 3 + 1);
        }
        TensorView in = d.upload(encode(dtype, values), dtype, {static_cast<int64_t>(count)});
        TensorView out =
            d.upload(std::vector<uint8_t>(count * dataTypeSize(dtype)), dtype, {static_cast<int64_t>(count)});
        pending.push_back(
            {hvd::allreduceAsync(in, out, named("t" + std::to_string(tensor++), op)), out, dtype, op, count});
      }
    }
  }
  for (auto& p : pending) p.work->wait();
  for (auto& p : pending) {
    const std::vector<uint8_t> got = d.download<uint8_t>(TensorView{
        p.out.data, DataType::kUInt8, {static_cast<int64_t>(p.count * dataTypeSize(p.dtype))}, p.out.device});
    for (size_t i = 0; i < p.count; ++i) {
      double want = expected(p.op, n, static_cast<int>(i), p.dtype == DataType::kBool);
      if (!isFloatingPoint(p.dtype) && p.op == ReduceOp::kAverage) want = std::trunc(want);
      if (!nearly(decode(p.dtype, got, i), want, p.dtype)) {
        fprintf(stderr, "rank %d: %s op %d [%zu] = %g, want %g\n", rank, std::string(dataTypeName(p.dtype)).c_str(),
                static_cast<int>(p.op), i, decode(p.dtype, got, i), want);
        return kWrongValue;
      }
    }
  }
  // The NCCL backend ran them (not the host-staged one), with `algorithm`.
  bool sawAlgorithm = false, sawOther = false;
  for (const auto& c : hvd::engineCounters()) {
    if (c.count == 0 || c.algorithm.find("allreduce") == std::string::npos) continue;
    if (c.backend == "nccl" && c.algorithm == algorithm) {
      sawAlgorithm = true;
    } else {
      fprintf(stderr, "rank %d: an allreduce ran on %s/%s\n", rank, c.backend.c_str(), c.algorithm.c_str());
      sawOther = true;
    }
  }
  return sawAlgorithm && !sawOther ? kOk : kFailed;
}

class Nccl : public ::testing::TestWithParam<int> {};

TEST_P(Nccl, AllreduceEveryDtypeAndOperator) {
  const int n = GetParam();
  EXPECT_TRUE(
      onRanks(n, [n](int rank, TestGpu& d) { return allreduceEveryDtypeAndOperator(n, rank, d, "nccl_allreduce"); }));
}

// Prescale and postscale on the device, fused and not.
TEST_P(Nccl, PrescaleAndPostscale) {
  const int n = GetParam();
  EXPECT_TRUE(onRanks(n, [n](int rank, TestGpu& d) {
    std::vector<WorkPtr> works;
    std::vector<TensorView> outs;
    for (int t = 0; t < 4; ++t) {
      std::vector<float> x(7, static_cast<float>(rank + 1));
      TensorView in = d.upload(x, DataType::kFloat32);
      Options o = named("scaled." + std::to_string(t));
      o.prescale = 2.0;
      o.postscale = 0.25;
      works.push_back(hvd::allreduceAsync(in, in, o));
      outs.push_back(in);
    }
    const float want = 2.0f * static_cast<float>(n * (n + 1) / 2) * 0.25f;
    for (size_t t = 0; t < works.size(); ++t) {
      works[t]->wait();
      for (float v : d.download<float>(outs[t])) {
        if (v != want) return kWrongValue;
      }
    }
    return kOk;
  }));
}

// Allgather with a different first dimension on every rank (outputs on the device), broadcast,
// alltoall with uneven splits, reducescatter with rows that do not divide evenly, a barrier.
TEST_P(Nccl, AllgatherBroadcastAlltoallReducescatterBarrier) {
  const int n = GetParam();
  EXPECT_TRUE(onRanks(n, [n](int rank, TestGpu& d) {
    // Allgather: rank r has r + 1 rows of 3.
    std::vector<float> rows(static_cast<size_t>(rank + 1) * 3);
    for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<float>(100 * rank + static_cast<int>(i));
    OwnedTensor gathered = hvd::allgather(d.upload(rows, DataType::kFloat32, {rank + 1, 3}), named("gather"));
    if (gathered.view.device.kind != DeviceKind::kCuda || gathered.view.device.index != rank) return kFailed;
    if (gathered.view.shape != std::vector<int64_t>{n * (n + 1) / 2, 3}) return kWrongValue;
    std::vector<float> all = d.download<float>(gathered.view);
    size_t at = 0;
    for (int r = 0; r < n; ++r) {
      for (int i = 0; i < (r + 1) * 3; ++i) {
        if (all[at++] != static_cast<float>(100 * r + i)) return kWrongValue;
      }
    }
    // Broadcast from the last rank.
    std::vector<int64_t> b(9, rank == n - 1 ? 42 : -1);
    TensorView bt = d.upload(b, DataType::kInt64);
    Options bo = named("bcast");
    bo.root = n - 1;
    hvd::broadcast(bt, bo);
    for (int64_t v : d.download<int64_t>(bt)) {
      if (v != 42) return kWrongValue;
    }
    // Alltoall: rank r sends p + 1 rows of 2 to rank p, values 1000 r + p.
    std::vector<int32_t> splits(static_cast<size_t>(n));
    std::vector<double> send;
    for (int p = 0; p < n; ++p) {
      splits[p] = p + 1;
      for (int k = 0; k < (p + 1) * 2; ++k) send.push_back(1000 * rank + p);
    }
    Options ao = named("a2a");
    ao.splits = splits;
    std::vector<int32_t> received;
    OwnedTensor got =
        hvd::alltoall(d.upload(send, DataType::kFloat64, {static_cast<int64_t>(send.size() / 2), 2}), ao, &received);
    if (received != std::vector<int32_t>(static_cast<size_t>(n), rank + 1)) return kWrongValue;
    std::vector<double> recv = d.download<double>(got.view);
    at = 0;
    for (int p = 0; p < n; ++p) {
      for (int k = 0; k < (rank + 1) * 2; ++k) {
        if (recv[at++] != 1000 * p + rank) return kWrongValue;
      }
    }
    // Reducescatter of 2n + 1 rows of 2 (the first ranks get one row more).
    const int64_t rowsTotal = 2 * n + 1;
    std::vector<float> rs(static_cast<size_t>(rowsTotal) * 2);
    for (size_t i = 0; i < rs.size(); ++i) rs[i] = static_cast<float>(i) * static_cast<float>(rank + 1);
    const int64_t myRows = rowsTotal / n + (rank < rowsTotal % n ? 1 : 0);
    int64_t firstRow = 0;
    for (int q = 0; q < rank; ++q) firstRow += rowsTotal / n + (q < rowsTotal % n ? 1 : 0);
    TensorView rsOut = d.upload(std::vector<float>(static_cast<size_t>(myRows) * 2), DataType::kFloat32, {myRows, 2});
    hvd::reducescatter(d.upload(rs, DataType::kFloat32, {rowsTotal, 2}), rsOut, named("rs"));
    std::vector<float> mine = d.download<float>(rsOut);
    for (size_t i = 0; i < mine.size(); ++i) {
      const float want =
          static_cast<float>(firstRow * 2 + static_cast<int64_t>(i)) * static_cast<float>(n * (n + 1) / 2);
      if (mine[i] != want) return kWrongValue;
    }
    hvd::barrier();
    return kOk;
  }));
}

// A process set of two ranks (of three): its own communicator, freed with the set; the other
// rank is not involved. Twice, so the second set builds a communicator after the first was freed.
TEST(NcclProcessSets, CollectivesWithinASubset) {
  setenv("HOROVOD_DYNAMIC_PROCESS_SETS", "1", 1);
  EXPECT_TRUE(onRanks(3, [](int rank, TestGpu& d) {
    for (int round = 0; round < 2; ++round) {
      const int set = hvd::addProcessSet({0, 2});
      if (rank != 1) {
        std::vector<int32_t> x(4, rank + 1);
        TensorView t = d.upload(x, DataType::kInt32);
        Options o = named("subset");
        o.processSet = set;
        hvd::allreduce(t, t, o);
        for (int32_t v : d.download<int32_t>(t)) {
          if (v != 4) return kWrongValue;
        }
      }
      hvd::barrier();
      hvd::removeProcessSet(set);
    }
    return kOk;
  }));
  unsetenv("HOROVOD_DYNAMIC_PROCESS_SETS");
}

// The producer stream is still busy when the collective is enqueued (the input's upload waits
// behind a large copy on it): the backend orders its work after it with an event, so the result
// is right and the stand-in's ordering checker (which fails any unordered access) stays quiet.
TEST_P(Nccl, WaitsForALateProducerStream) {
  const int n = GetParam();
  EXPECT_TRUE(onRanks(n, [n](int rank, TestGpu& d) {
    constexpr size_t kBig = size_t(64) << 20;
    void* big = nullptr;
    TestGpu::check(d.malloc(&big, kBig), "cudaMalloc");
    for (int step = 0; step < 3; ++step) {
      TestGpu::check(d.memsetAsync(big, step, kBig, d.stream), "cudaMemsetAsync");  // keeps the stream busy
      std::vector<float> x(1000, static_cast<float>(rank + step));
      TensorView t = d.upload(x, DataType::kFloat32, {}, /*wait=*/false);  // queued behind the memset
      hvd::allreduce(t, t, named("late"));
      const float want = static_cast<float>(n * (n - 1) / 2 + n * step);
      for (float v : d.download<float>(t)) {
        if (v != want) return kWrongValue;
      }
    }
    return kOk;
  }));
}

// Tensors whose streams are unknown (Device::deviceWideStream(), TensorFlow's GPU kernels), on
// both data paths: the producer stream is busy when the collective is enqueued and nothing says
// which stream it is, so the backend must wait for the whole device; an allgather output still
// being read on a stream the backend was not told about is released only after that read (the
// stand-in fails a free ordered before it, and every later call of the rank with it).
TEST(NcclDeviceWide, OrdersByTheWholeDeviceOnBothPaths) {
  for (const char* path : {"nccl", "host"}) {
    SCOPED_TRACE(path);
    EXPECT_TRUE(onRanks(
        2,
        [](int rank, TestGpu& d) {
          constexpr size_t kBig = size_t(64) << 20;
          void* big = nullptr;
          TestGpu::check(d.malloc(&big, kBig), "cudaMalloc");
          for (int step = 0; step < 3; ++step) {
            TestGpu::check(d.memsetAsync(big, step, kBig, d.stream), "cudaMemsetAsync");  // keeps the stream busy
            std::vector<float> x(1000, static_cast<float>(rank + step));
            TensorView t = d.upload(x, DataType::kFloat32, {}, /*wait=*/false);  // queued behind the memset
            t.device.stream = Device::deviceWideStream();
            hvd::allreduce(t, t, named("device_wide"));
            const float want = static_cast<float>(1 + 2 * step);
            for (float v : d.download<float>(t)) {
              if (v != want) return kWrongValue;
            }
            // The output is read on the test's stream behind a busy memset, and dropped at once.
            const std::vector<float> mine(5, static_cast<float>(rank));  // read by the queued upload
            TensorView g = d.upload(mine, DataType::kFloat32, {}, false);
            g.device.stream = Device::deviceWideStream();
            OwnedTensor gathered = hvd::allgather(g, named("device_wide_gather"));
            std::vector<float> host(10, -1.0f);
            TestGpu::check(d.memsetAsync(big, step + 1, kBig, d.stream), "cudaMemsetAsync");
            TestGpu::check(d.memcpyAsync(host.data(), gathered.view.data, host.size() * sizeof(float),
                                         cudaMemcpyDeviceToHost, d.stream),
                           "read the output");
            gathered = OwnedTensor{};
            cuda::flushDeviceWideReleases(*cuda::cudaLibraries().api);
            TestGpu::check(d.streamSynchronize(d.stream), "cudaStreamSynchronize");  // a sticky error fails here
            for (size_t i = 0; i < host.size(); ++i) {
              if (host[i] != static_cast<float>(i / 5)) return kWrongValue;
            }
          }
          return kOk;
        },
        -1, [path](int) { setenv("HOROVOD_GPU_OPERATIONS", path, 1); }));
  }
  unsetenv("HOROVOD_GPU_OPERATIONS");
}

INSTANTIATE_TEST_SUITE_P(Ranks, Nccl, ::testing::Values(2, 3),
                         [](const auto& info) { return std::to_string(info.param) + "ranks"; });

// A rank killed in the middle of a run of device allreduces: every survivor's pending operation
// fails with PeerLost naming it (the Runtime aborts the NCCL communicators), never a hang.
// HOROVOD_HIERARCHICAL_ALLREDUCE=1 with ranks on hosts given by `hostOf` (rank -> host name; the
// ranks of a host consecutive), across hosts over TCP, inside a host over shared memory.
std::function<void(int)> onHosts(std::vector<std::string> hostOf, bool batchCopies, bool hierarchical = true) {
  return [hostOf, batchCopies, hierarchical](int rank) {
    const std::string& host = hostOf[static_cast<size_t>(rank)];
    int localRank = 0, localSize = 0;
    for (size_t r = 0; r < hostOf.size(); ++r) {
      if (hostOf[r] != host) continue;
      if (static_cast<int>(r) < rank) ++localRank;
      ++localSize;
    }
    setenv("HOROVOD_HOSTNAME", host.c_str(), 1);
    setenv("HOROVOD_LOCAL_RANK", std::to_string(localRank).c_str(), 1);
    setenv("HOROVOD_LOCAL_SIZE", std::to_string(localSize).c_str(), 1);
    setenv("HOROVOD_TRANSPORT", "auto", 1);
    setenv("HOROVOD_HIERARCHICAL_ALLREDUCE", hierarchical ? "1" : "0", 1);
    setenv("HOROVOD_BATCH_D2D_MEMCOPIES", batchCopies ? "1" : "0", 1);
  };
}

// Two hosts of two ranks: reduce-scatter within each host, allreduce across, allgather within,
// with odd element counts (padded shards) and fused responses; every dtype and operator.
TEST(NcclHierarchical, TwoHostsOfTwoRanks) {
  EXPECT_TRUE(onRanks(
      4, [](int rank, TestGpu& d) { return allreduceEveryDtypeAndOperator(4, rank, d, "nccl_hierarchical_allreduce"); },
      -1, onHosts({"gpu-host-a", "gpu-host-a", "gpu-host-b", "gpu-host-b"}, true)));
}

// Hosts with different numbers of ranks cannot split evenly: flat NCCL allreduces (with a
// warning), right answers; fusion copies one cudaMemcpyAsync each (HOROVOD_BATCH_D2D_MEMCOPIES=0).
TEST(NcclHierarchical, UnevenHostsRunFlat) {
  EXPECT_TRUE(onRanks(
      3, [](int rank, TestGpu& d) { return allreduceEveryDtypeAndOperator(3, rank, d, "nccl_allreduce"); }, -1,
      onHosts({"gpu-host-a", "gpu-host-a", "gpu-host-b"}, false)));
}

// GPU Adasum (support/gpu_adasum_cases.h) through NCCL: reduce-scatter inside each host, Adasum
// across hosts on the host, allgather inside the host.
GpuIo ncclIo(TestGpu& d) {
  GpuIo io;
  io.upload = [&d](const std::vector<double>& values, DataType dtype) {
    return d.upload(encode(dtype, values), dtype, {static_cast<int64_t>(values.size())});
  };
  io.download = [&d](const TensorView& t) {
    const size_t count = static_cast<size_t>(t.numElements());
    const std::vector<uint8_t> bytes = d.download<uint8_t>(
        TensorView{t.data, DataType::kUInt8, {static_cast<int64_t>(count * dataTypeSize(t.dtype))}, t.device});
    std::vector<double> values(count);
    for (size_t i = 0; i < count; ++i) values[i] = decode(t.dtype, bytes, i);
    return values;
  };
  return io;
}

int adasumOn(int n, int localSize, int rank, TestGpu& d) {
  return gpuAdasumCases(rank, n, localSize, ncclIo(d), "nccl", "nccl_adasum");
}

// One host: the average of its ranks.
TEST(NcclAdasum, OneHostIsTheAverage) {
  EXPECT_TRUE(onRanks(2, [](int rank, TestGpu& d) { return adasumOn(2, 2, rank, d); }));
}

// Two hosts of two ranks, with the local communicator of HOROVOD_HIERARCHICAL_ALLREDUCE and with
// the one Adasum builds itself.
TEST(NcclAdasum, TwoHostsOfTwoRanks) {
  for (bool hierarchical : {true, false}) {
    EXPECT_TRUE(onRanks(
        4, [](int rank, TestGpu& d) { return adasumOn(4, 2, rank, d); }, -1,
        onHosts({"gpu-host-a", "gpu-host-a", "gpu-host-b", "gpu-host-b"}, hierarchical, hierarchical)))
        << "HOROVOD_HIERARCHICAL_ALLREDUCE=" << hierarchical;
  }
}

// Two hosts of one rank: no NCCL step inside the hosts.
TEST(NcclAdasum, TwoHostsOfOneRank) {
  EXPECT_TRUE(onRanks(
      2, [](int rank, TestGpu& d) { return adasumOn(2, 1, rank, d); }, -1,
      onHosts({"gpu-host-a", "gpu-host-b"}, true)));
}

// Hosts of different sizes, and three hosts: refused on every rank in Horovod's words.
TEST(NcclAdasum, RefusedOnUnevenOrNonPowerOfTwoHosts) {
  EXPECT_TRUE(onRanks(
      3,
      [](int rank, TestGpu& d) {
        return gpuAdasumRefused(rank, ncclIo(d), "Running GPU Adasum on heterogeneous cluster is not supported yet");
      },
      -1, onHosts({"gpu-host-a", "gpu-host-a", "gpu-host-b"}, true)));
  EXPECT_TRUE(onRanks(
      3,
      [](int rank, TestGpu& d) {
        return gpuAdasumRefused(rank, ncclIo(d), "Running GPU Adasum with non-power of 2 nodes is not supported yet");
      },
      -1, onHosts({"gpu-host-a", "gpu-host-b", "gpu-host-c"}, true)));
}

// A rank killed in a run of GPU Adasums over two hosts: the survivors (its host's other rank
// waiting in the reduce-scatter, the other host's in the exchange across hosts) fail with
// PeerLost naming it, never hang.
TEST(NcclFailures, KilledRankFailsTheSurvivorsOfAnAdasum) {
  constexpr int kVictim = 1;
  EXPECT_TRUE(onRanks(
      4,
      [](int rank, TestGpu& d) {
        std::vector<float> x(4096, static_cast<float>(rank + 1));
        TensorView t = d.upload(x, DataType::kFloat32);
        int step = 0;
        return test_support::runUntilPeerLost(rank, kVictim, [&] {
          hvd::allreduce(t, t, named("adasum.step." + std::to_string(step++ % 4), ReduceOp::kAdasum));
        });
      },
      kVictim, onHosts({"gpu-host-a", "gpu-host-a", "gpu-host-b", "gpu-host-b"}, true, false)));
}

TEST(NcclFailures, KilledRankFailsTheSurvivors) {
  constexpr int kVictim = 1;
  EXPECT_TRUE(onRanks(
      3,
      [](int rank, TestGpu& d) {
        std::vector<float> x(4096, 1.0f);
        TensorView t = d.upload(x, DataType::kFloat32);
        int step = 0;
        return test_support::runUntilPeerLost(
            rank, kVictim, [&] { hvd::allreduce(t, t, named("step." + std::to_string(step++ % 4))); });
      },
      kVictim));
}

}  // namespace
}  // namespace hvd::test
