#include "backends/cuda/staged_backend.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "backends/cuda/cuda_library.h"
#include "backends/cuda/gpu_operations.h"
#include "collectives/adasum_hosts.h"
#include "collectives/collectives.h"
#include "common/logging.h"
#include "engine/fused_layout.h"
#include "engine/negotiation.h"
#include "engine/output_pool.h"
#include "engine/work.h"

namespace hvd::backends {
namespace {

using cuda::DevicePiece;
using Phase = cuda::StagingPipeline::Phase;

// Algorithm names for events and counters: the host algorithm runs inside the staging.
constexpr const char kStagedAllgather[] = "staged_allgatherv";
constexpr const char kStagedBroadcast[] = "staged_broadcast";
constexpr const char kStagedAlltoall[] = "staged_alltoallv";
constexpr const char kStagedReducescatter[] = "staged_reducescatter";
constexpr const char kStagedBarrier[] = "staged_barrier";
constexpr const char kStagedAdasum[] = "staged_adasum";

const bool kRegistered = [] {
  engine::BackendFactory factory;
  factory.name = cuda::kStagedBackendName;
  factory.devices = {DeviceKind::kCuda};
  factory.make = [](const BackendContext& context) -> std::unique_ptr<engine::CollectiveBackend> {
    // Every member takes part in the agreement, which also fails when the runtime is missing.
    if (cuda::agreeGpuOperations(context) != engine::GpuOperations::kHost) return nullptr;
    const cuda::CudaLibraries& libraries = cuda::cudaLibraries();
    HVD_LOG(Debug) << "process set " << context.set.id << ": " << deviceName(context.device)
                   << " collectives staged through host memory over the " << context.transport.name() << " transport";
    return std::make_unique<StagedBackend>(context, *libraries.api);
  };
  // Asked before the NCCL backend: it makes the choice for both (gpu_operations.h) and declines
  // when the set agreed on NCCL, so the NCCL factory (priority below 20) needs no agreement.
  factory.priority = 20;
  factory.checkConfig = cuda::checkGpuOperations;
  engine::registerBackend(std::move(factory));
  return true;
}();

size_t chunkOf(int64_t bytes, DataType dtype) {
  if (bytes <= 0) return 0;
  const size_t esize = dataTypeSize(dtype);
  return std::max(esize, static_cast<size_t>(bytes) / esize * esize);
}

}  // namespace

StagedBackend::StagedBackend(const BackendContext& context, const cuda::CudaApi& api)
    : HostBackend(cuda::kStagedBackendName, context),
      api_(api),
      device_{DeviceKind::kCuda, context.device.index, nullptr},
      chunkBytes_(static_cast<size_t>(std::max<int64_t>(0, context.config.gpuStagedChunkBytes))),
      comm_(context.transport, context.set.ranks, context.config.timeout),
      pipeline_(api, context.device.index),
      staging_(api),
      outputs_(api, context.device.index,
               static_cast<size_t>(std::max<int64_t>(0, engine::outputPoolBytesParam().get()))) {
  applyKnobs(context.knobs);
}

void StagedBackend::applyKnobs(const engine::Knobs& knobs) {
  comm_.setAllreduceCrossover(static_cast<size_t>(std::max<int64_t>(0, knobs.allreduceCrossoverBytes)));
  comm_.setHierarchicalAllowed(knobs.hierarchical);
}

void StagedBackend::afterProducers(const std::vector<Entry*>& entries) {
  streams_.clear();
  for (const Entry* e : entries) {
    if (e == nullptr || std::find(streams_.begin(), streams_.end(), e->stream) != streams_.end()) continue;
    streams_.push_back(e->stream);
    pipeline_.after(e->stream);
  }
}

uint8_t* StagedBackend::staging(size_t bytes) {
  staging_.reserve(std::max<size_t>(bytes, 1));
  return bytesOf(staging_.data());
}

std::function<void(Phase)> StagedBackend::copyEvents(const Response& r, int64_t bytes) {
  constexpr uint32_t kCopies =
      engine::eventBit(EngineEventKind::kFusionCopyInStart) | engine::eventBit(EngineEventKind::kFusionCopyInEnd) |
      engine::eventBit(EngineEventKind::kFusionCopyOutStart) | engine::eventBit(EngineEventKind::kFusionCopyOutEnd);
  if (!observers_.wantsAny(kCopies)) [[likely]]
    return {};
  return [this, &r, bytes](Phase phase) {
    static constexpr EngineEventKind kKinds[] = {EngineEventKind::kFusionCopyInStart, EngineEventKind::kFusionCopyInEnd,
                                                 EngineEventKind::kFusionCopyOutStart,
                                                 EngineEventKind::kFusionCopyOutEnd};
    notifyIf(kKinds[static_cast<int>(phase)], r, bytes, nullptr);
  };
}

void StagedBackend::barrier(const Response& r, ProcessSet&) {
  started(r, 0, kStagedBarrier);
  collectives::barrier(comm_);
  ended(r, 0, kStagedBarrier);
}

void StagedBackend::allreduce(const Response& r, ProcessSet&, const std::vector<Entry*>& entries) {
  cuda::DeviceGuard guard(api_, device_.index);
  const DataType dtype = r.params.dtype;
  const size_t esize = dataTypeSize(dtype);
  const ReduceOp op = r.params.op == ReduceOp::kAverage ? ReduceOp::kSum : r.params.op;
  const double post = r.params.op == ReduceOp::kAverage ? r.params.postscale / comm_.size() : r.params.postscale;
  const size_t total = engine::fusedBytes(r);
  in_.clear();
  out_.clear();
  engine::forEachFusedTensor(r, [&](size_t offset, size_t i, size_t, size_t bytes) {
    Entry* e = entries[i];
    in_.push_back({offset, e != nullptr ? e->input : nullptr, bytes});
    out_.push_back({offset, e != nullptr ? e->output : nullptr, bytes});
  });
  uint8_t* host = staging(total);
  afterProducers(entries);
  const char* ran = nullptr;
  started(r, static_cast<int64_t>(total), nullptr);
  pipeline_.run(
      host, total, chunkOf(static_cast<int64_t>(chunkBytes_), dtype), in_, out_,
      [&](size_t begin, size_t end) {
        collectives::allreduce(comm_, host + begin, host + begin, (end - begin) / esize, dtype,
                               {.op = op, .prescale = r.params.prescale, .postscale = post, .ran = &ran});
      },
      copyEvents(r, static_cast<int64_t>(total)));
  ended(r, static_cast<int64_t>(total), ran != nullptr ? ran : collectives::kLocalAllreduce);
}

void StagedBackend::adasum(const Response& r, ProcessSet& set, const std::vector<Entry*>& entries) {
  cuda::DeviceGuard guard(api_, device_.index);
  const Communicator::HostLayout& hosts = comm_.hosts();
  // Equal on every member (the host layout is): the response fails alike everywhere.
  if (std::string why = collectives::gpuAdasumUnsupported(hosts, set.id); !why.empty()) throw MismatchError(why);
  const DataType dtype = r.params.dtype;
  const size_t esize = dataTypeSize(dtype);
  const int localSize = hosts.localSize();
  std::vector<size_t> counts;
  counts.reserve(r.tensors.size());
  for (const auto& t : r.tensors) counts.push_back(static_cast<size_t>(t.numElements()));
  const size_t total = engine::fusedBytes(r);
  const size_t count = total / esize;
  const size_t shard = collectives::adasumShardLength(count, localSize);
  const size_t shardBytes = shard * esize, paddedBytes = shardBytes * static_cast<size_t>(localSize);
  in_.clear();
  out_.clear();
  engine::forEachFusedTensor(r, [&](size_t offset, size_t i, size_t, size_t bytes) {
    Entry* e = entries[i];
    in_.push_back({offset, e != nullptr ? e->input : nullptr, bytes});  // a joined rank adds zeros
    out_.push_back({offset, e != nullptr ? e->output : nullptr, bytes});
  });
  if (paddedBytes > total) in_.push_back({total, nullptr, paddedBytes - total});
  // The host's buffer (padded to equal shards), then this member's shard of its sum.
  uint8_t* host = staging(paddedBytes + shardBytes);
  uint8_t* mine = localSize > 1 ? host + paddedBytes : host;
  afterProducers(entries);
  started(r, static_cast<int64_t>(total), kStagedAdasum);
  pipeline_.run(
      host, paddedBytes + shardBytes, 0, in_, out_,
      [&](size_t, size_t) {
        scale(host, count, dtype, r.params.prescale);
        if (localSize > 1 && shard > 0) {
          Communicator& local = hosts.count == 1 ? comm_ : comm_.subset(hosts.members[hosts.host]);
          collectives::reducescatter(local, host, mine, std::vector<size_t>(localSize, shard), dtype, ReduceOp::kSum);
          collectives::adasumAcrossHosts(comm_, mine, collectives::adasumShardCounts(counts, shard, hosts.localRank),
                                         dtype, adasumPairScratch_);
          collectives::allgatherv(local, mine, host, std::vector<size_t>(localSize, shardBytes));
        } else if (shard > 0) {
          collectives::adasumAcrossHosts(comm_, mine, collectives::adasumShardCounts(counts, shard, 0), dtype,
                                         adasumPairScratch_);
        }
        // The average inside each host (Adasum is invariant to a common scale: done last, as Horovod).
        scale(host, count, dtype, r.params.postscale / localSize);
      },
      copyEvents(r, static_cast<int64_t>(total)));
  ended(r, static_cast<int64_t>(total), kStagedAdasum);
}

void StagedBackend::allgather(const Response& r, ProcessSet&, const std::vector<Entry*>& entries) {
  cuda::DeviceGuard guard(api_, device_.index);
  const int me = comm_.rank();
  const engine::AllgatherLayout layout(r, comm_.size());
  const std::vector<OwnedTensor*> outputs =
      engine::allocateAllgatherOutputs(r, entries, [&](const Entry& e, DataType dtype, std::vector<int64_t> shape) {
        return outputs_.allocate(dtype, std::move(shape), pipeline_.deviceStream(),
                                 static_cast<cudaStream_t>(e.stream));
      });
  in_.clear();
  out_.clear();
  engine::forEachAllgatherInput(layout, r, me, [&](size_t offset, size_t i, size_t, size_t bytes) {
    if (entries[i] != nullptr) in_.push_back({offset, entries[i]->input, bytes});
  });
  engine::forEachAllgatherOutput(layout, r, [&](size_t offset, size_t i, size_t outOffset, size_t bytes) {
    if (outputs[i] != nullptr) out_.push_back({offset, bytesOf(outputs[i]->view.data) + outOffset, bytes});
  });
  uint8_t* host = staging(layout.total);
  afterProducers(entries);
  const int64_t total = static_cast<int64_t>(layout.total);
  started(r, total, kStagedAllgather);
  pipeline_.run(
      host, layout.total, 0, in_, out_,
      [&](size_t, size_t) { collectives::allgatherv(comm_, host + layout.rankOffset[me], host, layout.bytesPerRank); },
      copyEvents(r, total));
  ended(r, total, kStagedAllgather);
}

void StagedBackend::broadcast(const Response& r, ProcessSet& set, const std::vector<Entry*>& entries) {
  cuda::DeviceGuard guard(api_, device_.index);
  const size_t bytes = engine::tensorBytes(r.tensors[0].data(), r.params.dtype);
  const int root = engine::setIndexOf(set.ranks, r.params.root);
  HVD_CHECK(root >= 0) << "broadcast root " << r.params.root << " is not in process set " << set.id;
  in_.clear();
  out_.clear();
  // The root sends its tensor; the others receive into theirs (a rank without it only relays).
  if (Entry* e = entries[0]) (comm_.rank() == root ? in_ : out_).push_back({0, e->input, bytes});
  uint8_t* host = staging(bytes);
  afterProducers(entries);
  started(r, static_cast<int64_t>(bytes), kStagedBroadcast);
  pipeline_.run(
      host, bytes, chunkBytes_, in_, out_,
      [&](size_t begin, size_t end) { collectives::broadcast(comm_, host + begin, end - begin, root); },
      copyEvents(r, static_cast<int64_t>(bytes)));
  ended(r, static_cast<int64_t>(bytes), kStagedBroadcast);
}

void StagedBackend::alltoall(const Response& r, ProcessSet&, const std::vector<Entry*>& entries) {
  cuda::DeviceGuard guard(api_, device_.index);
  const engine::TensorInfo& t = r.tensors[0].data();
  const int n = comm_.size();
  const int me = comm_.rank();
  const size_t rowBytes = static_cast<size_t>(t.rowElements()) * dataTypeSize(r.params.dtype);
  std::vector<size_t> sendBytes(n), recvBytes(n);
  std::vector<int32_t> received(n);
  size_t sendTotal = 0, recvTotal = 0;
  int64_t rows = 0;
  for (int p = 0; p < n; ++p) {
    sendBytes[p] = static_cast<size_t>(t.splits[static_cast<size_t>(me) * n + p]) * rowBytes;
    received[p] = t.splits[static_cast<size_t>(p) * n + me];
    recvBytes[p] = static_cast<size_t>(received[p]) * rowBytes;
    sendTotal += sendBytes[p];
    recvTotal += recvBytes[p];
    rows += received[p];
  }
  std::vector<int64_t> shape = t.shape;
  shape[0] = rows;
  Entry* e = entries[0];
  OwnedTensor out;
  if (e != nullptr) {
    out = outputs_.allocate(r.params.dtype, std::move(shape), pipeline_.deviceStream(),
                            static_cast<cudaStream_t>(e->stream));
  }
  in_.clear();
  out_.clear();
  if (e != nullptr) {
    in_.push_back({0, e->input, sendTotal});
    out_.push_back({sendTotal, out.view.data, recvTotal});
  }
  uint8_t* host = staging(sendTotal + recvTotal);
  afterProducers(entries);
  started(r, static_cast<int64_t>(sendTotal), kStagedAlltoall);
  pipeline_.run(
      host, sendTotal + recvTotal, 0, in_, out_,
      [&](size_t, size_t) { collectives::alltoallv(comm_, host, sendBytes, host + sendTotal, recvBytes); },
      copyEvents(r, static_cast<int64_t>(sendTotal)));
  ended(r, static_cast<int64_t>(sendTotal), kStagedAlltoall);
  if (e != nullptr) {
    e->work->output(e->member) = std::move(out);
    e->work->setReceivedSplits(std::move(received));
  }
}

void StagedBackend::reducescatter(const Response& r, ProcessSet&, const std::vector<Entry*>& entries) {
  cuda::DeviceGuard guard(api_, device_.index);
  const DataType dtype = r.params.dtype;
  const size_t esize = dataTypeSize(dtype);
  const int n = comm_.size();
  const int me = comm_.rank();
  const std::vector<size_t> counts = engine::reducescatterCounts(r, n);
  size_t total = 0;
  for (size_t c : counts) total += c;
  const size_t inBytes = total * esize;
  in_.clear();
  out_.clear();
  engine::forEachReducescatterPiece(r, n, [&](size_t offset, size_t i, size_t inputOffset, size_t bytes) {
    Entry* e = entries[i];
    in_.push_back({offset, e != nullptr ? bytesOf(e->input) + inputOffset : nullptr, bytes});
  });
  engine::forEachReducescatterResult(r, n, me, [&](size_t offset, size_t i, size_t, size_t bytes) {
    if (entries[i] != nullptr) out_.push_back({inBytes + offset, entries[i]->output, bytes});
  });
  uint8_t* host = staging(inBytes + counts[me] * esize);
  afterProducers(entries);
  const int64_t payload = static_cast<int64_t>(inBytes);
  started(r, payload, kStagedReducescatter);
  // Average was folded into postscale at enqueue; the collective always sums.
  pipeline_.run(
      host, inBytes + counts[me] * esize, 0, in_, out_,
      [&](size_t, size_t) {
        scale(host, total, dtype, r.params.prescale);
        collectives::reducescatter(comm_, host, host + inBytes, counts, dtype, ReduceOp::kSum);
        scale(host + inBytes, counts[me], dtype, r.params.postscale);
      },
      copyEvents(r, payload));
  ended(r, payload, kStagedReducescatter);
}

}  // namespace hvd::backends
