#include "backends/cuda/nccl_backend.h"

#include <algorithm>
#include <cstring>

#include "backends/cuda/device_wide.h"
#include "collectives/collectives.h"
#include "collectives/reduce.h"
#include "common/logging.h"
#include "engine/fused_layout.h"
#include "engine/negotiation.h"
#include "engine/output_pool.h"
#include "engine/work.h"

namespace hvd::cuda {
namespace {

using engine::EngineEventKind;
using engine::Kind;

// NCCL's type for reducing `dtype`; int16/uint16 have none (Horovod refuses them too).
ncclDataType_t reductionType(DataType dtype) {
  switch (dtype) {
    case DataType::kUInt8:
    case DataType::kBool: return ncclUint8;
    case DataType::kInt8: return ncclInt8;
    case DataType::kInt32: return ncclInt32;
    case DataType::kInt64: return ncclInt64;
    case DataType::kFloat16: return ncclFloat16;
    case DataType::kBFloat16: return ncclBfloat16;
    case DataType::kFloat32: return ncclFloat32;
    case DataType::kFloat64: return ncclFloat64;
    default: break;
  }
  throw Error("Type " + std::string(dataTypeName(dtype)) + " is not supported in NCCL mode.");
}

// bool is one byte of 0/1: or is max, and is min.
ncclRedOp_t reductionOp(ReduceOp op, DataType dtype) {
  const bool isBool = dtype == DataType::kBool;
  switch (op) {
    case ReduceOp::kSum: return isBool ? ncclMax : ncclSum;
    case ReduceOp::kAverage: return ncclAvg;
    case ReduceOp::kMin: return ncclMin;
    case ReduceOp::kMax: return ncclMax;
    case ReduceOp::kProduct: return isBool ? ncclMin : ncclProd;
    default: break;
  }
  throw Error("The nccl collective backend has no elementwise reduction for this operator.");
}

uint8_t* at(void* base, size_t offset) { return static_cast<uint8_t*>(base) + offset; }
const uint8_t* at(const void* base, size_t offset) { return static_cast<const uint8_t*>(base) + offset; }

}  // namespace

NcclBackend::NcclBackend(const CudaApi& api, const BackendContext& context, int streams)
    : HostBackendBase("nccl", context, engine::Completion::kDeferred),
      api_(api),
      device_(context.device.index),
      hostComm_(context.transport, context.set.ranks, context.config.timeout),
      producerDone_(api, context.device.index),
      outputs_(api, context.device.index,
               static_cast<size_t>(std::max<int64_t>(0, engine::outputPoolBytesParam().get()))),
      adasumHost_(api),
      adasumCopied_(api, context.device.index),
      batchCopies_(context.config.gpuBatchD2DMemcopies) {
  DeviceGuard guard(api_, device_);
  for (int i = 0; i < std::max(streams, 1); ++i) lanes_.push_back(std::make_unique<Lane>(api_, device_));
  // The set's first member makes the id; the others get it over the host collectives.
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  if (hostComm_.rank() == 0) check(api_.nccl->getUniqueId(&id), "ncclGetUniqueId");
  collectives::broadcast(hostComm_, &id, sizeof(id), 0);
  check(api_.nccl->commInitRank(&comm_, hostComm_.size(), id, hostComm_.rank()), "ncclCommInitRank");
  std::vector<ncclComm_t> comms{comm_};
  if (context.config.gpuHierarchicalAllreduce) {
    std::string why;
    if (hierarchyPossible(hostComm_.hosts(), &why)) {
      hierarchy_ = makeNcclHierarchy(api_, device_, hostComm_);
      comms.push_back(hierarchy_->local);
      comms.push_back(hierarchy_->cross);
    } else if (hostComm_.rank() == 0) {
      HVD_LOG(Warning) << "HOROVOD_HIERARCHICAL_ALLREDUCE: process set " << context.set.id
                       << " runs flat NCCL allreduces: " << why << " (docs/gpu.md).";
    }
  }
  finalizer_ = std::make_unique<NcclFinalizer>(api_, device_, std::move(comms), context.wakeEngine);
  finalizer_->setDrainTimeout(context.config.timeout);
}

NcclBackend::~NcclBackend() {
  // Completes what is pending (or aborts the communicator after the job's timeout), then waits
  // for the streams before their buffers go.
  finalizer_->stop();
  const bool aborted = finalizer_->commAborted();
  try {
    DeviceGuard guard(api_, device_);
    for (auto& lane : lanes_) lane->stream.synchronize();
  } catch (const std::exception& e) {
    HVD_LOG(Warning) << "NCCL backend on GPU " << device_ << ": " << e.what();
  }
  finalizer_.reset();
  if (!aborted && hierarchy_) destroyNcclHierarchy(api_, device_, *hierarchy_);
  if (!aborted && adasumHierarchy_) destroyNcclHierarchy(api_, device_, *adasumHierarchy_);
  if (!aborted && comm_ != nullptr) {
    const ncclResult_t status = api_.nccl->commDestroy(comm_);
    if (status != ncclSuccess) {
      HVD_LOG(Warning) << "ncclCommDestroy on GPU " << device_ << ": " << api_.nccl->getErrorString(status);
    }
  }
}

void NcclBackend::abort(std::exception_ptr error) { finalizer_->abort(error); }

void NcclBackend::run(const Response& r, ProcessSet& set, const std::vector<Entry*>& entries) {
  DeviceGuard guard(api_, device_);
  begun_ = false;
  try {
    switch (r.params.kind) {
      case Kind::kAllreduce: allreduce(r, set, entries); return;
      case Kind::kAdasum: adasum(r, set, entries); return;
      case Kind::kAllgather: allgather(r, set, entries); return;
      case Kind::kBroadcast: broadcast(r, set, entries); return;
      case Kind::kAlltoall: alltoall(r, set, entries); return;
      case Kind::kReducescatter: reducescatter(r, set, entries); return;
      case Kind::kBarrier: barrier(r, set, entries); return;
      default: break;
    }
  } catch (const Error& e) {
    // Before begin() the checks are the same on every rank (dtype, scale factors): the response
    // fails everywhere alike. After it, this rank's part is missing from a collective the others
    // may have enqueued, which would wait for it forever: the failure ends the job instead.
    const ErrorCode code = e.code();
    if (!begun_ || code == ErrorCode::kPeerLost || code == ErrorCode::kTimeout || code == ErrorCode::kAborted) throw;
    throw Aborted(std::string(e.what()) + " (on rank " + std::to_string(hostComm_.globalRank(hostComm_.rank())) +
                  ", after its peers may have started the collective: Horovod stops rather than let them wait)");
  }
  throw Error("The nccl collective backend has no data operation for response kind " +
              std::string(engine::kindName(r.params.kind)));
}

NcclBackend::Lane& NcclBackend::begin(const std::vector<Entry*>& entries) {
  if (std::exception_ptr failed = finalizer_->failure()) std::rethrow_exception(failed);
  begun_ = true;
  Lane& lane = *lanes_[nextLane_];
  nextLane_ = (nextLane_ + 1) % lanes_.size();
  // Order after every producer stream (usually one: the framework's current stream), or after
  // the whole device for tensors whose streams are unknown (device_wide.h).
  bool ordered = false;
  void* last = nullptr;
  for (Entry* e : entries) {
    if (e == nullptr) continue;
    if (e->request.params.device != engine::deviceId(Device{DeviceKind::kCuda, device_, nullptr})) {
      throw InvalidArgument("The nccl collective backend of GPU " + std::to_string(device_) + " got tensor '" +
                            e->request.name + "' on " + deviceName(engine::deviceOf(e->request.params.device)) +
                            ": one collective's tensors must be on one GPU per rank.");
    }
    if (ordered && e->stream == last) continue;
    ordered = true;
    last = e->stream;
    if (Device::isDeviceWide(e->stream)) {
      synchronizeDevice(api_, device_);
      continue;
    }
    producerDone_.record(static_cast<cudaStream_t>(e->stream));
    producerDone_.waitOn(lane.stream.get());
  }
  return lane;
}

void NcclBackend::finish(Lane& lane, const std::vector<Entry*>& entries, std::vector<std::shared_ptr<void>> keepAlive) {
  PendingBatch batch;
  batch.event = finalizer_->takeEvent();
  batch.event->record(lane.stream.get());
  batch.members.reserve(entries.size());
  for (Entry* e : entries) {
    if (e != nullptr) batch.members.push_back(DeferredMember{e->work, e->member});
  }
  batch.keepAlive = std::move(keepAlive);
  finalizer_->submit(std::move(batch));
}

void* NcclBackend::reserve(Lane& lane, DeviceBuffer& buffer, size_t bytes) {
  if (bytes > buffer.capacity()) {
    lane.stream.synchronize();  // the old buffer may still be in use on this lane
    buffer.reserve(bytes);
  }
  return buffer.data();
}

void NcclBackend::batchedCopy(Lane& lane, std::vector<void*>& dst, std::vector<const void*>& src,
                              std::vector<size_t>& bytes) {
  if (dst.empty()) return;
  if (!batchCopies_) {
    for (size_t i = 0; i < dst.size(); ++i) {
      HVD_CUDA_CHECK(api_, device_,
                     api_.rt.memcpyAsync(dst[i], src[i], bytes[i], cudaMemcpyDeviceToDevice, lane.stream.get()));
    }
  } else {
    HVD_CUDA_CHECK(api_, device_,
                   api_.kernels->batchedCopy(dst.data(), src.data(), bytes.data(), static_cast<int>(dst.size()),
                                             lane.stream.get()));
  }
  dst.clear();
  src.clear();
  bytes.clear();
}

void NcclBackend::scale(Lane& lane, void* out, const void* in, size_t count, DataType dtype, double factor) {
  if (factor == 1.0 || count == 0) {
    if (out != in && count > 0) {
      HVD_CUDA_CHECK(
          api_, device_,
          api_.rt.memcpyAsync(out, in, count * dataTypeSize(dtype), cudaMemcpyDeviceToDevice, lane.stream.get()));
    }
    return;
  }
  checkScalable(dtype, factor);  // the CPU path's refusals (uint16, int16, bool)
  HVD_CUDA_CHECK(
      api_, device_,
      api_.kernels->scale(out, in, static_cast<int64_t>(count), static_cast<int>(dtype), factor, lane.stream.get()));
}

void NcclBackend::allreduce(const Response& r, ProcessSet&, const std::vector<Entry*>& entries) {
  const DataType dtype = r.params.dtype;
  const size_t esize = dataTypeSize(dtype);
  const ncclDataType_t type = reductionType(dtype);
  const ncclRedOp_t op = reductionOp(r.params.op, dtype);
  checkScalable(dtype, r.params.prescale);
  checkScalable(dtype, r.params.postscale);
  Lane& lane = begin(entries);
  cudaStream_t stream = lane.stream.get();
  if (r.tensors.size() == 1 && !hierarchy_) {
    const size_t count = static_cast<size_t>(r.tensors[0].numElements());
    const size_t bytes = count * esize;
    void* out;
    const void* in;
    if (Entry* e = entries[0]) {
      out = e->output;
      in = e->input;
      if (r.params.prescale != 1.0) {
        scale(lane, out, in, count, dtype, r.params.prescale);
        in = out;
      }
    } else {
      out = reserve(lane, lane.scratch, std::max<size_t>(bytes, 1));  // a joined rank adds zeros
      HVD_CUDA_CHECK(api_, device_, api_.rt.memsetAsync(out, 0, bytes, stream));
      in = out;
    }
    started(r, static_cast<int64_t>(bytes), "nccl_allreduce");
    check(api_.nccl->allReduce(in, out, count, type, op, comm_, stream), "ncclAllReduce");
    scale(lane, out, out, count, dtype, r.params.postscale);
    ended(r, static_cast<int64_t>(bytes), "nccl_allreduce");
    finish(lane, entries);
    return;
  }
  const size_t total = engine::fusedBytes(r);
  const size_t count = total / esize;
  // The hierarchical allreduce splits the buffer into equal shards per host member: pad with zeros.
  const size_t shards = hierarchy_ ? static_cast<size_t>(hierarchy_->localSize) : 1;
  const size_t padded = (count + shards - 1) / shards * shards;
  void* buf = reserve(lane, lane.fusion, std::max<size_t>(padded * esize, 1));
  if (padded > count) {
    HVD_CUDA_CHECK(api_, device_, api_.rt.memsetAsync(at(buf, total), 0, (padded - count) * esize, stream));
  }
  packFused(lane, r, entries, buf);
  const char* activity = hierarchy_ ? "nccl_hierarchical_allreduce" : "nccl_allreduce";
  started(r, static_cast<int64_t>(total), activity);
  if (hierarchy_) {
    hierarchicalAllreduce(api_, device_, *hierarchy_, buf, padded, esize, type, op, stream);
  } else {
    check(api_.nccl->allReduce(buf, buf, count, type, op, comm_, stream), "ncclAllReduce");
  }
  scale(lane, buf, buf, count, dtype, r.params.postscale);
  ended(r, static_cast<int64_t>(total), activity);
  unpackFused(lane, r, entries, buf);
  finish(lane, entries);
}

void NcclBackend::packFused(Lane& lane, const Response& r, const std::vector<Entry*>& entries, void* buf) {
  const DataType dtype = r.params.dtype;
  const int64_t total = static_cast<int64_t>(engine::fusedBytes(r));
  std::vector<void*> dst;
  std::vector<const void*> src;
  std::vector<size_t> sizes;
  notifyIf(EngineEventKind::kFusionCopyInStart, r, total, nullptr);
  size_t offset = 0;
  for (size_t i = 0; i < r.tensors.size(); ++i) {
    const size_t bytes = engine::tensorBytes(r.tensors[i].data(), dtype);
    if (entries[i] != nullptr) {
      dst.push_back(at(buf, offset));
      src.push_back(entries[i]->input);
      sizes.push_back(bytes);
    } else if (bytes > 0) {  // a joined rank adds zeros
      HVD_CUDA_CHECK(api_, device_, api_.rt.memsetAsync(at(buf, offset), 0, bytes, lane.stream.get()));
    }
    offset += bytes;
  }
  batchedCopy(lane, dst, src, sizes);
  scale(lane, buf, buf, static_cast<size_t>(total) / dataTypeSize(dtype), dtype, r.params.prescale);
  notifyIf(EngineEventKind::kFusionCopyInEnd, r, total, nullptr);
}

void NcclBackend::unpackFused(Lane& lane, const Response& r, const std::vector<Entry*>& entries, const void* buf) {
  const int64_t total = static_cast<int64_t>(engine::fusedBytes(r));
  std::vector<void*> dst;
  std::vector<const void*> src;
  std::vector<size_t> sizes;
  notifyIf(EngineEventKind::kFusionCopyOutStart, r, total, nullptr);
  size_t offset = 0;
  for (size_t i = 0; i < r.tensors.size(); ++i) {
    const size_t bytes = engine::tensorBytes(r.tensors[i].data(), r.params.dtype);
    if (entries[i] != nullptr) {
      dst.push_back(entries[i]->output);
      src.push_back(at(buf, offset));
      sizes.push_back(bytes);
    }
    offset += bytes;
  }
  batchedCopy(lane, dst, src, sizes);
  notifyIf(EngineEventKind::kFusionCopyOutEnd, r, total, nullptr);
}

void NcclBackend::allgather(const Response& r, ProcessSet& set, const std::vector<Entry*>& entries) {
  const int n = static_cast<int>(set.ranks.size());
  const int me = set.myIndex;
  const engine::AllgatherLayout layout(r, n);
  const size_t block = *std::max_element(layout.bytesPerRank.begin(), layout.bytesPerRank.end());
  Lane& lane = begin(entries);
  cudaStream_t stream = lane.stream.get();
  // Outputs: [sum of every rank's first dims, rest of the shape], on this GPU.
  std::vector<void*> outputs(r.tensors.size(), nullptr);
  const std::vector<OwnedTensor*> owned =
      engine::allocateAllgatherOutputs(r, entries, [&](const Entry& e, DataType dtype, std::vector<int64_t> shape) {
        return outputs_.allocate(dtype, std::move(shape), stream, static_cast<cudaStream_t>(e.stream));
      });
  for (size_t i = 0; i < owned.size(); ++i) {
    if (owned[i] != nullptr) outputs[i] = owned[i]->view.data;
  }
  const int64_t total = static_cast<int64_t>(layout.total);
  const bool equalBlocks =
      std::all_of(layout.bytesPerRank.begin(), layout.bytesPerRank.end(), [&](size_t b) { return b == block; });
  if (r.tensors.size() == 1 && equalBlocks && entries[0] != nullptr) {
    started(r, total, "nccl_allgather");
    if (block > 0)
      check(api_.nccl->allGather(entries[0]->input, outputs[0], block, ncclUint8, comm_, stream), "ncclAllGather");
    ended(r, total, "nccl_allgather");
    finish(lane, entries);
    return;
  }
  // Ragged or fused: equal blocks padded to the largest rank's; this rank's block goes last.
  void* buf = reserve(lane, lane.fusion, std::max<size_t>(block * static_cast<size_t>(n + 1), 1));
  void* mine = at(buf, block * static_cast<size_t>(n));
  std::vector<void*> dst;
  std::vector<const void*> src;
  std::vector<size_t> sizes;
  notifyIf(EngineEventKind::kFusionCopyInStart, r, static_cast<int64_t>(layout.bytesPerRank[me]), nullptr);
  size_t offset = 0;
  for (size_t i = 0; i < r.tensors.size(); ++i) {
    const size_t bytes = static_cast<size_t>(r.tensors[i].data().firstDims[me]) * layout.rowBytes[i];
    if (entries[i] != nullptr && bytes > 0) {
      dst.push_back(at(mine, offset));
      src.push_back(entries[i]->input);
      sizes.push_back(bytes);
    }
    offset += bytes;
  }
  batchedCopy(lane, dst, src, sizes);
  notifyIf(EngineEventKind::kFusionCopyInEnd, r, static_cast<int64_t>(layout.bytesPerRank[me]), nullptr);
  started(r, total, "nccl_allgather_padded");
  if (block > 0) check(api_.nccl->allGather(mine, buf, block, ncclUint8, comm_, stream), "ncclAllGather");
  ended(r, total, "nccl_allgather_padded");
  notifyIf(EngineEventKind::kFusionCopyOutStart, r, total, nullptr);
  std::vector<size_t> outOffset(r.tensors.size(), 0);
  for (int p = 0; p < n; ++p) {
    size_t within = 0;
    for (size_t i = 0; i < r.tensors.size(); ++i) {
      const size_t bytes = static_cast<size_t>(r.tensors[i].data().firstDims[p]) * layout.rowBytes[i];
      if (outputs[i] != nullptr && bytes > 0) {
        dst.push_back(at(outputs[i], outOffset[i]));
        src.push_back(at(static_cast<const void*>(buf), block * static_cast<size_t>(p) + within));
        sizes.push_back(bytes);
      }
      outOffset[i] += bytes;
      within += bytes;
    }
  }
  batchedCopy(lane, dst, src, sizes);
  notifyIf(EngineEventKind::kFusionCopyOutEnd, r, total, nullptr);
  finish(lane, entries);
}

void NcclBackend::broadcast(const Response& r, ProcessSet& set, const std::vector<Entry*>& entries) {
  const size_t bytes = engine::tensorBytes(r.tensors[0].data(), r.params.dtype);
  const int root = engine::setIndexOf(set.ranks, r.params.root);
  HVD_CHECK(root >= 0) << "broadcast root " << r.params.root << " is not in process set " << set.id;
  Lane& lane = begin(entries);
  void* buf = entries[0] != nullptr ? entries[0]->input : reserve(lane, lane.scratch, std::max<size_t>(bytes, 1));
  started(r, static_cast<int64_t>(bytes), "nccl_broadcast");
  if (bytes > 0)
    check(api_.nccl->broadcast(buf, buf, bytes, ncclUint8, root, comm_, lane.stream.get()), "ncclBroadcast");
  ended(r, static_cast<int64_t>(bytes), "nccl_broadcast");
  finish(lane, entries);
}

void NcclBackend::alltoall(const Response& r, ProcessSet& set, const std::vector<Entry*>& entries) {
  const int n = static_cast<int>(set.ranks.size());
  const int me = set.myIndex;
  const engine::TensorInfo& t = r.tensors[0].data();
  const size_t rowBytes = static_cast<size_t>(t.rowElements()) * dataTypeSize(r.params.dtype);
  std::vector<size_t> sendOffset(n), sendBytes(n), recvOffset(n), recvBytes(n);
  std::vector<int32_t> received(static_cast<size_t>(n));
  int64_t rows = 0;
  size_t sent = 0, got = 0;
  for (int p = 0; p < n; ++p) {
    sendOffset[p] = sent;
    sendBytes[p] = static_cast<size_t>(t.splits[static_cast<size_t>(me) * n + p]) * rowBytes;
    sent += sendBytes[p];
    received[p] = t.splits[static_cast<size_t>(p) * n + me];
    recvOffset[p] = got;
    recvBytes[p] = static_cast<size_t>(received[p]) * rowBytes;
    got += recvBytes[p];
    rows += received[p];
  }
  Lane& lane = begin(entries);
  cudaStream_t stream = lane.stream.get();
  std::vector<int64_t> shape = t.shape;
  shape[0] = rows;
  // Released on the stream of the framework that gets it; a rank without the tensor (joined)
  // only relays and drops its output here, so it is released on the lane, after the lane's writes.
  OwnedTensor out = outputs_.allocate(r.params.dtype, std::move(shape), stream,
                                      entries[0] != nullptr ? static_cast<cudaStream_t>(entries[0]->stream) : stream);
  const void* in = entries[0] != nullptr ? entries[0]->input : reserve(lane, lane.scratch, std::max<size_t>(sent, 1));
  started(r, static_cast<int64_t>(sent), "nccl_alltoall");
  // This rank's own rows are a device copy; the rest one grouped send/recv per peer.
  if (sendBytes[me] > 0) {
    HVD_CUDA_CHECK(api_, device_,
                   api_.rt.memcpyAsync(at(out.view.data, recvOffset[me]), at(in, sendOffset[me]), sendBytes[me],
                                       cudaMemcpyDeviceToDevice, stream));
  }
  check(api_.nccl->groupStart(), "ncclGroupStart");
  try {
    for (int p = 0; p < n; ++p) {
      if (p == me) continue;
      if (sendBytes[p] > 0)
        check(api_.nccl->send(at(in, sendOffset[p]), sendBytes[p], ncclUint8, p, comm_, stream), "ncclSend");
      if (recvBytes[p] > 0)
        check(api_.nccl->recv(at(out.view.data, recvOffset[p]), recvBytes[p], ncclUint8, p, comm_, stream), "ncclRecv");
    }
  } catch (...) {
    api_.nccl->groupEnd();
    throw;
  }
  check(api_.nccl->groupEnd(), "ncclGroupEnd");
  ended(r, static_cast<int64_t>(sent), "nccl_alltoall");
  if (Entry* e = entries[0]) {
    e->work->output(e->member) = std::move(out);
    e->work->setReceivedSplits(std::move(received));
    finish(lane, entries);
  } else {
    finish(lane, entries, {out.storage});  // a joined rank's receive space lives until the device is done
  }
}

void NcclBackend::reducescatter(const Response& r, ProcessSet& set, const std::vector<Entry*>& entries) {
  const int n = static_cast<int>(set.ranks.size());
  const int me = set.myIndex;
  const DataType dtype = r.params.dtype;
  const size_t esize = dataTypeSize(dtype);
  const ncclDataType_t type = reductionType(dtype);
  const ncclRedOp_t sum = reductionOp(ReduceOp::kSum, dtype);  // Average is in postscale already
  checkScalable(dtype, r.params.prescale);
  checkScalable(dtype, r.params.postscale);
  const std::vector<size_t> counts = engine::reducescatterCounts(r, n);
  const size_t block = *std::max_element(counts.begin(), counts.end());
  size_t total = 0;
  for (const auto& t : r.tensors) total += static_cast<size_t>(t.numElements());
  const int64_t payload = static_cast<int64_t>(total * esize);
  Lane& lane = begin(entries);
  cudaStream_t stream = lane.stream.get();
  const bool equalBlocks = std::all_of(counts.begin(), counts.end(), [&](size_t c) { return c == block; });
  if (r.tensors.size() == 1 && equalBlocks && entries[0] != nullptr && r.params.prescale == 1.0) {
    started(r, payload, "nccl_reducescatter");
    check(api_.nccl->reduceScatter(entries[0]->input, entries[0]->output, block, type, sum, comm_, stream),
          "ncclReduceScatter");
    scale(lane, entries[0]->output, entries[0]->output, block, dtype, r.params.postscale);
    ended(r, payload, "nccl_reducescatter");
    finish(lane, entries);
    return;
  }
  // Every rank's block padded to the largest, then this rank's result block.
  const size_t blockBytes = block * esize;
  void* buf = reserve(lane, lane.fusion, std::max<size_t>(blockBytes * static_cast<size_t>(n + 1), 1));
  void* result = at(buf, blockBytes * static_cast<size_t>(n));
  HVD_CUDA_CHECK(api_, device_, api_.rt.memsetAsync(buf, 0, blockBytes * static_cast<size_t>(n), stream));
  std::vector<void*> dst;
  std::vector<const void*> src;
  std::vector<size_t> sizes;
  notifyIf(EngineEventKind::kFusionCopyInStart, r, payload, nullptr);
  for (int p = 0; p < n; ++p) {
    size_t within = 0;
    for (size_t i = 0; i < r.tensors.size(); ++i) {
      const engine::TensorInfo& t = r.tensors[i].data();
      const size_t rowBytes = static_cast<size_t>(t.rowElements()) * esize;
      int64_t firstRow = 0;
      for (int q = 0; q < p; ++q) firstRow += engine::reducescatterRows(t.shape[0], n, q);
      const size_t bytes = static_cast<size_t>(engine::reducescatterRows(t.shape[0], n, p)) * rowBytes;
      if (entries[i] != nullptr && bytes > 0) {
        dst.push_back(at(buf, blockBytes * static_cast<size_t>(p) + within));
        src.push_back(at(static_cast<const void*>(entries[i]->input), static_cast<size_t>(firstRow) * rowBytes));
        sizes.push_back(bytes);
      }
      within += bytes;
    }
  }
  batchedCopy(lane, dst, src, sizes);
  scale(lane, buf, buf, block * static_cast<size_t>(n), dtype, r.params.prescale);
  notifyIf(EngineEventKind::kFusionCopyInEnd, r, payload, nullptr);
  started(r, payload, "nccl_reducescatter_padded");
  if (block > 0) check(api_.nccl->reduceScatter(buf, result, block, type, sum, comm_, stream), "ncclReduceScatter");
  scale(lane, result, result, counts[me], dtype, r.params.postscale);
  ended(r, payload, "nccl_reducescatter_padded");
  const int64_t outBytes = static_cast<int64_t>(counts[me] * esize);
  notifyIf(EngineEventKind::kFusionCopyOutStart, r, outBytes, nullptr);
  size_t within = 0;
  for (size_t i = 0; i < r.tensors.size(); ++i) {
    const engine::TensorInfo& t = r.tensors[i].data();
    const size_t bytes = static_cast<size_t>(engine::reducescatterRows(t.shape[0], n, me) * t.rowElements()) * esize;
    if (entries[i] != nullptr && bytes > 0) {
      dst.push_back(entries[i]->output);
      src.push_back(at(static_cast<const void*>(result), within));
      sizes.push_back(bytes);
    }
    within += bytes;
  }
  batchedCopy(lane, dst, src, sizes);
  notifyIf(EngineEventKind::kFusionCopyOutEnd, r, outBytes, nullptr);
  finish(lane, entries);
}

void NcclBackend::barrier(const Response& r, ProcessSet&, const std::vector<Entry*>& entries) {
  // A host barrier, like Horovod's: nothing on the device to wait for.
  if (std::exception_ptr failed = finalizer_->failure()) std::rethrow_exception(failed);
  started(r, 0, "host_barrier");
  collectives::barrier(hostComm_);
  ended(r, 0, "host_barrier");
  PendingBatch batch;
  for (Entry* e : entries) {
    if (e != nullptr) batch.members.push_back(DeferredMember{e->work, e->member});
  }
  finalizer_->submit(std::move(batch));
}

}  // namespace hvd::cuda
