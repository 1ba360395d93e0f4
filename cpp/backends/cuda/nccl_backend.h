// NcclBackend: the collectives of CUDA tensors through NCCL, registered as "nccl" for
// DeviceKind::kCuda, one per (process set, GPU).
//
// Choice: the factory asks agreeGpuOperations() (gpu_operations.h), a collective over the set's
// host transport, and builds the backend only when the answer is NCCL (every member can load
// NCCL, no two members share a GPU, HOROVOD_GPU_OPERATIONS allows it); else it declines and the
// host-staged backend runs the set.
//
// Communicator: built when the backend is (the set's first response on that GPU): the set's
// first member creates the NCCL unique id and broadcasts it over the set's host collectives, then
// every member joins (ncclCommInitRank); destroyed with the backend (set removed, shutdown).
//
// Work: each response goes to one of HOROVOD_NUM_NCCL_STREAMS non-blocking streams (default 1),
// round robin, after an event recorded on every producer stream of its entries (Device::stream,
// null = the legacy default stream); fused responses are packed into a per-stream device fusion
// buffer with the kernel table's batchedCopy, scaled with its scale kernel, reduced in place and
// unpacked the same way. Engine-allocated outputs (allgather, alltoall) are device memory of the
// input's GPU (cudaMalloc, freed when the last reference goes). Completion is deferred
// (engine/backend.h): an event recorded after the work is handed with the works to the
// finalizer thread (nccl_finalizer.h), which completes them once the device finished.
//
// Adasum: Horovod's GPU Adasum (collectives/adasum_hosts.h): ncclReduceScatter (sum) among the
// set's members on each host (the hierarchy's local communicator, built on the first Adasum
// response when HOROVOD_HIERARCHICAL_ALLREDUCE did not build it; the set's own on one host), the
// shard copied to pinned host memory, Adasum across hosts over the set's host transport, copied
// back, ncclAllGather inside the host, postscale / local size. Sets whose hosts differ in size or
// whose host count is not a power of two fail the response on every member before anything is
// sent (MismatchError, as negotiation's Adasum refusals; Horovod's words). The engine thread
// waits for the shard's copies (polling, bounded by the job's timeout and NCCL's errors).
//
// Semantics: allreduce sum/min/max/product/average natively (ncclAvg), prescale/postscale with the
// scale kernel; float16 and bfloat16 native; int16/uint16 reductions are refused (NCCL has no such
// type, as in Horovod), bool reduces as uint8 (sum/max = or, min/product = and). Allgather of
// ragged first dimensions: ncclAllGather of equal blocks padded to the largest rank's, unpacked
// into the outputs. Alltoall: grouped ncclSend/ncclRecv. Reducescatter: ncclReduceScatter of
// blocks padded to the largest rank's. Barrier: the host collectives.
//
// Failures: checks that every rank makes alike (dtype, scale factors) fail the response. A CUDA or
// NCCL call that fails on this rank throws from run() as a fatal error (PeerLost for NCCL's
// remote/system errors, else Aborted naming the call), since the other ranks may have enqueued
// their part already and would wait forever: the Runtime fails on every rank; an error the device reports later fails the batch's works from the finalizer,
// and the next run() rethrows it. abort() (the Runtime failed) aborts the communicator and fails
// every pending work with the Runtime's error.
//
// HOROVOD_HIERARCHICAL_ALLREDUCE=1: allreduces run within hosts, across hosts, within hosts
// (nccl_hierarchy.h) when the set has the same number of members (two or more) on each of two or
// more hosts; otherwise flat, said once in a warning. HOROVOD_BATCH_D2D_MEMCOPIES=0: fusion
// copies are one cudaMemcpyAsync each instead of one batched kernel.
//
// Threads: the engine's, plus the finalizer's.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "backends/cuda/device_util.h"
#include "backends/cuda/nccl_finalizer.h"
#include "backends/cuda/nccl_hierarchy.h"
#include "backends/host_backend.h"
#include "collectives/communicator.h"

namespace hvd::cuda {

using backends::BackendContext;
using backends::Entry;
using backends::ProcessSet;
using backends::Response;

class NcclBackend : public backends::HostBackendBase {
 public:
  // Creates the streams and the communicator (collective over the set). Throws Error naming the
  // failing call and the GPU.
  NcclBackend(const CudaApi& api, const BackendContext& context, int streams);
  ~NcclBackend() override;
  // NCCL picks its own algorithms: the host algorithm knobs (crossover, hierarchical) do not apply.
  void applyKnobs(const engine::Knobs&) override {}
  void abort(std::exception_ptr error) override;
  // Dispatches on the kind (HostBackend's dispatch, plus the barrier's works).
  void run(const Response& r, ProcessSet& set, const std::vector<Entry*>& entries) override;

 private:
  // One of the round-robin streams, with its fusion buffer.
  struct Lane {
    Lane(const CudaApi& api, int device) : stream(api, device), fusion(api, device), scratch(api, device) {}
    Stream stream;
    DeviceBuffer fusion;  // packed inputs / results of fused responses
    DeviceBuffer scratch;  // zeros and receive space for a rank without an entry (joined)
  };

  void allreduce(const Response& r, ProcessSet& set, const std::vector<Entry*>& entries);
  void adasum(const Response& r, ProcessSet& set, const std::vector<Entry*>& entries);
  // The NCCL communicator of the set's members on this rank's host (null when this rank is alone
  // there); built on first call when needed (collective: every member calls it at one response).
  ncclComm_t hostLocalComm();
  // Blocks the host until `lane`'s work so far is done, polling: an NCCL error on `comm` (a lost
  // peer of the reduce-scatter before it) or the job's timeout ends the wait with that error.
  void awaitLane(Lane& lane, ncclComm_t comm);
  void allgather(const Response& r, ProcessSet& set, const std::vector<Entry*>& entries);
  void broadcast(const Response& r, ProcessSet& set, const std::vector<Entry*>& entries);
  void alltoall(const Response& r, ProcessSet& set, const std::vector<Entry*>& entries);
  void reducescatter(const Response& r, ProcessSet& set, const std::vector<Entry*>& entries);
  void barrier(const Response& r, ProcessSet& set, const std::vector<Entry*>& entries);

  // The lane for the next response, ordered after the producer streams of `entries`; rethrows an
  // error the finalizer found.
  Lane& begin(const std::vector<Entry*>& entries);
  // Records completion on `lane` and hands the works of `entries` (and `keepAlive`) to the
  // finalizer. The last step of every collective.
  void finish(Lane& lane, const std::vector<Entry*>& entries, std::vector<std::shared_ptr<void>> keepAlive = {});
  // `bytes` of `lane`'s buffer, growing it after the lane's earlier work is done.
  void* reserve(Lane& lane, DeviceBuffer& buffer, size_t bytes);
  void batchedCopy(Lane& lane, std::vector<void*>& dst, std::vector<const void*>& src, std::vector<size_t>& bytes);
  void scale(Lane& lane, void* out, const void* in, size_t count, DataType dtype, double factor);
  // A fused response's tensors into `buf` (zeros for a rank without the tensor), prescaled, and
  // back out of it into the outputs, between the fusion-copy events; queued on the lane.
  void packFused(Lane& lane, const Response& r, const std::vector<Entry*>& entries, void* buf);
  void unpackFused(Lane& lane, const Response& r, const std::vector<Entry*>& entries, const void* buf);
  void check(ncclResult_t status, const char* call) const { checkNccl(api_, status, call, device_, comm_); }

  const CudaApi& api_;
  const int device_;
  Communicator hostComm_;  // the set's host collectives (id exchange, barrier)
  std::vector<std::unique_ptr<Lane>> lanes_;
  size_t nextLane_ = 0;
  Event producerDone_;  // recorded on a producer stream, waited for by the lane
  DeviceOutputs outputs_;  // allgather and alltoall outputs
  ncclComm_t comm_ = nullptr;
  std::optional<NcclHierarchy> hierarchy_;  // HOROVOD_HIERARCHICAL_ALLREDUCE, where possible
  std::optional<NcclHierarchy>
      adasumHierarchy_;  // its local communicator only: for Adasum, when hierarchy_ was not built
  PinnedBuffer adasumHost_;  // the shard Adasum combines across hosts
  Event adasumCopied_;  // recorded after the shard's copies, polled by awaitLane
  std::vector<uint8_t> adasumPairScratch_;  // collectives::adasum's receive space
  const bool batchCopies_;  // HOROVOD_BATCH_D2D_MEMCOPIES
  std::unique_ptr<NcclFinalizer> finalizer_;
  bool begun_ = false;  // the response being run got past begin() (run() turns errors fatal then)
};

}  // namespace hvd::cuda
