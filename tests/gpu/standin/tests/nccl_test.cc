// The stand-in's NCCL across real processes (fork): every collective with real numbers at 2 and
// 3 ranks, send/recv groups, a collective mismatch, ncclCommAbort unblocking a waiting op, and
// the async error after a peer is killed. Every run is bounded by a timeout on the children.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "nccl_reduce.h"
#include "standin_hooks.h"

namespace {

using Body = std::function<std::string(int rank, int nranks, const ncclUniqueId& id)>;

// Runs body(rank) in `nranks` forked processes. Returns "" when every rank returned "" and
// exited, else what failed. Ranks in `killed` are expected to die of SIGKILL.
std::string runRanks(int nranks, const Body& body, std::vector<int> killed = {}) {
  ncclUniqueId id;
  if (ncclGetUniqueId(&id) != ncclSuccess) return "ncclGetUniqueId failed";
  std::vector<pid_t> pids;
  std::vector<int> pipes;
  for (int rank = 0; rank < nranks; ++rank) {
    int fds[2];
    if (pipe(fds) != 0) return "pipe failed";
    pid_t pid = fork();
    if (pid == 0) {
      close(fds[0]);
      std::string result = body(rank, nranks, id);
      if (write(fds[1], result.data(), result.size()) < 0) _exit(3);
      _exit(result.empty() ? 0 : 1);
    }
    close(fds[1]);
    pids.push_back(pid);
    pipes.push_back(fds[0]);
  }
  std::string failures;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  std::vector<int> status(static_cast<size_t>(nranks), -1);
  for (int done = 0; done < nranks;) {
    for (int r = 0; r < nranks; ++r) {
      if (status[r] != -1) continue;
      int st = 0;
      if (waitpid(pids[r], &st, WNOHANG) == pids[r]) {
        status[r] = st;
        ++done;
      }
    }
    if (std::chrono::steady_clock::now() > deadline) {
      for (int r = 0; r < nranks; ++r)
        if (status[r] == -1) {
          kill(pids[r], SIGKILL);
          waitpid(pids[r], &status[r], 0);
          failures += "rank " + std::to_string(r) + " timed out; ";
        }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (int r = 0; r < nranks; ++r) {
    char buf[4096];
    ssize_t n = read(pipes[r], buf, sizeof(buf));
    close(pipes[r]);
    bool expectKilled = std::find(killed.begin(), killed.end(), r) != killed.end();
    if (expectKilled) {
      if (!(WIFSIGNALED(status[r]) && WTERMSIG(status[r]) == SIGKILL))
        failures += "rank " + std::to_string(r) + " was not killed; ";
      continue;
    }
    if (n > 0) failures += "rank " + std::to_string(r) + ": " + std::string(buf, static_cast<size_t>(n)) + "; ";
    else if (!WIFEXITED(status[r]) || WEXITSTATUS(status[r]) != 0)
      failures += "rank " + std::to_string(r) + " exited with status " + std::to_string(status[r]) + "; ";
  }
  return failures;
}

#define CHECK(cond)                                                                        \
  do {                                                                                     \
    if (!(cond)) return std::string(__FILE__ ":") + std::to_string(__LINE__) + ": " #cond; \
  } while (0)

// Rank-local setup: device, stream and communicator.
struct Rank {
  cudaStream_t stream = nullptr;
  ncclComm_t comm = nullptr;
  std::string init(int rank, int nranks, const ncclUniqueId& id) {
    CHECK(cudaSetDevice(rank % 2) == cudaSuccess);
    CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);
    CHECK(ncclCommInitRank(&comm, nranks, id, rank) == ncclSuccess);
    return "";
  }
};

void* toDevice(const void* host, size_t bytes, cudaStream_t stream) {
  void* d = nullptr;
  if (cudaMalloc(&d, bytes ? bytes : 1) != cudaSuccess) return nullptr;
  if (bytes) cudaMemcpyAsync(d, host, bytes, cudaMemcpyHostToDevice, stream);
  return d;
}

std::vector<char> toHost(const void* d, size_t bytes, cudaStream_t stream) {
  std::vector<char> out(bytes);
  cudaMemcpyAsync(out.data(), d, bytes, cudaMemcpyDeviceToHost, stream);
  cudaStreamSynchronize(stream);
  return out;
}

// Element i of rank r's input as a double; stored into the type by its own conversion.
double input(int rank, size_t i) { return 1 + rank + static_cast<double>(i % 3); }

void store(ncclDataType_t type, void* dst, double v) {
  switch (type) {
    case ncclInt8: *static_cast<int8_t*>(dst) = static_cast<int8_t>(v); break;
    case ncclUint8: *static_cast<uint8_t*>(dst) = static_cast<uint8_t>(v); break;
    case ncclInt32: *static_cast<int32_t*>(dst) = static_cast<int32_t>(v); break;
    case ncclUint32: *static_cast<uint32_t*>(dst) = static_cast<uint32_t>(v); break;
    case ncclInt64: *static_cast<int64_t*>(dst) = static_cast<int64_t>(v); break;
    case ncclUint64: *static_cast<uint64_t*>(dst) = static_cast<uint64_t>(v); break;
    case ncclFloat16: *static_cast<uint16_t*>(dst) = standin::floatToHalf(static_cast<float>(v)); break;
    case ncclBfloat16: *static_cast<uint16_t*>(dst) = standin::floatToBf16(static_cast<float>(v)); break;
    case ncclFloat32: *static_cast<float*>(dst) = static_cast<float>(v); break;
    case ncclFloat64: *static_cast<double*>(dst) = v; break;
    case ncclFloat8e4m3:
      *static_cast<uint8_t*>(dst) = static_cast<uint8_t>(standin::floatToMini(static_cast<float>(v), standin::kE4M3));
      break;
    case ncclFloat8e5m2:
      *static_cast<uint8_t*>(dst) = static_cast<uint8_t>(standin::floatToMini(static_cast<float>(v), standin::kE5M2));
      break;
    default: break;
  }
}

double expected(ncclRedOp_t op, ncclDataType_t type, int nranks, size_t i) {
  double acc = input(0, i);
  for (int r = 1; r < nranks; ++r) {
    double v = input(r, i);
    if (op == ncclSum || op == ncclAvg) acc += v;
    if (op == ncclProd) acc *= v;
    if (op == ncclMin) acc = std::min(acc, v);
    if (op == ncclMax) acc = std::max(acc, v);
  }
  bool integer = type <= ncclUint64;
  if (op == ncclAvg) acc = integer ? std::floor(acc / nranks) : acc / nranks;
  return acc;
}

std::string allReduceEveryTypeAndOp(int rank, int nranks, const ncclUniqueId& id) {
  Rank me;
  if (auto e = me.init(rank, nranks, id); !e.empty()) return e;
  for (int t = 0; t < ncclNumTypes; ++t) {
    auto type = static_cast<ncclDataType_t>(t);
    const size_t es = standin::ncclTypeSize(type);
    // float32 crosses the staging slot: several rounds.
    const size_t count = type == ncclFloat32 ? 100003 : 37;
    std::vector<char> host(count * es), want(count * es);
    for (size_t i = 0; i < count; ++i) store(type, host.data() + i * es, input(rank, i));
    for (int o = 0; o < ncclNumOps; ++o) {
      auto op = static_cast<ncclRedOp_t>(o);
      for (size_t i = 0; i < count; ++i) store(type, want.data() + i * es, expected(op, type, nranks, i));
      void* send = toDevice(host.data(), host.size(), me.stream);
      void* recv = toDevice(nullptr, 0, me.stream);
      CHECK(cudaMalloc(&recv, host.size()) == cudaSuccess);
      CHECK(ncclAllReduce(send, recv, count, type, op, me.comm, me.stream) == ncclSuccess);
      auto got = toHost(recv, host.size(), me.stream);
      if (got != want)
        return std::string("allreduce ") + standin::ncclTypeName(type) + " " + standin::ncclOpName(op) + " differs";
      // In place.
      CHECK(ncclAllReduce(send, send, count, type, op, me.comm, me.stream) == ncclSuccess);
      CHECK(toHost(send, host.size(), me.stream) == want);
      CHECK(cudaFree(send) == cudaSuccess && cudaFree(recv) == cudaSuccess);
    }
  }
  ncclResult_t async = ncclSuccess;
  CHECK(ncclCommGetAsyncError(me.comm, &async) == ncclSuccess && async == ncclSuccess);
  CHECK(ncclCommDestroy(me.comm) == ncclSuccess);
  return "";
}

std::string gatherBroadcastScatter(int rank, int nranks, const ncclUniqueId& id) {
  Rank me;
  if (auto e = me.init(rank, nranks, id); !e.empty()) return e;
  const size_t count = 70001;  // floats: more than one staging round
  std::vector<float> mine(count);
  for (size_t i = 0; i < count; ++i) mine[i] = static_cast<float>(rank * 1000000 + i);
  float* send = static_cast<float*>(toDevice(mine.data(), count * 4, me.stream));
  float* all = nullptr;
  CHECK(cudaMalloc(reinterpret_cast<void**>(&all), count * 4 * nranks) == cudaSuccess);
  CHECK(ncclAllGather(send, all, count, ncclFloat32, me.comm, me.stream) == ncclSuccess);
  auto gathered = toHost(all, count * 4 * nranks, me.stream);
  for (int r = 0; r < nranks; ++r)
    for (size_t i = 0; i < count; i += 997)
      CHECK(reinterpret_cast<float*>(gathered.data())[r * count + i] == static_cast<float>(r * 1000000 + i));

  const int root = nranks - 1;
  CHECK(ncclBroadcast(send, send, count, ncclFloat32, root, me.comm, me.stream) == ncclSuccess);
  auto bcast = toHost(send, count * 4, me.stream);
  for (size_t i = 0; i < count; i += 991)
    CHECK(reinterpret_cast<float*>(bcast.data())[i] == static_cast<float>(root * 1000000 + i));

  // Reduce-scatter of int64: block r of the sum lands on rank r.
  const size_t block = 40000;
  std::vector<int64_t> in(block * nranks);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<int64_t>(i) * (rank + 1);
  void* rsIn = toDevice(in.data(), in.size() * 8, me.stream);
  void* rsOut = nullptr;
  CHECK(cudaMalloc(&rsOut, block * 8) == cudaSuccess);
  CHECK(ncclReduceScatter(rsIn, rsOut, block, ncclInt64, ncclSum, me.comm, me.stream) == ncclSuccess);
  auto rs = toHost(rsOut, block * 8, me.stream);
  const int64_t factor = nranks * (nranks + 1) / 2;
  for (size_t i = 0; i < block; i += 13)
    CHECK(reinterpret_cast<int64_t*>(rs.data())[i] == static_cast<int64_t>(rank * block + i) * factor);
  CHECK(ncclCommDestroy(me.comm) == ncclSuccess);
  return "";
}

// An alltoall built from send/recv in one group, sizes differing per pair, self included.
std::string alltoallFromSendRecv(int rank, int nranks, const ncclUniqueId& id) {
  Rank me;
  if (auto e = me.init(rank, nranks, id); !e.empty()) return e;
  auto countFor = [](int from, int to) { return static_cast<size_t>((from + 1) * (to + 2) * 30011); };
  std::vector<void*> sends(nranks), recvs(nranks);
  // The host sources stay alive until the stream has copied them (the copies run later).
  std::vector<std::vector<int32_t>> hostSends(nranks);
  CHECK(ncclGroupStart() == ncclSuccess);
  for (int peer = 0; peer < nranks; ++peer) {
    std::vector<int32_t>& data = hostSends[peer];
    data.resize(countFor(rank, peer));
    for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<int32_t>(rank * 100000000 + peer * 1000000 + i);
    sends[peer] = toDevice(data.data(), data.size() * 4, me.stream);
    CHECK(cudaMalloc(&recvs[peer], countFor(peer, rank) * 4) == cudaSuccess);
    CHECK(ncclSend(sends[peer], data.size(), ncclInt32, peer, me.comm, me.stream) == ncclSuccess);
    CHECK(ncclRecv(recvs[peer], countFor(peer, rank), ncclInt32, peer, me.comm, me.stream) == ncclSuccess);
  }
  CHECK(ncclGroupEnd() == ncclSuccess);
  for (int peer = 0; peer < nranks; ++peer) {
    auto got = toHost(recvs[peer], countFor(peer, rank) * 4, me.stream);
    auto* v = reinterpret_cast<int32_t*>(got.data());
    for (size_t i = 0; i < countFor(peer, rank); i += 101)
      CHECK(v[i] == static_cast<int32_t>(peer * 100000000 + rank * 1000000 + i));
  }
  CHECK(ncclCommDestroy(me.comm) == ncclSuccess);
  return "";
}

class StandinNccl : public ::testing::TestWithParam<int> {};

TEST_P(StandinNccl, AllReduceEveryTypeAndOp) { EXPECT_EQ(runRanks(GetParam(), allReduceEveryTypeAndOp), ""); }
TEST_P(StandinNccl, AllGatherBroadcastReduceScatter) { EXPECT_EQ(runRanks(GetParam(), gatherBroadcastScatter), ""); }
TEST_P(StandinNccl, AlltoallFromSendRecvGroup) { EXPECT_EQ(runRanks(GetParam(), alltoallFromSendRecv), ""); }

INSTANTIATE_TEST_SUITE_P(Ranks, StandinNccl, ::testing::Values(2, 3));

TEST(StandinNcclErrors, CollectiveMismatchIsAnAsyncErrorOnEveryRank) {
  EXPECT_EQ(
      runRanks(2,
               [](int rank, int nranks, const ncclUniqueId& id) -> std::string {
                 Rank me;
                 if (auto e = me.init(rank, nranks, id); !e.empty()) return e;
                 void* buf = nullptr;
                 CHECK(cudaMalloc(&buf, 64) == cudaSuccess);
                 CHECK(cudaMemsetAsync(buf, 0, 64, me.stream) == cudaSuccess);
                 CHECK(ncclAllReduce(buf, buf, 4 + rank, ncclFloat32, ncclSum, me.comm, me.stream) == ncclSuccess);
                 CHECK(cudaStreamSynchronize(me.stream) == cudaSuccess);  // the op ended
                 ncclResult_t async = ncclSuccess;
                 CHECK(ncclCommGetAsyncError(me.comm, &async) == ncclSuccess);
                 CHECK(async == ncclInvalidUsage);
                 CHECK(std::string(ncclGetLastError(me.comm)).find("mismatch") != std::string::npos);
                 CHECK(ncclAllReduce(buf, buf, 4, ncclFloat32, ncclSum, me.comm, me.stream) == ncclInvalidUsage);
                 CHECK(ncclCommAbort(me.comm) == ncclSuccess);
                 return "";
               }),
      "");
}

TEST(StandinNcclErrors, AbortUnblocksAnOpWaitingForAPeer) {
  int release[2];
  ASSERT_EQ(pipe(release), 0);
  EXPECT_EQ(
      runRanks(2,
               [&](int rank, int nranks, const ncclUniqueId& id) -> std::string {
                 Rank me;
                 if (auto e = me.init(rank, nranks, id); !e.empty()) return e;
                 if (rank == 1) {  // never joins the collective; waits until rank 0 is done
                   char c;
                   CHECK(read(release[0], &c, 1) == 1);
                   CHECK(ncclCommAbort(me.comm) == ncclSuccess);
                   return "";
                 }
                 void* buf = nullptr;
                 CHECK(cudaMalloc(&buf, 64) == cudaSuccess);
                 CHECK(cudaMemsetAsync(buf, 0, 64, me.stream) == cudaSuccess);
                 CHECK(ncclAllReduce(buf, buf, 16, ncclFloat32, ncclSum, me.comm, me.stream) == ncclSuccess);
                 cudaEvent_t done = nullptr;
                 CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming) == cudaSuccess);
                 CHECK(cudaEventRecord(done, me.stream) == cudaSuccess);
                 CHECK(cudaEventQuery(done) == cudaErrorNotReady);  // rank 1 never takes part
                 CHECK(ncclCommAbort(me.comm) == ncclSuccess);
                 CHECK(cudaEventSynchronize(done) == cudaSuccess);  // the op ended
                 CHECK(ncclAllReduce(buf, buf, 16, ncclFloat32, ncclSum, me.comm, me.stream) == ncclInvalidArgument);
                 ncclResult_t async;
                 CHECK(ncclCommGetAsyncError(me.comm, &async) == ncclInvalidArgument);
                 CHECK(write(release[1], "x", 1) == 1);
                 return "";
               }),
      "");
}

TEST(StandinNcclErrors, KilledPeerIsAnAsyncErrorAndAbortEndsTheWait) {
  EXPECT_EQ(runRanks(3,
                     [](int rank, int nranks, const ncclUniqueId& id) -> std::string {
                       Rank me;
                       if (auto e = me.init(rank, nranks, id); !e.empty()) return e;
                       void* buf = nullptr;
                       CHECK(cudaMalloc(&buf, 64) == cudaSuccess);
                       CHECK(cudaMemsetAsync(buf, 0, 64, me.stream) == cudaSuccess);
                       CHECK(ncclAllReduce(buf, buf, 16, ncclFloat32, ncclSum, me.comm, me.stream) == ncclSuccess);
                       CHECK(cudaStreamSynchronize(me.stream) == cudaSuccess);
                       if (rank == 2) raise(SIGKILL);
                       CHECK(ncclAllReduce(buf, buf, 16, ncclFloat32, ncclSum, me.comm, me.stream) == ncclSuccess);
                       cudaEvent_t done = nullptr;
                       CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming) == cudaSuccess);
                       CHECK(cudaEventRecord(done, me.stream) == cudaSuccess);
                       ncclResult_t async = ncclSuccess;
                       // Bounded by runRanks' timeout: the error comes from pid liveness, not a timer.
                       while (async == ncclSuccess) {
                         CHECK(ncclCommGetAsyncError(me.comm, &async) == ncclSuccess);
                         std::this_thread::sleep_for(std::chrono::milliseconds(5));
                       }
                       CHECK(async == ncclRemoteError);
                       CHECK(cudaEventQuery(done) == cudaErrorNotReady);  // still waiting, as NCCL's kernels do
                       CHECK(ncclCommAbort(me.comm) == ncclSuccess);
                       CHECK(cudaEventSynchronize(done) == cudaSuccess);
                       return "";
                     },
                     {2}),
            "");
}

TEST(StandinNcclErrors, ArgumentsAreChecked) {
  EXPECT_EQ(
      runRanks(1,
               [](int rank, int nranks, const ncclUniqueId& id) -> std::string {
                 Rank me;
                 if (auto e = me.init(rank, nranks, id); !e.empty()) return e;
                 float host[4];
                 void* d = nullptr;
                 CHECK(cudaMalloc(&d, 16) == cudaSuccess);
                 CHECK(ncclAllReduce(host, host, 4, ncclFloat32, ncclSum, me.comm, me.stream) == ncclInvalidArgument);
                 CHECK(ncclAllReduce(d, d, 5, ncclFloat32, ncclSum, me.comm, me.stream) == ncclInvalidArgument);
                 CHECK(ncclAllReduce(d, d, 4, ncclFloat32, static_cast<ncclRedOp_t>(9), me.comm, me.stream) ==
                       ncclInvalidArgument);
                 CHECK(ncclBroadcast(d, d, 4, ncclFloat32, 1, me.comm, me.stream) == ncclInvalidArgument);
                 CHECK(ncclGroupEnd() == ncclInvalidUsage);
                 CHECK(ncclGroupStart() == ncclSuccess);
                 CHECK(ncclSend(d, 4, ncclFloat32, 3, me.comm, me.stream) == ncclInvalidArgument);
                 CHECK(ncclGroupEnd() == ncclInvalidArgument);  // the group fails as a whole
                 ncclUniqueId bogus{};
                 ncclComm_t other = nullptr;
                 CHECK(ncclCommInitRank(&other, 1, bogus, 0) == ncclInvalidArgument);
                 CHECK(ncclCommInitRank(&other, 2, id, 2) == ncclInvalidArgument);
                 // One rank: an allreduce is a copy.
                 CHECK(cudaMemsetAsync(d, 0, 16, me.stream) == cudaSuccess);
                 CHECK(ncclAllReduce(d, d, 4, ncclFloat32, ncclSum, me.comm, me.stream) == ncclSuccess);
                 CHECK(ncclCommDestroy(me.comm) == ncclSuccess);
                 CHECK(ncclCommDestroy(me.comm) == ncclInvalidArgument);
                 return "";
               }),
      "");
}

TEST(StandinNcclErrors, CallsAreCheckedByTheOrderingChecker) {
  EXPECT_EQ(runRanks(1,
                     [](int rank, int nranks, const ncclUniqueId& id) -> std::string {
                       Rank me;
                       if (auto e = me.init(rank, nranks, id); !e.empty()) return e;
                       cudaStream_t other = nullptr;
                       CHECK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking) == cudaSuccess);
                       void* d = nullptr;
                       CHECK(cudaMalloc(&d, 16) == cudaSuccess);
                       CHECK(cudaMemsetAsync(d, 0, 16, me.stream) == cudaSuccess);
                       // No event between the producer stream and the NCCL stream.
                       CHECK(ncclAllReduce(d, d, 4, ncclFloat32, ncclSum, me.comm, other) == ncclUnhandledCudaError);
                       CHECK(cudaGetLastError() == cudaErrorLaunchFailure);
                       hvd_standin_clear_errors();
                       cudaEvent_t produced = nullptr;
                       CHECK(cudaEventCreateWithFlags(&produced, cudaEventDisableTiming) == cudaSuccess);
                       CHECK(cudaEventRecord(produced, me.stream) == cudaSuccess);
                       CHECK(cudaStreamWaitEvent(other, produced, 0) == cudaSuccess);
                       CHECK(ncclAllReduce(d, d, 4, ncclFloat32, ncclSum, me.comm, other) == ncclSuccess);
                       CHECK(cudaStreamSynchronize(other) == cudaSuccess);
                       CHECK(ncclCommDestroy(me.comm) == ncclSuccess);
                       return "";
                     }),
            "");
}

TEST(StandinDevices, CountComesFromTheEnvironment) {
  // A forked child reads HVD_STANDIN_DEVICES afresh.
  setenv("HVD_STANDIN_DEVICES", "3", 1);
  std::string three = runRanks(1, [](int, int, const ncclUniqueId&) -> std::string {
    int count = 0;
    CHECK(cudaGetDeviceCount(&count) == cudaSuccess && count == 3);
    CHECK(cudaSetDevice(2) == cudaSuccess);
    return "";
  });
  setenv("HVD_STANDIN_DEVICES", "none", 1);
  std::string invalid = runRanks(1, [](int, int, const ncclUniqueId&) -> std::string {
    int count = 0;
    CHECK(cudaGetDeviceCount(&count) == cudaErrorInitializationError);
    void* d = nullptr;
    CHECK(cudaMalloc(&d, 4) == cudaErrorInitializationError);
    return "";
  });
  unsetenv("HVD_STANDIN_DEVICES");
  EXPECT_EQ(three, "");
  EXPECT_EQ(invalid, "");
}

}  // namespace
