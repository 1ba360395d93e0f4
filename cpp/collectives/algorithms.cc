#include "collectives/algorithms.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "collectives/collectives.h"
#include "collectives/hierarchical.h"
#include "collectives/partition.h"
#include "collectives/pieces.h"
#include "collectives/reduce.h"
#include "common/logging.h"

namespace hvd::collectives {
namespace {

const Param<std::string> kAllreduceAlgo(
    "HOROVOD_ALLREDUCE_ALGO", "",
    "Force one CPU allreduce algorithm by name (shm_direct, shm_slices, hierarchical, recursive_doubling, "
    "ring); empty chooses by message size and placement. Shared-memory and hierarchical algorithms fall back "
    "to the default rule when the placement does not allow them.");

constexpr size_t kAny = std::numeric_limits<size_t>::max();

// Preference order: the first entry whose rule matches runs.
const std::vector<AllreduceAlgorithm> kTable = {
    {"shm_direct", "shared memory, one barrier: every rank reduces all inputs in rank order", true,
     size_t(64) << 10, true, &allreduceSharedDirect, false, true, true},
    {"shm_slices", "shared memory reduce-scatter + gather, pipelined: one barrier per 1 MiB chunk", true, kAny,
     false, &allreduceSharedSlices, false, true, true},
    {"hierarchical",
     "shared-memory reduce-scatter inside each host, allreduce of each slice across hosts, shared-memory gather",
     false, kAny, false, &allreduceHierarchical, true, false, true},
    {"recursive_doubling", "log2(n) full-buffer exchanges, fold for non-powers of two (latency-bound sizes)",
     false, size_t(64) << 10, false, &allreduceRecursiveDoubling},
    {"ring", "ring reduce-scatter + allgather in <= 1 MiB segments (bandwidth-bound sizes)", false, kAny, false,
     &allreduceRing},
};

}  // namespace

const Param<std::string>& allreduceAlgorithmParam() { return kAllreduceAlgo; }

const std::vector<AllreduceAlgorithm>& allreduceAlgorithms() { return kTable; }

void checkAllreduceAlgorithmName(std::string_view name) {
  if (name.empty()) return;
  std::string known;
  for (const auto& algo : kTable) {
    if (name == algo.name) return;
    known += (known.empty() ? "" : ", ") + std::string(algo.name);
  }
  throw InvalidArgument(std::string(kAllreduceAlgo.name()) + "='" + std::string(name) + "' is not an allreduce algorithm; known: " +
                        known);
}

namespace {

bool runnable(const AllreduceAlgorithm& algo, bool shared, bool hosts) {
  return (shared || !algo.needsShared) && (hosts || !algo.needsHosts);
}

// The table entry named `requested` when it can run without knowing more about the placement.
const AllreduceAlgorithm* honoured(std::string_view requested, bool shared) {
  for (const auto& algo : kTable) {
    if (requested == algo.name && runnable(algo, shared, false)) return &algo;
  }
  return nullptr;
}

}  // namespace

const AllreduceAlgorithm& chooseAllreduce(std::string_view requested, size_t bytes, int n, bool shared,
                                          bool hosts) {
  if (!requested.empty()) {
    for (const auto& algo : kTable) {
      if (requested == algo.name && runnable(algo, shared, hosts)) return algo;
    }
    checkAllreduceAlgorithmName(requested);
    // A shared-memory or hierarchical algorithm was asked for but the placement does not allow
    // it: use the rule.
  }
  for (const auto& algo : kTable) {
    size_t cost = algo.perPeer ? bytes * static_cast<size_t>(std::max(1, n - 1)) : bytes;
    if (runnable(algo, shared, hosts) && cost <= algo.maxBytes) return algo;
  }
  return kTable.back();
}

namespace {

struct Choice {
  const AllreduceAlgorithm* algo;
  SharedSpace* shared;
};

Choice choose(Communicator& comm, size_t bytes) {
  SharedSpace* shared = comm.sharedSpace(comm.deadline());
  const bool useShared = sharedUsable(shared, comm.size());
  const std::string& requested = comm.allreduceAlgorithm();
  // Whether the hierarchical algorithm can run costs a collective agreement the first time, so
  // ask only when the answer matters (an explicit request for another algorithm does not).
  bool hosts = false;
  if (!useShared && honoured(requested, useShared) == nullptr) hosts = hierarchicalUsable(comm, true);
  return Choice{&chooseAllreduce(requested, bytes, comm.size(), useShared, hosts), useShared ? shared : nullptr};
}

}  // namespace

const AllreduceAlgorithm& allreduceChoice(Communicator& comm, size_t bytes) {
  if (comm.size() == 1) return kTable.back();
  return *choose(comm, bytes).algo;
}

void allreduce(Communicator& comm, const void* in, void* out, size_t count, DataType dtype, ReduceOp op,
               double postscale) {
  const ReduceKernel& kernel = reduceKernel(dtype, op);  // validates op before anything is sent
  checkScalable(dtype, postscale);
  const size_t bytes = count * kernel.elementSize;
  if (comm.size() == 1 || count == 0) {
    if (in != out && bytes > 0) std::memcpy(out, in, bytes);
    scaleBuffer(out, count, dtype, postscale);
    return;
  }
  const Choice choice = choose(comm, bytes);
  const AllreduceAlgorithm& algo = *choice.algo;
  // Algorithms that read the input straight from `in` (shared memory) get it; the others work
  // in place.
  if (!algo.needsShared && !algo.needsHosts && in != out) {
    std::memcpy(out, in, bytes);
    in = out;
  }
  algo.run(AllreduceArgs{comm, in, out, count, dtype, kernel, choice.shared, nullptr, postscale});
  if (!algo.foldsPostscale) scaleBuffer(out, count, dtype, postscale);
}

bool allreducePieces(Communicator& comm, const std::vector<Piece>& pieces, DataType dtype, ReduceOp op,
                     double postscale) {
  const ReduceKernel& kernel = reduceKernel(dtype, op);
  checkScalable(dtype, postscale);
  size_t count = 0;
  for (const Piece& p : pieces) count += p.count;
  if (comm.size() == 1 || count == 0) {
    for (const Piece& p : pieces) {
      if (p.in != p.out && p.count > 0) std::memcpy(p.out, p.in, p.count * kernel.elementSize);
      scaleBuffer(p.out, p.count, dtype, postscale);
    }
    return true;
  }
  const Choice choice = choose(comm, count * kernel.elementSize);
  if (!choice.algo->takesPieces) return false;
  thread_local std::vector<size_t> starts;  // scratch: no allocation per call in a steady state
  const MessageIo io(pieces, kernel.elementSize, starts);
  choice.algo->run(AllreduceArgs{comm, nullptr, nullptr, count, dtype, kernel, choice.shared, &io, postscale});
  if (!choice.algo->foldsPostscale) {
    for (const Piece& p : pieces) scaleBuffer(p.out, p.count, dtype, postscale);
  }
  return true;
}

void allreduce(Communicator& comm, void* buf, size_t count, DataType dtype, ReduceOp op, double postscale) {
  allreduce(comm, buf, buf, count, dtype, op, postscale);
}

}  // namespace hvd::collectives
