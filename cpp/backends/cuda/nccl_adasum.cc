// NcclBackend's Adasum (nccl_backend.h, collectives/adasum_hosts.h): inside each host on the
// device through NCCL, across hosts on the host through the set's transport.
#include <algorithm>
#include <chrono>
#include <string>
#include <thread>

#include "backends/cuda/nccl_backend.h"
#include "collectives/adasum_hosts.h"
#include "engine/fused_layout.h"
#include "engine/work.h"

namespace hvd::cuda {
namespace {

using engine::EngineEventKind;

constexpr const char kNcclAdasum[] = "nccl_adasum";

// Negotiation let only Adasum's dtypes through.
ncclDataType_t adasumType(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat16: return ncclFloat16;
    case DataType::kBFloat16: return ncclBfloat16;
    case DataType::kFloat32: return ncclFloat32;
    case DataType::kFloat64: return ncclFloat64;
    default: break;
  }
  throw InvalidArgument("Adasum reduces only float16, bfloat16, float32 and float64 tensors, not " +
                        std::string(dataTypeName(dtype)));
}

uint8_t* at(void* base, size_t offset) { return static_cast<uint8_t*>(base) + offset; }

}  // namespace

ncclComm_t NcclBackend::hostLocalComm() {
  const Communicator::HostLayout& hosts = hostComm_.hosts();
  if (hosts.localSize() == 1) return nullptr;
  if (hosts.count == 1) return comm_;
  if (hierarchy_) return hierarchy_->local;
  if (!adasumHierarchy_) {
    adasumHierarchy_ = makeNcclHierarchy(api_, device_, hostComm_, /*withCross=*/false);
    finalizer_->addComms({adasumHierarchy_->local});
  }
  return adasumHierarchy_->local;
}

void NcclBackend::awaitLane(Lane& lane, ncclComm_t comm) {
  adasumCopied_.record(lane.stream.get());
  const Deadline deadline = hostComm_.deadline();
  while (!adasumCopied_.query()) {
    if (comm != nullptr) {
      ncclResult_t status = ncclSuccess;
      check(api_.nccl->commGetAsyncError(comm, &status), "ncclCommGetAsyncError");
      if (status != ncclSuccess && status != ncclInProgress) check(status, "NCCL (asynchronous error, Adasum)");
    }
    if (deadline.expired()) {
      throw Timeout(
          "Adasum on GPU " + std::to_string(device_) +
          ": the device did not finish the shard's copy within the job's timeout (HOROVOD_GLOO_TIMEOUT_SECONDS)");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

void NcclBackend::adasum(const Response& r, ProcessSet& set, const std::vector<Entry*>& entries) {
  const DataType dtype = r.params.dtype;
  const size_t esize = dataTypeSize(dtype);
  const Communicator::HostLayout& hosts = hostComm_.hosts();
  // Equal on every member (the host layout is): the response fails alike everywhere.
  if (std::string why = collectives::gpuAdasumUnsupported(hosts, set.id); !why.empty()) throw MismatchError(why);
  const ncclDataType_t type = adasumType(dtype);
  const int localSize = hosts.localSize();
  std::vector<size_t> counts;
  counts.reserve(r.tensors.size());
  for (const auto& t : r.tensors) counts.push_back(static_cast<size_t>(t.numElements()));
  const size_t total = engine::fusedBytes(r);
  const size_t count = total / esize;
  const size_t shard = collectives::adasumShardLength(count, localSize);
  const size_t padded = shard * static_cast<size_t>(localSize);
  ncclComm_t local = hostLocalComm();

  Lane& lane = begin(entries);
  cudaStream_t stream = lane.stream.get();
  void* buf = reserve(lane, lane.fusion, std::max<size_t>(padded * esize, 1));
  if (padded > count) {
    HVD_CUDA_CHECK(api_, device_, api_.rt.memsetAsync(at(buf, total), 0, (padded - count) * esize, stream));
  }
  packFused(lane, r, entries, buf);

  started(r, static_cast<int64_t>(total), kNcclAdasum);
  void* mine = at(buf, static_cast<size_t>(hosts.localRank) * shard * esize);
  if (local != nullptr && shard > 0) {
    check(api_.nccl->reduceScatter(buf, mine, shard, type, ncclSum, local, stream), "ncclReduceScatter");
  }
  if (hosts.count > 1 && shard > 0) {
    const size_t bytes = shard * esize;
    adasumHost_.reserve(bytes);
    HVD_CUDA_CHECK(api_, device_, api_.rt.memcpyAsync(adasumHost_.data(), mine, bytes, cudaMemcpyDeviceToHost, stream));
    awaitLane(lane, local);
    collectives::adasumAcrossHosts(hostComm_, adasumHost_.data(),
                                   collectives::adasumShardCounts(counts, shard, hosts.localRank), dtype,
                                   adasumPairScratch_);
    HVD_CUDA_CHECK(api_, device_, api_.rt.memcpyAsync(mine, adasumHost_.data(), bytes, cudaMemcpyHostToDevice, stream));
    awaitLane(lane, nullptr);  // the pinned buffer is free for the next response, on any lane
  }
  if (local != nullptr && shard > 0) {
    check(api_.nccl->allGather(mine, buf, shard, type, local, stream), "ncclAllGather");
  }
  // The average inside each host (Adasum is invariant to a common scale: done last, as Horovod).
  scale(lane, buf, buf, count, dtype, r.params.postscale / localSize);
  ended(r, static_cast<int64_t>(total), kNcclAdasum);

  unpackFused(lane, r, entries, buf);
  finish(lane, entries);
}

}  // namespace hvd::cuda
