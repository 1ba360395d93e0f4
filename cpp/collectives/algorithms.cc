#include "collectives/algorithms.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "collectives/collectives.h"
#include "collectives/partition.h"
#include "common/logging.h"

namespace hvd::collectives {
namespace {

const Param<std::string> kAllreduceAlgo(
    "HOROVOD_ALLREDUCE_ALGO", "",
    "Force one CPU allreduce algorithm by name (shm_direct, shm_slices, recursive_doubling, ring); "
    "empty chooses by message size. Shared-memory algorithms fall back when members do not share memory.");

constexpr size_t kAny = std::numeric_limits<size_t>::max();

// Preference order: the first entry whose rule matches runs.
const std::vector<AllreduceAlgorithm> kTable = {
    {"shm_direct", "shared memory, one barrier: every rank reduces all inputs in rank order", true,
     size_t(64) << 10, true, &allreduceSharedDirect},
    {"shm_slices", "shared memory reduce-scatter + gather, pipelined: one barrier per 1 MiB chunk", true, kAny,
     false, &allreduceSharedSlices},
    {"recursive_doubling", "log2(n) full-buffer exchanges, fold for non-powers of two (latency-bound sizes)",
     false, size_t(64) << 10, false, &allreduceRecursiveDoubling},
    {"ring", "ring reduce-scatter + allgather in <= 1 MiB segments (bandwidth-bound sizes)", false, kAny, false,
     &allreduceRing},
};

}  // namespace

const Param<std::string>& allreduceAlgorithmParam() { return kAllreduceAlgo; }

const std::vector<AllreduceAlgorithm>& allreduceAlgorithms() { return kTable; }

void checkAllreduceAlgorithmName(const std::string& name) {
  if (name.empty()) return;
  std::string known;
  for (const auto& algo : kTable) {
    if (name == algo.name) return;
    known += (known.empty() ? "" : ", ") + std::string(algo.name);
  }
  throw InvalidArgument(std::string(kAllreduceAlgo.name()) + "='" + name + "' is not an allreduce algorithm; known: " +
                        known);
}

const AllreduceAlgorithm& chooseAllreduce(const std::string& requested, size_t bytes, int n, bool shared) {
  if (!requested.empty()) {
    for (const auto& algo : kTable) {
      if (requested == algo.name && (shared || !algo.needsShared)) return algo;
    }
    checkAllreduceAlgorithmName(requested);
    // A shared-memory algorithm was asked for but the members do not share memory: use the rule.
  }
  for (const auto& algo : kTable) {
    size_t cost = algo.perPeer ? bytes * static_cast<size_t>(std::max(1, n - 1)) : bytes;
    if ((shared || !algo.needsShared) && cost <= algo.maxBytes) return algo;
  }
  return kTable.back();
}

void allreduce(Communicator& comm, const void* in, void* out, size_t count, DataType dtype, ReduceOp op) {
  const ReduceKernel& kernel = reduceKernel(dtype, op);  // validates op before anything is sent
  const size_t bytes = count * kernel.elementSize;
  if (comm.size() == 1 || count == 0) {
    if (in != out && bytes > 0) std::memcpy(out, in, bytes);
    return;
  }
  SharedSpace* shared = comm.sharedSpace(comm.deadline());
  bool useShared = sharedUsable(shared, comm.size());
  const AllreduceAlgorithm& algo = chooseAllreduce(comm.allreduceAlgorithm(), bytes, comm.size(), useShared);
  if (!algo.needsShared && in != out) {
    std::memcpy(out, in, bytes);
    in = out;
  }
  algo.run(AllreduceArgs{comm, in, out, count, dtype, kernel, useShared ? shared : nullptr});
}

void allreduce(Communicator& comm, void* buf, size_t count, DataType dtype, ReduceOp op) {
  allreduce(comm, buf, buf, count, dtype, op);
}

}  // namespace hvd::collectives
