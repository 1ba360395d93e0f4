#include "collectives/algorithms.h"

#include <algorithm>
#include <cstring>

#include "collectives/collectives.h"
#include "collectives/hierarchical.h"
#include "collectives/member_buffers.h"
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
    "to the default rule when the placement does not allow them. Allreduces into shared buffers on every "
    "rank (shm_inplace, see HOROVOD_SHARED_INPLACE) are not affected.");

const Param<int64_t> kAllreduceCrossover(
    "HOROVOD_ALLREDUCE_CROSSOVER_BYTES", 0,
    "Message size (bytes) up to which the latency-bound allreduce runs (shm_direct on one host, where the "
    "size counts once per peer; recursive_doubling over the network) instead of the bandwidth-bound one. "
    "0 = each algorithm's own limit (64 KiB). Autotuning searches it unless set.");

// Preference order: the first entry whose rule matches runs.
const std::vector<AllreduceAlgorithm> kTable = {
    {.name = "shm_inplace",
     .description = "zero-copy in the members' shared output buffers: each rank reduces its slice over all "
                    "buffers and writes it into every one",
     .needsShared = true,
     .needsSharedOutputs = true,
     .foldsPostscale = true,
     .attempt = &allreduceSharedInPlace},
    {.name = "shm_direct",
     .description = "shared memory, one barrier: every rank reduces all inputs in rank order",
     .needsShared = true,
     .maxBytes = size_t(64) << 10,
     .perPeer = true,
     .takesPieces = true,
     .foldsPostscale = true,
     .run = &allreduceSharedDirect},
    {.name = "shm_slices",
     .description = "shared memory reduce-scatter + gather, pipelined: one barrier per 1 MiB chunk",
     .needsShared = true,
     .takesPieces = true,
     .foldsPostscale = true,
     .run = &allreduceSharedSlices},
    {.name = "hierarchical",
     .description =
         "shared-memory reduce-scatter inside each host, allreduce of each slice across hosts, shared-memory gather",
     .needsHosts = true,
     .foldsPostscale = true,
     .run = &allreduceHierarchical},
    {.name = "recursive_doubling",
     .description = "log2(n) full-buffer exchanges, fold for non-powers of two (latency-bound sizes)",
     .maxBytes = size_t(64) << 10,
     .run = &allreduceRecursiveDoubling},
    {.name = "ring",
     .description = "ring reduce-scatter + allgather in <= 1 MiB segments (bandwidth-bound sizes)",
     .run = &allreduceRing},
};

}  // namespace

const Param<std::string>& allreduceAlgorithmParam() { return kAllreduceAlgo; }
const Param<int64_t>& allreduceCrossoverParam() { return kAllreduceCrossover; }

const std::vector<AllreduceAlgorithm>& allreduceAlgorithms() { return kTable; }

void checkAllreduceAlgorithmName(std::string_view name) {
  if (name.empty()) return;
  std::string known;
  for (const auto& algo : kTable) {
    if (name == algo.name) return;
    known += (known.empty() ? "" : ", ") + std::string(algo.name);
  }
  throw InvalidArgument(std::string(kAllreduceAlgo.name()) + "='" + std::string(name) +
                        "' is not an allreduce algorithm; known: " + known);
}

namespace {

bool runnable(const AllreduceAlgorithm& algo, bool shared, bool hosts, bool sharedOutputs = false) {
  return (shared || !algo.needsShared) && (hosts || !algo.needsHosts) && (sharedOutputs || !algo.needsSharedOutputs);
}

// The table entry named `requested` when it can run without knowing more about the placement.
const AllreduceAlgorithm* honoured(std::string_view requested, bool shared) {
  for (const auto& algo : kTable) {
    if (requested == algo.name && runnable(algo, shared, false)) return &algo;
  }
  return nullptr;
}

}  // namespace

size_t defaultAllreduceCrossover() {
  size_t most = 0;
  for (const auto& algo : kTable) {
    if (algo.maxBytes != kAnyBytes) most = std::max(most, algo.maxBytes);
  }
  return most;
}

const AllreduceAlgorithm& chooseAllreduce(std::string_view requested, size_t bytes, int n, bool shared, bool hosts,
                                          bool sharedOutputs, size_t crossover) {
  if (sharedOutputs) {
    for (const auto& algo : kTable) {
      if (algo.needsSharedOutputs && runnable(algo, shared, hosts, sharedOutputs)) return algo;
    }
  }
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
    const size_t limit = crossover != 0 && algo.maxBytes != kAnyBytes ? crossover : algo.maxBytes;
    if (runnable(algo, shared, hosts) && cost <= limit) return algo;
  }
  return kTable.back();
}

namespace {

struct Choice {
  const AllreduceAlgorithm* algo;
  SharedSpace* shared;
};

// `sharedOutputs`: the caller asked for the members' shared outputs (AllreduceOptions).
Choice choose(Communicator& comm, size_t bytes, bool sharedOutputs = false) {
  SharedSpace* shared = comm.sharedSpace(comm.deadline());
  const bool useShared = sharedUsable(shared, comm.size());
  const std::string& requested = comm.allreduceAlgorithm();
  // Whether the hierarchical algorithm can run costs a collective agreement the first time, so
  // ask only when the answer matters (an explicit request for another algorithm does not).
  // A tuned-off hierarchical algorithm is not asked about at all (the knob is equal on every
  // member, so they all skip the agreement alike).
  bool hosts = false;
  if (!useShared && comm.hierarchicalAllowed() && honoured(requested, useShared) == nullptr) {
    hosts = hierarchicalUsable(comm, true);
  }
  return Choice{
      &chooseAllreduce(requested, bytes, comm.size(), useShared, hosts, sharedOutputs, comm.allreduceCrossover()),
      useShared ? shared : nullptr};
}

}  // namespace

const AllreduceAlgorithm& allreduceChoice(Communicator& comm, size_t bytes) {
  if (comm.size() == 1) return kTable.back();
  return *choose(comm, bytes).algo;
}

void allreduce(Communicator& comm, const void* in, void* out, size_t count, DataType dtype, ReduceOp op,
               double postscale) {
  allreduce(comm, in, out, count, dtype, AllreduceOptions{.op = op, .postscale = postscale});
}

bool allreduce(Communicator& comm, const void* in, void* out, size_t count, DataType dtype,
               const AllreduceOptions& options) {
  const ReduceKernel& kernel = reduceKernel(dtype, options.op);  // validates op before anything is sent
  const double postscale = options.postscale;
  checkScalable(dtype, options.prescale);
  checkScalable(dtype, postscale);
  const size_t bytes = count * kernel.elementSize;
  auto prescaleIntoOutput = [&] {
    if (options.prescale == 1.0) return;
    if (in != out && bytes > 0) std::memcpy(out, in, bytes);
    scaleBuffer(out, count, dtype, options.prescale);
    in = out;
  };
  if (comm.size() == 1 || count == 0) {
    prescaleIntoOutput();
    if (in != out && bytes > 0) std::memcpy(out, in, bytes);
    scaleBuffer(out, count, dtype, postscale);
    if (options.ran != nullptr) *options.ran = kLocalAllreduce;
    return false;
  }
  Choice choice = choose(comm, bytes, options.sharedOutputs);
  if (choice.algo->attempt != nullptr) {
    const AllreduceArgs args{comm, in, out, count, dtype, kernel, choice.shared, nullptr, postscale, options.prescale};
    if (choice.algo->attempt(args)) {
      if (options.ran != nullptr) *options.ran = choice.algo->name;
      return true;
    }
    choice = choose(comm, bytes);  // declined on every member alike
  }
  prescaleIntoOutput();
  const AllreduceAlgorithm& algo = *choice.algo;
  // Algorithms that read the input straight from `in` (shared memory) get it; the others work
  // in place.
  if (!algo.needsShared && !algo.needsHosts && in != out) {
    std::memcpy(out, in, bytes);
    in = out;
  }
  algo.run(AllreduceArgs{comm, in, out, count, dtype, kernel, choice.shared, nullptr, postscale});
  if (!algo.foldsPostscale) scaleBuffer(out, count, dtype, postscale);
  if (options.ran != nullptr) *options.ran = algo.name;
  return false;
}

const char* allreducePieces(Communicator& comm, const std::vector<Piece>& pieces, DataType dtype, ReduceOp op,
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
    return kLocalAllreduce;
  }
  const Choice choice = choose(comm, count * kernel.elementSize);
  if (!choice.algo->takesPieces) return nullptr;
  thread_local std::vector<size_t> starts;  // scratch: no allocation per call in a steady state
  const MessageIo io(pieces, kernel.elementSize, starts);
  choice.algo->run(AllreduceArgs{comm, nullptr, nullptr, count, dtype, kernel, choice.shared, &io, postscale});
  if (!choice.algo->foldsPostscale) {
    for (const Piece& p : pieces) scaleBuffer(p.out, p.count, dtype, postscale);
  }
  return choice.algo->name;
}

void allreduce(Communicator& comm, void* buf, size_t count, DataType dtype, ReduceOp op, double postscale) {
  allreduce(comm, buf, buf, count, dtype, op, postscale);
}

// ---- Allgather ---------------------------------------------------------------------------------

namespace {

// The output size from which shm_outputs is tried: below it the engine's outputs are not pooled,
// hence never shared, and the attempt would cost a barrier for nothing.
constexpr size_t kSharedOutputsMinBytes = size_t(256) << 10;

// Preference order: the first entry that can run is chosen.
const std::vector<AllgatherAlgorithm> kAllgatherTable = {
    {.name = "shm_outputs",
     .description = "each rank writes its block straight into every rank's shared output (one copy)",
     .needsShared = true,
     .needsSharedOutputs = true,
     .minBytes = kSharedOutputsMinBytes,
     .readsInput = true,
     .attempt = &allgatherSharedOutputs},
    {.name = "shm",
     .description = "shared memory rounds: every rank publishes a chunk of its block, all copy every chunk out",
     .needsShared = true,
     .readsInput = true,
     .run = &allgatherShared},
    {.name = "hierarchical",
     .description = "shared memory inside each host, ring across hosts",
     .needsHosts = true,
     .run = [](const AllgatherArgs& a) { allgatherHierarchical(a.comm, a.out, a.bytes, a.offsets); }},
    {.name = "ring",
     .description = "every block travels around the ring",
     .run = [](const AllgatherArgs& a) { allgatherRing(a.comm, a.out, a.bytes, a.offsets); }},
};

}  // namespace

const std::vector<AllgatherAlgorithm>& allgatherAlgorithms() { return kAllgatherTable; }

const AllgatherAlgorithm& allgatherChoice(Communicator& comm, size_t total, bool sharedOutputs, SharedSpace** shared) {
  // Queried in this order (shared space, then hosts only without one) so that the collective
  // first uses happen at the same point on every member.
  SharedSpace* space = comm.sharedSpace(comm.deadline());
  const bool useShared = sharedUsable(space, comm.size());
  bool outputs = false;
  if (useShared && sharedOutputs) {
    PeerMemory* peers = nullptr;
    outputs = sharedOutputsUsable(comm, &space, &peers);
  }
  const bool hosts = !useShared && comm.hierarchicalAllowed() && hierarchicalUsable(comm, true);
  *shared = useShared ? space : nullptr;
  for (const auto& algo : kAllgatherTable) {
    if ((useShared || !algo.needsShared) && (hosts || !algo.needsHosts) && (outputs || !algo.needsSharedOutputs) &&
        total >= algo.minBytes) {
      return algo;
    }
  }
  return kAllgatherTable.back();
}

bool allgatherTriesSharedOutputs(Communicator& comm, size_t totalBytes) {
  if (comm.size() < 2 || totalBytes == 0) return false;
  SharedSpace* shared = nullptr;
  return allgatherChoice(comm, totalBytes, true, &shared).needsSharedOutputs;
}

}  // namespace hvd::collectives
