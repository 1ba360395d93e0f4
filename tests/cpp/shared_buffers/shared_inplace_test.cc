// Shared buffers (hvd::allocateShared) and the zero-copy shared in-place allreduce, over real
// processes: forked ranks rendezvous through a TcpStoreServer in the parent and run the public
// API over the shm transport. Checks results against the staged path on ordinary memory
// (bitwise), across dtypes, ops, sizes and per-rank offsets; bitwise equality across ranks; the
// mixed case (one rank on ordinary memory); and that a rank killed mid-op gives PeerLost on the
// others within seconds. Every child is bounded by alarm(); the parent kills stragglers.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "collectives/reduce.h"
#include "horovod/horovod.h"
#include "shared_buffers/runtime_counts.h"
#include "support/forked_ranks.h"
#include "transport/peer_memory.h"

namespace hvd {
namespace {

using test_support::kOk;
constexpr int kWrongPath = 5;
constexpr int kMismatch = 6;

std::vector<int> runRanks(int n, const std::function<int(int)>& body, int limitSeconds = 60,
                          const char* transport = "shm") {
  return test_support::runForkedRanks(n, body, {transport, "shared-host", std::chrono::seconds(limitSeconds)});
}

TensorView viewOf(void* data, DataType dtype, size_t count) {
  TensorView t;
  t.data = data;
  t.dtype = dtype;
  t.shape = {static_cast<int64_t>(count)};
  return t;
}

// Element i of rank r, as a double: small integers (exact in every dtype), or fractional values
// (float types, to make rounding differences visible) when `fractional`.
double valueOf(int r, size_t i, bool fractional) {
  double v = double((i * 7 + size_t(r) * 3) % 11) + 1.0;
  if (fractional) v += std::sin(double(i) * 0.37 + r) * 0.3;
  return v;
}

void fill(void* data, DataType dtype, size_t count, int r, bool fractional) {
  for (size_t i = 0; i < count; ++i) {
    double v = valueOf(r, i, fractional);
    switch (dtype) {
      case DataType::kFloat32: static_cast<float*>(data)[i] = float(v); break;
      case DataType::kFloat64: static_cast<double*>(data)[i] = v; break;
      case DataType::kFloat16: static_cast<uint16_t*>(data)[i] = floatToHalf(float(v)); break;
      case DataType::kBFloat16: static_cast<uint16_t*>(data)[i] = floatToBfloat16(float(v)); break;
      case DataType::kInt32: static_cast<int32_t*>(data)[i] = int32_t(v); break;
      case DataType::kInt64: static_cast<int64_t*>(data)[i] = int64_t(v); break;
      case DataType::kUInt8: static_cast<uint8_t*>(data)[i] = uint8_t(v); break;
      default: throw std::runtime_error("dtype not covered");
    }
  }
}

uint64_t fnv(const void* data, size_t bytes) {
  uint64_t h = 1469598103934665603ULL;
  auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ULL;
  return h;
}

// Whether every rank holds the same 64-bit value (Min == Max over ranks).
bool sameOnAllRanks(uint64_t value, const std::string& name) {
  int64_t v[2] = {static_cast<int64_t>(value >> 1), static_cast<int64_t>(value >> 1)};
  int64_t w[2] = {v[0], v[1]};
  Options o;
  o.name = name + ".min";
  o.op = ReduceOp::kMin;
  allreduce(viewOf(&v[0], DataType::kInt64, 1), viewOf(&v[0], DataType::kInt64, 1), o);
  o.name = name + ".max";
  o.op = ReduceOp::kMax;
  allreduce(viewOf(&w[1], DataType::kInt64, 1), viewOf(&w[1], DataType::kInt64, 1), o);
  return v[0] == w[1];
}

TEST(SharedBuffers, AllocationIsZeroedAlignedAndRegistered) {
  OwnedTensor t = allocateShared(DataType::kFloat32, {3, 5});
  ASSERT_NE(t.view.data, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.view.data) % 64, 0u);
  EXPECT_EQ(t.view.bytes(), 60u);
  for (int i = 0; i < 15; ++i) EXPECT_EQ(static_cast<float*>(t.view.data)[i], 0.0f);
  SharedBufferInfo info;
  EXPECT_TRUE(findSharedBuffer(static_cast<uint8_t*>(t.view.data) + 4, 56, &info));
  EXPECT_EQ(info.base, t.view.data);
  EXPECT_NE(info.id, 0u);
  EXPECT_FALSE(findSharedBuffer(t.view.data, info.bytes + 1));
  std::vector<float> ordinary(15);
  EXPECT_FALSE(findSharedBuffer(ordinary.data(), 60));
  void* data = t.view.data;
  t = OwnedTensor{};  // last reference: unregistered
  EXPECT_FALSE(findSharedBuffer(data, 4));
  OwnedTensor empty = allocateShared(DataType::kUInt8, {0});
  EXPECT_NE(empty.view.data, nullptr);
  EXPECT_THROW(allocateShared(DataType::kUInt8, {-1}), InvalidArgument);
}

// Every case runs on shared buffers (at an offset that differs between ranks) and on ordinary
// memory (the staged path) with the same data; the results must be bitwise equal, equal on
// every rank, and the shared ones must have taken the in-place path.
TEST(SharedInPlace, MatchesStagedPathAcrossDtypesOpsSizes) {
  auto codes = runRanks(
      3,
      [](int rank) {
        init();
        struct Case {
          DataType dtype;
          ReduceOp op;
          double prescale, postscale;
          bool fractional;
        };
        const std::vector<Case> cases = {
            {DataType::kFloat32, ReduceOp::kSum, 1.0, 1.0, true},
            {DataType::kFloat32, ReduceOp::kAverage, 1.0, 1.0, true},
            {DataType::kFloat32, ReduceOp::kSum, 0.5, 3.0, true},
            {DataType::kFloat64, ReduceOp::kAverage, 1.0, 1.0, true},
            {DataType::kFloat16, ReduceOp::kSum, 1.0, 1.0, false},
            {DataType::kBFloat16, ReduceOp::kAverage, 1.0, 1.0, false},
            {DataType::kInt32, ReduceOp::kMax, 1.0, 1.0, false},
            {DataType::kInt64, ReduceOp::kMin, 1.0, 1.0, false},
            {DataType::kUInt8, ReduceOp::kSum, 1.0, 1.0, false},
            {DataType::kFloat32, ReduceOp::kProduct, 1.0, 1.0, false},
        };
        const std::vector<size_t> counts = {1, 7, 1000, 4099, 65537, (size_t(1) << 20) + 3};
        // Room for the largest case at the largest offset; rank r's tensors start 8*r + 24 elements in.
        const size_t offsetElems = 8 * size_t(rank) + 24;
        OwnedTensor shared = allocateShared(DataType::kUInt8, {int64_t(((size_t(1) << 20) + 64) * 8 + 1024)});
        int id = 0;
        for (const Case& c : cases) {
          for (size_t count : counts) {
            const size_t esize = dataTypeSize(c.dtype);
            uint8_t* s = static_cast<uint8_t*>(shared.view.data) + offsetElems * esize;
            std::vector<uint8_t> plain(count * esize);
            fill(s, c.dtype, count, rank, c.fractional);
            fill(plain.data(), c.dtype, count, rank, c.fractional);
            Options o;
            o.op = c.op;
            o.prescale = c.prescale;
            o.postscale = c.postscale;
            o.name = "shared." + std::to_string(id);
            uint64_t before = test_support::sharedInPlaceCount();
            allreduce(viewOf(s, c.dtype, count), viewOf(s, c.dtype, count), o);
            if (test_support::sharedInPlaceCount() != before + 1) {
              fprintf(stderr, "rank %d case %d: shared in-place path not taken\n", rank, id);
              return kWrongPath;
            }
            o.name = "plain." + std::to_string(id);
            allreduce(viewOf(plain.data(), c.dtype, count), viewOf(plain.data(), c.dtype, count), o);
            if (std::memcmp(s, plain.data(), count * esize) != 0) {
              fprintf(stderr, "rank %d case %d (dtype %s, count %zu): differs from the staged path\n", rank, id,
                      std::string(dataTypeName(c.dtype)).c_str(), count);
              return kMismatch;
            }
            if (!sameOnAllRanks(fnv(s, count * esize), "hash." + std::to_string(id))) {
              fprintf(stderr, "rank %d case %d: results differ between ranks\n", rank, id);
              return kMismatch;
            }
            ++id;
          }
        }
        // Explicit values for one case: float32 sum of small integers is exact.
        float* f = static_cast<float*>(shared.view.data) + offsetElems;
        fill(f, DataType::kFloat32, 1001, rank, false);
        Options o;
        o.name = "shared.exact";
        allreduce(viewOf(f, DataType::kFloat32, 1001), viewOf(f, DataType::kFloat32, 1001), o);
        for (size_t i = 0; i < 1001; ++i) {
          double want = valueOf(0, i, false) + valueOf(1, i, false) + valueOf(2, i, false);
          if (f[i] != float(want)) return kMismatch;
        }
        // Steady state: the same name again and again (response cache hits keep the flag).
        uint64_t before = test_support::sharedInPlaceCount();
        for (int step = 0; step < 20; ++step) {
          for (size_t i = 0; i < 1001; ++i) f[i] = float(rank + step);
          allreduce(viewOf(f, DataType::kFloat32, 1001), viewOf(f, DataType::kFloat32, 1001), o);
          for (size_t i = 0; i < 1001; ++i) {
            if (f[i] != float(3 * step + 3)) return kMismatch;
          }
        }
        if (test_support::sharedInPlaceCount() != before + 20) return kWrongPath;
        barrier();
        shutdown();
        return kOk;
      },
      120);
  EXPECT_EQ(codes, (std::vector<int>{kOk, kOk, kOk}));
}

// Into a shared buffer from an input elsewhere (DistributedOptimizer's fresh gradients): the
// shared path, the input untouched, the result bitwise the staged path's; also with one rank in
// place and the other not, with a prescale, at sizes that leave slices empty, and at one large
// enough (>= 8 MiB) that the staging and the own slice's result are written with streaming stores;
// on 2 ranks (one fold, straight into both buffers) and 3.
TEST(SharedInPlace, IntoSharedOutputFromAnyInput) {
  for (int ranks : {2, 3}) {
    auto codes = runRanks(
        ranks,
        [](int rank) {
          init();
          const std::vector<size_t> counts = {1, 5, 17, 4099, 65537, (size_t(1) << 20) + 3, (size_t(2) << 20) + 5};
          OwnedTensor shared = allocateShared(DataType::kFloat32, {int64_t((size_t(2) << 20) + 64)});
          float* out = static_cast<float*>(shared.view.data) + 8 * rank;  // offsets differ between ranks
          int id = 0;
          for (size_t count : counts) {
            for (int inPlaceRank = -1; inPlaceRank < 3; inPlaceRank += 2) {  // none, or rank 1 in place
              for (double prescale : {1.0, 0.5}) {
                std::vector<float> input(count), expect(count), copy(count);
                fill(input.data(), DataType::kFloat32, count, rank, true);
                copy = input;
                const bool inPlace = rank == inPlaceRank;
                if (inPlace) std::memcpy(out, input.data(), count * 4);
                std::fill(out + (inPlace ? count : 0), out + count, -7.0f);  // stale contents
                Options o;
                o.op = ReduceOp::kAverage;
                o.prescale = prescale;
                o.name = "into." + std::to_string(id);
                const uint64_t before = test_support::sharedInPlaceCount();
                allreduce(viewOf(inPlace ? out : input.data(), DataType::kFloat32, count),
                          viewOf(out, DataType::kFloat32, count), o);
                if (test_support::sharedInPlaceCount() != before + 1) return kWrongPath;
                if (!inPlace && input != copy) {
                  fprintf(stderr, "rank %d case %d: the input was written\n", rank, id);
                  return kMismatch;
                }
                o.name = "into.plain." + std::to_string(id);
                allreduce(viewOf(copy.data(), DataType::kFloat32, count),
                          viewOf(expect.data(), DataType::kFloat32, count), o);
                if (std::memcmp(out, expect.data(), count * 4) != 0) {
                  fprintf(stderr, "rank %d case %d (count %zu): differs from the staged path\n", rank, id, count);
                  return kMismatch;
                }
                if (!sameOnAllRanks(fnv(out, count * 4), "into.hash." + std::to_string(id))) return kMismatch;
                ++id;
              }
            }
          }
          barrier();
          shutdown();
          return kOk;
        },
        120);
    EXPECT_EQ(codes, std::vector<int>(ranks, kOk)) << ranks << " ranks";
  }
}

// One rank on ordinary memory: everyone takes the staged path, results still right; then all
// on shared buffers again under the same name: the flag changes, the in-place path returns.
TEST(SharedInPlace, MixedRanksTakeTheStagedPath) {
  auto codes = runRanks(2, [](int rank) {
    init();
    const size_t count = 100003;
    OwnedTensor shared = allocateShared(DataType::kFloat32, {int64_t(count)});
    std::vector<float> plain(count);
    float* buf = rank == 1 ? plain.data() : static_cast<float*>(shared.view.data);
    Options o;
    o.name = "mixed";
    o.op = ReduceOp::kAverage;
    for (int step = 0; step < 3; ++step) {
      for (size_t i = 0; i < count; ++i) buf[i] = float(2 * (rank + 1) * (i % 9) + step);
      uint64_t before = test_support::sharedInPlaceCount();
      allreduce(viewOf(buf, DataType::kFloat32, count), viewOf(buf, DataType::kFloat32, count), o);
      if (test_support::sharedInPlaceCount() != before) return kWrongPath;
      for (size_t i = 0; i < count; ++i) {
        if (buf[i] != float(3 * (i % 9) + step)) return kMismatch;
      }
    }
    buf = static_cast<float*>(shared.view.data);
    for (size_t i = 0; i < count; ++i) buf[i] = float(rank);
    uint64_t before = test_support::sharedInPlaceCount();
    o.op = ReduceOp::kSum;
    allreduce(viewOf(buf, DataType::kFloat32, count), viewOf(buf, DataType::kFloat32, count), o);
    if (test_support::sharedInPlaceCount() != before + 1) return kWrongPath;
    for (size_t i = 0; i < count; ++i) {
      if (buf[i] != 1.0f) return kMismatch;
    }
    // Out of place from a shared buffer is an ordinary allreduce.
    std::vector<float> out(count);
    before = test_support::sharedInPlaceCount();
    o.name = "outofplace";
    allreduce(viewOf(buf, DataType::kFloat32, count), viewOf(out.data(), DataType::kFloat32, count), o);
    if (test_support::sharedInPlaceCount() != before || out[5] != 2.0f) return kWrongPath;
    barrier();
    shutdown();
    return kOk;
  });
  EXPECT_EQ(codes, (std::vector<int>{kOk, kOk}));
}

// Over tcp there is no shared memory: shared buffers are ordinary memory to the engine.
TEST(SharedInPlace, TcpTransportTakesTheStagedPath) {
  auto codes = runRanks(
      2,
      [](int rank) {
        init();
        OwnedTensor shared = allocateShared(DataType::kFloat32, {1000});
        float* buf = static_cast<float*>(shared.view.data);
        for (int i = 0; i < 1000; ++i) buf[i] = float(rank + 1);
        Options o;
        o.name = "tcp";
        allreduce(viewOf(buf, DataType::kFloat32, 1000), viewOf(buf, DataType::kFloat32, 1000), o);
        if (test_support::sharedInPlaceCount() != 0) return kWrongPath;
        if (buf[999] != 3.0f) return kMismatch;
        shutdown();
        return kOk;
      },
      60, "tcp");
  EXPECT_EQ(codes, (std::vector<int>{kOk, kOk}));
}

// RssShmem of this process (KiB): shared pages it has mapped and touched, its own and peers'.
long residentSharedKiB() {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return -1;
  char line[256];
  long kib = -1;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::strncmp(line, "RssShmem:", 9) == 0) kib = std::atol(line + 9);
  }
  std::fclose(f);
  return kib;
}

// A peer caches its mapping of my buffer; when I free the buffer, the memory must leave the peer
// too, not wait for the peer to evict the mapping.
TEST(SharedInPlace, FreedBufferLeavesNoMemoryInPeers) {
  constexpr int kStillResident = 7;
  auto codes = runRanks(2, [](int rank) {
    init();
    const size_t count = size_t(8) << 20;  // 32 MiB per rank
    Options o;
    o.name = "freed";
    const long before = residentSharedKiB();
    {
      OwnedTensor shared = allocateShared(DataType::kFloat32, {int64_t(count)});
      float* buf = static_cast<float*>(shared.view.data);
      for (size_t i = 0; i < count; ++i) buf[i] = float(rank);
      allreduce(viewOf(buf, DataType::kFloat32, count), viewOf(buf, DataType::kFloat32, count), o);
      if (test_support::sharedInPlaceCount() != 1) return kWrongPath;
      if (buf[count - 1] != 1.0f) return kMismatch;
      // Mine (32 MiB) and the peer's slice I reduced (16 MiB) are resident here.
      if (residentSharedKiB() - before < 40 << 10) return kWrongPath;
      barrier();
    }
    barrier();  // both buffers freed
    const long after = residentSharedKiB() - before;
    if (after > 4 << 10) {
      std::fprintf(stderr, "rank %d: %ld KiB of shared memory still resident after both buffers were freed\n", rank,
                   after);
      return kStillResident;
    }
    shutdown();
    return kOk;
  });
  EXPECT_EQ(codes, (std::vector<int>{kOk, kOk}));
}

TEST(SharedInPlace, KilledRankIsReportedAsPeerLost) {
  auto codes = runRanks(3, [](int rank) {
    init();
    const size_t count = size_t(1) << 20;
    OwnedTensor shared = allocateShared(DataType::kFloat32, {int64_t(count)});
    float* buf = static_cast<float*>(shared.view.data);
    Options o;
    o.name = "kill";
    o.op = ReduceOp::kAverage;
    return test_support::runUntilPeerLost(
        rank, 2, [&] { allreduce(viewOf(buf, DataType::kFloat32, count), viewOf(buf, DataType::kFloat32, count), o); },
        [] { return test_support::sharedInPlaceCount() < 30 ? kWrongPath : kOk; });
  });
  EXPECT_EQ(codes[0], kOk);
  EXPECT_EQ(codes[1], kOk);
  EXPECT_EQ(codes[2], -SIGKILL);
}

}  // namespace
}  // namespace hvd
