#include "engine/executor.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

#include "collectives/algorithms.h"
#include "collectives/collectives.h"
#include "collectives/reduce.h"
#include "common/check.h"
#include "common/logging.h"
#include "engine/fused_layout.h"
#include "engine/negotiation.h"
#include "engine/observer.h"
#include "engine/output_pool.h"

namespace hvd::engine {
namespace {

void scale(void* buf, size_t count, DataType dtype, double factor) {
  if (factor != 1.0 && count > 0) scaleBuffer(buf, count, dtype, factor);
}

uint8_t* bytesOf(void* p) { return static_cast<uint8_t*>(p); }

// Names of the routines that are not chosen from a table, for collective events.
constexpr const char kSharedInPlace[] = "shm_inplace";
constexpr const char kSharedAllgather[] = "shm_outputs";
constexpr const char kLocal[] = "local";  // a set of one, or nothing to exchange

int64_t sum(const std::vector<size_t>& v) {
  size_t total = 0;
  for (size_t x : v) total += x;
  return static_cast<int64_t>(total);
}

// The CPU backend serves host memory for every process set.
const bool kRegistered = [] {
  registerBackend(BackendFactory{"cpu", {DeviceKind::kCpu}, [](const BackendContext& context) {
                                   HVD_LOG(Debug) << "process set " << context.set.id << ": Horovod's own data plane "
                                                  << "over the " << context.transport.name()
                                                  << " transport (HOROVOD_CPU_OPERATIONS unset or gloo)";
                                   return std::make_unique<Executor>(context.host, context.observers);
                                 }});
  return true;
}();

}  // namespace

bool Executor::supports(Kind kind) const {
  switch (kind) {
    case Kind::kAllreduce:
    case Kind::kAllgather:
    case Kind::kBroadcast:
    case Kind::kAlltoall:
    case Kind::kReducescatter:
    case Kind::kBarrier:
      return true;
    default:
      return false;
  }
}

void Executor::notify(EngineEventKind kind, const Response& r, int64_t bytes, const char* algorithm,
                      int64_t timeNs) const {
  EngineEvent e;
  e.kind = kind;
  e.timeNs = timeNs;
  e.processSet = r.params.processSet;
  e.op = r.params.kind;
  e.tensors = TensorNames::of(r.tensors);
  e.bytes = bytes;
  e.algorithm = algorithm;
  observers_.publish(e);
}

void Executor::allreduceRan(const Response& r, Communicator& comm, size_t bytes, int64_t startNs,
                            const char* algorithm) const {
  if (algorithm == nullptr) {
    // Asked only now that the allreduce ran: its shared-space and placement queries are cached,
    // so this is local (before the first allreduce of a set it would be a collective step).
    algorithm = comm.size() == 1 || bytes == 0 ? kLocal : collectives::allreduceChoice(comm, bytes).name;
  }
  if (startNs != 0) notify(EngineEventKind::kCollectiveStart, r, static_cast<int64_t>(bytes), algorithm, startNs);
  if (watching(EngineEventKind::kCollectiveEnd)) {
    notify(EngineEventKind::kCollectiveEnd, r, static_cast<int64_t>(bytes), algorithm);
  }
}

void Executor::run(const Response& r, ProcessSet& set, const std::vector<Entry*>& entries) {
  HVD_CHECK(set.comm != nullptr) << "executing a response of process set " << set.id << " on a non-member";
  Communicator& comm = *set.comm;
  switch (r.params.kind) {
    case Kind::kAllreduce: allreduce(r, comm, entries); return;
    case Kind::kAllgather: allgather(r, comm, entries); return;
    case Kind::kBroadcast: broadcast(r, set, entries); return;
    case Kind::kAlltoall: alltoall(r, comm, entries); return;
    case Kind::kReducescatter: reducescatter(r, comm, entries); return;
    case Kind::kBarrier:
      notifyIf(EngineEventKind::kCollectiveStart, r, 0, "barrier");
      collectives::barrier(comm);
      notifyIf(EngineEventKind::kCollectiveEnd, r, 0, "barrier");
      return;
    default: break;
  }
  throw Error("Executor: no data operation for response kind " + std::string(kindName(r.params.kind)));
}

void Executor::allreduce(const Response& r, Communicator& comm, const std::vector<Entry*>& entries) {
  const DataType dtype = r.params.dtype;
  const size_t esize = dataTypeSize(dtype);
  const ReduceOp op = r.params.op == ReduceOp::kAverage ? ReduceOp::kSum : r.params.op;
  const double post = r.params.op == ReduceOp::kAverage ? r.params.postscale / comm.size() : r.params.postscale;
  // Observed: allreduce events want the payload, and paths that may decline report their start
  // once they ran (a declined attempt reports nothing; the path taken instead reports itself).
  const bool observed = observers_.wantsAny(eventBit(EngineEventKind::kCollectiveStart) |
                                             eventBit(EngineEventKind::kCollectiveEnd));
  size_t payload = 0;
  if (observed) [[unlikely]] payload = fusedBytes(r);
  auto startIf = [&](bool deferred) -> int64_t {
    if (!watching(EngineEventKind::kCollectiveStart)) [[likely]] return 0;
    if (deferred) return ObserverHub::nowNs();
    notify(EngineEventKind::kCollectiveStart, r, static_cast<int64_t>(payload), nullptr);
    return 0;
  };
  if (r.tensors.size() == 1) {
    // Into the caller's output; the collective reads the input where it lies and applies the
    // prescale. A response flagged sharedInPlace (every member's output in a shared buffer) runs
    // zero-copy inside those buffers when the members can map each other's.
    const size_t count = static_cast<size_t>(r.tensors[0].numElements());
    const collectives::AllreduceOptions options{
        .op = op, .prescale = r.params.prescale, .postscale = post, .sharedOutputs = r.params.sharedInPlace};
    startIf(false);
    bool sharedOutputs;
    if (Entry* e = entries[0]) {
      sharedOutputs = collectives::allreduce(comm, e->input, e->output, count, dtype, options);
    } else {
      void* buf = host_.fusion.reserve(count * esize);
      std::memset(buf, 0, count * esize);
      sharedOutputs = collectives::allreduce(comm, buf, buf, count, dtype, options);
    }
    if (observed) [[unlikely]] allreduceRan(r, comm, payload, 0, sharedOutputs ? kSharedInPlace : nullptr);
    if (sharedOutputs && host_.sharedInPlaceOps.fetch_add(1, std::memory_order_relaxed) == 0) {
      HVD_LOG(Debug) << "shared in-place allreduce in use (first: " << count << " x " << dataTypeName(dtype)
                     << " over " << comm.size() << " ranks)";
    }
    return;
  }

  // Fused: over the tensors where they lie when the algorithm can (collectives/pieces.h), else
  // through the fusion buffer. With a prescale, or on a rank lacking a tensor (joined), the buffer
  // is used; the other ranks need not follow: the algorithm and the exchange are the same.
  if (r.params.prescale == 1.0 && std::all_of(entries.begin(), entries.end(), [](const Entry* e) { return e != nullptr; })) {
    pieces_.clear();
    for (size_t i = 0; i < r.tensors.size(); ++i) {
      pieces_.push_back({entries[i]->input, entries[i]->output, static_cast<size_t>(r.tensors[i].numElements())});
    }
    const int64_t start = startIf(true);
    if (collectives::allreducePieces(comm, pieces_, dtype, op, post)) {
      if (observed) [[unlikely]] allreduceRan(r, comm, payload, start);
      return;
    }
  }
  const size_t total = fusedBytes(r);
  uint8_t* buf = bytesOf(host_.fusion.reserve(total));
  notifyIf(EngineEventKind::kFusionCopyInStart, r, static_cast<int64_t>(total), nullptr);
  packTensors(r, entries, buf);
  const size_t count = total / esize;
  scale(buf, count, dtype, r.params.prescale);
  notifyIf(EngineEventKind::kFusionCopyInEnd, r, static_cast<int64_t>(total), nullptr);
  startIf(false);
  collectives::allreduce(comm, buf, count, dtype, op, post);
  if (observed) [[unlikely]] allreduceRan(r, comm, payload, 0);
  notifyIf(EngineEventKind::kFusionCopyOutStart, r, static_cast<int64_t>(total), nullptr);
  unpackTensors(r, entries, buf);
  notifyIf(EngineEventKind::kFusionCopyOutEnd, r, static_cast<int64_t>(total), nullptr);
}

void Executor::allgather(const Response& r, Communicator& comm, const std::vector<Entry*>& entries) {
  const int me = comm.rank();
  const AllgatherLayout layout(r, comm.size());

  // Outputs: [sum of first dims, rest...], allocated for the entries this rank has. A single
  // large tensor among members sharing a host gets a shared output, which the members write
  // into directly (the allgather "shm_outputs").
  const bool sharedTry = r.tensors.size() == 1 && collectives::allgatherTriesSharedOutputs(comm, layout.total);
  const bool sharedOutput = sharedTry && collectives::sharedOutputsEnabled();
  const std::vector<OwnedTensor*> outputs = allocateAllgatherOutputs(r, entries, *host_.outputs, sharedOutput);
  const int64_t total = static_cast<int64_t>(layout.total);

  if (r.tensors.size() == 1) {
    static const uint8_t kNothing = 0;
    const void* in = entries[0] ? entries[0]->input : &kNothing;
    uint8_t scratch = 0;
    void* out = outputs[0] ? outputs[0]->view.data : &scratch;
    // Whether the shared-output path runs is known only once it ran: its start is reported then,
    // with the time it began; the plain path reports its start before.
    int64_t start = 0;
    if (watching(EngineEventKind::kCollectiveStart)) [[unlikely]] {
      if (sharedTry) {
        start = ObserverHub::nowNs();
      } else {
        notify(EngineEventKind::kCollectiveStart, r, total, "allgatherv");
      }
    }
    const bool shared = collectives::allgatherv(comm, in, out, layout.bytesPerRank, {.sharedOutputs = sharedTry});
    const char* algorithm = shared ? kSharedAllgather : "allgatherv";
    if (start != 0) [[unlikely]] notify(EngineEventKind::kCollectiveStart, r, total, algorithm, start);
    notifyIf(EngineEventKind::kCollectiveEnd, r, total, algorithm);
    if (shared && host_.sharedAllgatherOps.fetch_add(1, std::memory_order_relaxed) == 0) {
      HVD_LOG(Debug) << "shared-output allgather in use (first: " << total << " bytes over " << comm.size()
                     << " ranks)";
    }
    return;
  }

  uint8_t* buf = bytesOf(host_.fusion.reserve(layout.total));
  const int64_t mine = static_cast<int64_t>(layout.bytesPerRank[me]);
  notifyIf(EngineEventKind::kFusionCopyInStart, r, mine, nullptr);
  packAllgather(layout, r, me, entries, buf);
  notifyIf(EngineEventKind::kFusionCopyInEnd, r, mine, nullptr);
  notifyIf(EngineEventKind::kCollectiveStart, r, total, "allgatherv");
  collectives::allgatherv(comm, buf + layout.rankOffset[me], buf, layout.bytesPerRank);
  notifyIf(EngineEventKind::kCollectiveEnd, r, total, "allgatherv");
  notifyIf(EngineEventKind::kFusionCopyOutStart, r, total, nullptr);
  unpackAllgather(layout, r, outputs, buf);
  notifyIf(EngineEventKind::kFusionCopyOutEnd, r, total, nullptr);
}

void Executor::broadcast(const Response& r, ProcessSet& set, const std::vector<Entry*>& entries) {
  const TensorInfo& t = r.tensors[0].data();
  const size_t bytes = tensorBytes(t, r.params.dtype);
  int root = setIndexOf(set.ranks, r.params.root);
  HVD_CHECK(root >= 0) << "broadcast root " << r.params.root << " is not in process set " << set.id;
  void* buf;
  if (entries[0] != nullptr) {
    buf = entries[0]->input;
  } else {
    buf = host_.fusion.reserve(bytes);
  }
  notifyIf(EngineEventKind::kCollectiveStart, r, static_cast<int64_t>(bytes), "broadcast");
  collectives::broadcast(*set.comm, buf, bytes, root);
  notifyIf(EngineEventKind::kCollectiveEnd, r, static_cast<int64_t>(bytes), "broadcast");
}

void Executor::alltoall(const Response& r, Communicator& comm, const std::vector<Entry*>& entries) {
  const TensorInfo& t = r.tensors[0].data();
  const int n = comm.size();
  const int me = comm.rank();
  const size_t rowBytes = static_cast<size_t>(t.rowElements()) * dataTypeSize(r.params.dtype);
  std::vector<size_t> sendBytes(n), recvBytes(n);
  std::vector<int32_t> received(n);
  int64_t rows = 0;
  for (int p = 0; p < n; ++p) {
    sendBytes[p] = static_cast<size_t>(t.splits[static_cast<size_t>(me) * n + p]) * rowBytes;
    received[p] = t.splits[static_cast<size_t>(p) * n + me];
    recvBytes[p] = static_cast<size_t>(received[p]) * rowBytes;
    rows += received[p];
  }
  std::vector<int64_t> shape = t.shape;
  shape[0] = rows;
  OwnedTensor out = allocateTensor(*host_.outputs, r.params.dtype, std::move(shape));
  static const uint8_t kNothing = 0;
  const void* in = entries[0] ? entries[0]->input : &kNothing;
  notifyIf(EngineEventKind::kCollectiveStart, r, sum(sendBytes), "alltoallv");
  collectives::alltoallv(comm, in, sendBytes, out.view.data, recvBytes);
  notifyIf(EngineEventKind::kCollectiveEnd, r, sum(sendBytes), "alltoallv");
  if (Entry* e = entries[0]) {
    e->work->output(e->member) = std::move(out);
    e->work->setReceivedSplits(std::move(received));
  }
}

void Executor::reducescatter(const Response& r, Communicator& comm, const std::vector<Entry*>& entries) {
  const DataType dtype = r.params.dtype;
  const size_t esize = dataTypeSize(dtype);
  const int n = comm.size();
  const int me = comm.rank();
  // Average was folded into postscale at enqueue; the collective always sums.
  const ReduceOp op = ReduceOp::kSum;

  const std::vector<size_t> counts = reducescatterCounts(r, n);

  if (r.tensors.size() == 1 && r.params.prescale == 1.0 && entries[0] != nullptr) {
    const int64_t payload = static_cast<int64_t>(tensorBytes(r.tensors[0], dtype));
    notifyIf(EngineEventKind::kCollectiveStart, r, payload, "reducescatter");
    collectives::reducescatter(comm, entries[0]->input, entries[0]->output, counts, dtype, op);
    notifyIf(EngineEventKind::kCollectiveEnd, r, payload, "reducescatter");
    scale(entries[0]->output, counts[me], dtype, r.params.postscale);
    return;
  }

  // Through the fusion buffer (fused_layout.h); the result block follows the input region.
  size_t total = 0;
  for (const auto& t : r.tensors) total += static_cast<size_t>(t.numElements());
  uint8_t* buf = bytesOf(host_.fusion.reserve((total + counts[me]) * esize));
  uint8_t* result = buf + total * esize;
  const int64_t payload = static_cast<int64_t>(total * esize);
  notifyIf(EngineEventKind::kFusionCopyInStart, r, payload, nullptr);
  packReducescatter(r, n, entries, buf);
  scale(buf, total, dtype, r.params.prescale);
  notifyIf(EngineEventKind::kFusionCopyInEnd, r, payload, nullptr);
  notifyIf(EngineEventKind::kCollectiveStart, r, payload, "reducescatter");
  collectives::reducescatter(comm, buf, result, counts, dtype, op);
  notifyIf(EngineEventKind::kCollectiveEnd, r, payload, "reducescatter");
  scale(result, counts[me], dtype, r.params.postscale);
  const int64_t outBytes = static_cast<int64_t>(counts[me] * esize);
  notifyIf(EngineEventKind::kFusionCopyOutStart, r, outBytes, nullptr);
  unpackReducescatter(r, n, me, entries, result);
  notifyIf(EngineEventKind::kFusionCopyOutEnd, r, outBytes, nullptr);
}

}  // namespace hvd::engine
