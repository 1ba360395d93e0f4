#include "backends/cpu/cpu_backend.h"

#include <algorithm>
#include <cstring>
#include <memory>

#include "collectives/algorithms.h"
#include "common/logging.h"
#include "engine/fused_layout.h"
#include "engine/negotiation.h"
#include "engine/output_pool.h"
#include "engine/work.h"

namespace hvd::backends {
namespace {

using engine::AllgatherLayout;
using engine::ObserverHub;

// Names of the routines that are not chosen from a table, for events and counters.
constexpr const char kSharedAllgather[] = "shm_outputs";
constexpr const char kSharedInPlace[] = "shm_inplace";  // the allreduce table's name for it

int64_t sum(const std::vector<size_t>& v) {
  size_t total = 0;
  for (size_t x : v) total += x;
  return static_cast<int64_t>(total);
}

void checkAllreduceAlgorithm(const engine::Config&) {
  collectives::checkAllreduceAlgorithmName(collectives::allreduceAlgorithmParam().get());
}

// The CPU backend serves host memory for every process set.
const bool kRegistered = [] {
  engine::BackendFactory factory;
  factory.name = "cpu";
  factory.devices = {DeviceKind::kCpu};
  factory.make = [](const BackendContext& context) -> std::unique_ptr<engine::CollectiveBackend> {
    HVD_LOG(Debug) << "process set " << context.set.id << ": Horovod's own data plane over the "
                   << context.transport.name() << " transport (HOROVOD_CPU_OPERATIONS unset or gloo)";
    return std::make_unique<CpuBackend>(context);
  };
  // HOROVOD_ALLREDUCE_ALGO naming no algorithm fails init.
  factory.checkConfig = checkAllreduceAlgorithm;
  engine::registerBackend(std::move(factory));
  return true;
}();

}  // namespace

CpuBackend::CpuBackend(const BackendContext& context)
    : HostBackend("cpu", context), comm_(context.transport, context.set.ranks, context.config.timeout) {
  applyKnobs(context.knobs);
}

void CpuBackend::applyKnobs(const engine::Knobs& knobs) {
  comm_.setAllreduceCrossover(static_cast<size_t>(std::max<int64_t>(0, knobs.allreduceCrossoverBytes)));
  comm_.setHierarchicalAllowed(knobs.hierarchical);
}

void CpuBackend::barrier(const Response& r, ProcessSet&) {
  started(r, 0, "barrier");
  collectives::barrier(comm_);
  ended(r, 0, "barrier");
}

void CpuBackend::allreduce(const Response& r, ProcessSet&, const std::vector<Entry*>& entries) {
  Communicator& comm = comm_;
  const DataType dtype = r.params.dtype;
  const size_t esize = dataTypeSize(dtype);
  const ReduceOp op = r.params.op == ReduceOp::kAverage ? ReduceOp::kSum : r.params.op;
  const double post = r.params.op == ReduceOp::kAverage ? r.params.postscale / comm.size() : r.params.postscale;
  // Events want the payload; the algorithm is known once the allreduce ran (asking before the
  // first allreduce of a set would itself be a collective step), so a path that may decline
  // reports its start then, with the time it began (a declined attempt reports nothing).
  const bool observed = observers_.wantsAny(engine::eventBit(EngineEventKind::kCollectiveStart) |
                                            engine::eventBit(EngineEventKind::kCollectiveEnd));
  size_t payload = 0;
  if (observed) [[unlikely]]
    payload = engine::fusedBytes(r);
  const char* ran = nullptr;
  if (r.tensors.size() == 1) {
    // Into the caller's output; the collective reads the input where it lies and applies the
    // prescale. A response flagged sharedInPlace (every member's output in a shared buffer) runs
    // zero-copy inside those buffers when the members can map each other's.
    const size_t count = static_cast<size_t>(r.tensors[0].numElements());
    const collectives::AllreduceOptions options{.op = op,
                                                .prescale = r.params.prescale,
                                                .postscale = post,
                                                .sharedOutputs = r.params.sharedInPlace,
                                                .ran = &ran};
    started(r, static_cast<int64_t>(payload), nullptr);
    bool sharedOutputs;
    if (Entry* e = entries[0]) {
      sharedOutputs = collectives::allreduce(comm, e->input, e->output, count, dtype, options);
    } else {
      void* buf = host_.fusion.reserve(count * esize);
      std::memset(buf, 0, count * esize);
      sharedOutputs = collectives::allreduce(comm, buf, buf, count, dtype, options);
    }
    ended(r, static_cast<int64_t>(payload), ran);
    if (sharedOutputs && !loggedSharedInPlace_) [[unlikely]] {
      loggedSharedInPlace_ = true;
      HVD_LOG(Debug) << "shared in-place allreduce (" << kSharedInPlace << ") in use on process set "
                     << r.params.processSet << " (first: " << count << " x " << dataTypeName(dtype) << " over "
                     << comm.size() << " ranks)";
    }
    return;
  }

  // Fused: over the tensors where they lie when the algorithm can (collectives/pieces.h), else
  // through the fusion buffer. With a prescale, or on a rank lacking a tensor (joined), the buffer
  // is used; the other ranks need not follow: the algorithm and the exchange are the same.
  if (r.params.prescale == 1.0 &&
      std::all_of(entries.begin(), entries.end(), [](const Entry* e) { return e != nullptr; })) {
    pieces_.clear();
    for (size_t i = 0; i < r.tensors.size(); ++i) {
      pieces_.push_back({entries[i]->input, entries[i]->output, static_cast<size_t>(r.tensors[i].numElements())});
    }
    const int64_t start = watching(EngineEventKind::kCollectiveStart) ? ObserverHub::nowNs() : 0;
    ran = collectives::allreducePieces(comm, pieces_, dtype, op, post);
    if (ran != nullptr) {
      if (start != 0) [[unlikely]]
        notify(EngineEventKind::kCollectiveStart, r, static_cast<int64_t>(payload), ran, start);
      ended(r, static_cast<int64_t>(payload), ran);
      return;
    }
  }
  const size_t total = engine::fusedBytes(r);
  uint8_t* buf = packFused(r, entries, total, dtype);
  const size_t count = total / esize;
  started(r, static_cast<int64_t>(payload), nullptr);
  collectives::allreduce(comm, buf, buf, count, dtype, {.op = op, .postscale = post, .ran = &ran});
  ended(r, static_cast<int64_t>(payload), ran);
  unpackFused(r, entries, buf, total);
}

void CpuBackend::adasum(const Response& r, ProcessSet&, const std::vector<Entry*>& entries) {
  collectives::CommunicatorExchange peers(comm_);
  runAdasum(r, entries, peers, "adasum");
}

void CpuBackend::allgather(const Response& r, ProcessSet&, const std::vector<Entry*>& entries) {
  Communicator& comm = comm_;
  const int me = comm.rank();
  const AllgatherLayout layout(r, comm.size());

  // Outputs: [sum of first dims, rest...], allocated for the entries this rank has. A single
  // large tensor among members sharing a host gets a shared output, which the members write
  // into directly (the allgather "shm_outputs").
  const bool sharedTry = r.tensors.size() == 1 && collectives::allgatherTriesSharedOutputs(comm, layout.total);
  const bool sharedOutput = sharedTry && collectives::sharedOutputsEnabled();
  const std::vector<OwnedTensor*> outputs = engine::allocateAllgatherOutputs(r, entries, *host_.outputs, sharedOutput);
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
    if (start != 0) [[unlikely]]
      notify(EngineEventKind::kCollectiveStart, r, total, algorithm, start);
    ended(r, total, algorithm);
    if (shared && !loggedSharedAllgather_) [[unlikely]] {
      loggedSharedAllgather_ = true;
      HVD_LOG(Debug) << "shared-output allgather (" << kSharedAllgather << ") in use on process set "
                     << r.params.processSet << " (first: " << total << " bytes over " << comm.size() << " ranks)";
    }
    return;
  }

  uint8_t* buf = bytesOf(host_.fusion.reserve(layout.total));
  const int64_t mine = static_cast<int64_t>(layout.bytesPerRank[me]);
  notifyIf(EngineEventKind::kFusionCopyInStart, r, mine, nullptr);
  engine::packAllgather(layout, r, me, entries, buf);
  notifyIf(EngineEventKind::kFusionCopyInEnd, r, mine, nullptr);
  started(r, total, "allgatherv");
  collectives::allgatherv(comm, buf + layout.rankOffset[me], buf, layout.bytesPerRank);
  ended(r, total, "allgatherv");
  notifyIf(EngineEventKind::kFusionCopyOutStart, r, total, nullptr);
  engine::unpackAllgather(layout, r, outputs, buf);
  notifyIf(EngineEventKind::kFusionCopyOutEnd, r, total, nullptr);
}

void CpuBackend::broadcast(const Response& r, ProcessSet& set, const std::vector<Entry*>& entries) {
  const engine::TensorInfo& t = r.tensors[0].data();
  const size_t bytes = engine::tensorBytes(t, r.params.dtype);
  const int root = engine::setIndexOf(set.ranks, r.params.root);
  HVD_CHECK(root >= 0) << "broadcast root " << r.params.root << " is not in process set " << set.id;
  void* buf = entries[0] != nullptr ? entries[0]->input : host_.fusion.reserve(bytes);
  started(r, static_cast<int64_t>(bytes), "broadcast");
  collectives::broadcast(comm_, buf, bytes, root);
  ended(r, static_cast<int64_t>(bytes), "broadcast");
}

void CpuBackend::alltoall(const Response& r, ProcessSet&, const std::vector<Entry*>& entries) {
  const engine::TensorInfo& t = r.tensors[0].data();
  const int n = comm_.size();
  const int me = comm_.rank();
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
  OwnedTensor out = engine::allocateTensor(*host_.outputs, r.params.dtype, std::move(shape));
  static const uint8_t kNothing = 0;
  const void* in = entries[0] ? entries[0]->input : &kNothing;
  started(r, sum(sendBytes), "alltoallv");
  collectives::alltoallv(comm_, in, sendBytes, out.view.data, recvBytes);
  ended(r, sum(sendBytes), "alltoallv");
  if (Entry* e = entries[0]) {
    e->work->output(e->member) = std::move(out);
    e->work->setReceivedSplits(std::move(received));
  }
}

void CpuBackend::reducescatter(const Response& r, ProcessSet&, const std::vector<Entry*>& entries) {
  const DataType dtype = r.params.dtype;
  const size_t esize = dataTypeSize(dtype);
  const int n = comm_.size();
  const int me = comm_.rank();
  // Average was folded into postscale at enqueue; the collective always sums.
  const ReduceOp op = ReduceOp::kSum;

  const std::vector<size_t> counts = engine::reducescatterCounts(r, n);

  if (r.tensors.size() == 1 && r.params.prescale == 1.0 && entries[0] != nullptr) {
    const int64_t payload = static_cast<int64_t>(engine::tensorBytes(r.tensors[0], dtype));
    started(r, payload, "reducescatter");
    collectives::reducescatter(comm_, entries[0]->input, entries[0]->output, counts, dtype, op);
    ended(r, payload, "reducescatter");
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
  engine::packReducescatter(r, n, entries, buf);
  scale(buf, total, dtype, r.params.prescale);
  notifyIf(EngineEventKind::kFusionCopyInEnd, r, payload, nullptr);
  started(r, payload, "reducescatter");
  collectives::reducescatter(comm_, buf, result, counts, dtype, op);
  ended(r, payload, "reducescatter");
  scale(result, counts[me], dtype, r.params.postscale);
  const int64_t outBytes = static_cast<int64_t>(counts[me] * esize);
  notifyIf(EngineEventKind::kFusionCopyOutStart, r, outBytes, nullptr);
  engine::unpackReducescatter(r, n, me, entries, result);
  notifyIf(EngineEventKind::kFusionCopyOutEnd, r, outBytes, nullptr);
}

}  // namespace hvd::backends
