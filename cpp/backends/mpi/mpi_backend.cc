#include "backends/mpi/mpi_backend.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <sstream>

#include "collectives/reduce.h"
#include "common/logging.h"
#include "engine/fused_layout.h"
#include "engine/negotiation.h"
#include "engine/output_pool.h"
#include "engine/work.h"
#include "mpi/mpi_library.h"

namespace hvd::backends {
namespace {

using engine::AllgatherLayout;

// The core's kernel, for the types MPI cannot reduce (plugin_api.h: HvdMpiReducer).
void coreReduce(void* dst, const void* src, int64_t count, int dtype, int op) {
  reduceInto(dst, src, static_cast<size_t>(count), static_cast<DataType>(dtype), static_cast<ReduceOp>(op));
}

std::string ranksText(const std::vector<int>& ranks) {
  std::ostringstream out;
  out << "[";
  for (size_t i = 0; i < ranks.size(); ++i) out << (i ? ", " : "") << ranks[i];
  out << "]";
  return out.str();
}

std::unique_ptr<engine::CollectiveBackend> makeMpiBackend(const BackendContext& context) {
  if (!context.config.cpuOperationsMpi) return nullptr;
  const HvdMpiPlugin* plugin = mpi::loadedPlugin();
  if (plugin == nullptr) throw Error("HOROVOD_CPU_OPERATIONS=mpi: MPI is not initialized in this process");
  const mpi::MpiState state = mpi::mpiState();
  HVD_LOG(Debug) << "process set " << context.set.id << " " << ranksText(context.set.ranks)
                 << ": MPI data plane (HOROVOD_CPU_OPERATIONS=mpi), " << state.flavor << " "
                 << mpi::threadLevelName(state.threadLevel) << ", its own communicator";
  return std::make_unique<MpiBackend>(*plugin, context);
}

const bool kRegistered = [] {
  engine::BackendFactory factory;
  factory.name = "mpi";
  factory.devices = {DeviceKind::kCpu};
  factory.priority = 10;  // above "cpu": asked first, declines unless the Config asks for it
  factory.make = makeMpiBackend;
  engine::registerBackend(std::move(factory));
  return true;
}();

}  // namespace

MpiBackend::MpiBackend(const HvdMpiPlugin& plugin, const BackendContext& context)
    : HostBackend("mpi", context),
      mpi_(plugin),
      setId_(context.set.id),
      adasumChunkBytes_(context.config.adasumMpiChunkBytes) {
  const ProcessSet& set = context.set;
  // MPI tags are at least 0..32767; the tag only tells apart creations that overlap in time.
  check(mpi_.commCreate(context.config.mpiComm, set.ranks.data(), static_cast<int>(set.ranks.size()), set.id % 32768,
                        &comm_, err_, sizeof(err_)),
        "creating the communicator of process set " + std::to_string(set.id) + " " + ranksText(set.ranks));
  mpi_.setReducer(&coreReduce);
}

MpiBackend::~MpiBackend() {
  if (mpi_.commFree(comm_, err_, sizeof(err_)) != 0) {
    HVD_LOG(Warning) << "MPI data plane: freeing the communicator of process set " << setId_ << ": " << err_;
  }
}

void MpiBackend::check(int rc, const std::string& what) const {
  if (rc != 0) throw Error("MPI data plane (process set " + std::to_string(setId_) + "): " + what + ": " + err_);
}

void MpiBackend::barrier(const Response& r, ProcessSet&) {
  started(r, 0, "mpi_barrier");
  check(mpi_.barrier(comm_, err_, sizeof(err_)), "barrier");
  ended(r, 0, "mpi_barrier");
}

void MpiBackend::allreduce(const Response& r, ProcessSet& set, const std::vector<Entry*>& entries) {
  const int n = static_cast<int>(set.ranks.size());
  const DataType dtype = r.params.dtype;
  const size_t esize = dataTypeSize(dtype);
  const ReduceOp op = r.params.op == ReduceOp::kAverage ? ReduceOp::kSum : r.params.op;
  const double post = r.params.op == ReduceOp::kAverage ? r.params.postscale / n : r.params.postscale;
  checkScalable(dtype, r.params.prescale);
  checkScalable(dtype, post);
  const int dt = static_cast<int>(dtype), mop = static_cast<int>(op);
  if (r.tensors.size() == 1) {
    const size_t count = static_cast<size_t>(r.tensors[0].numElements());
    const int64_t bytes = static_cast<int64_t>(count * esize);
    void* out;
    const void* in = nullptr;  // in place unless the input can be read where it lies
    if (Entry* e = entries[0]) {
      out = e->output;
      if (r.params.prescale != 1.0) {
        if (e->input != out && count > 0) std::memcpy(out, e->input, count * esize);
        scale(out, count, dtype, r.params.prescale);
      } else if (e->input != out) {
        in = e->input;
      }
    } else {
      out = host_.fusion.reserve(count * esize);  // a joined rank contributes zeros
      std::memset(out, 0, count * esize);
    }
    started(r, bytes, "mpi_allreduce");
    check(mpi_.allreduce(comm_, in, out, static_cast<int64_t>(count), dt, mop, err_, sizeof(err_)), "allreduce");
    ended(r, bytes, "mpi_allreduce");
    scale(out, count, dtype, post);
    return;
  }
  const size_t total = engine::fusedBytes(r);
  uint8_t* buf = packFused(r, entries, total, dtype);
  const size_t count = total / esize;
  started(r, static_cast<int64_t>(total), "mpi_allreduce");
  check(mpi_.allreduce(comm_, nullptr, buf, static_cast<int64_t>(count), dt, mop, err_, sizeof(err_)), "allreduce");
  ended(r, static_cast<int64_t>(total), "mpi_allreduce");
  scale(buf, count, dtype, post);
  unpackFused(r, entries, buf, total);
}

namespace {

// Adasum's exchange over a set's communicator (its ranks are the set's ranks).
class MpiExchange final : public collectives::PairExchange {
 public:
  MpiExchange(const HvdMpiPlugin& mpi, int64_t comm, int32_t setId, int rank, int size, int64_t chunkBytes)
      : mpi_(mpi), comm_(comm), setId_(setId), rank_(rank), size_(size), chunkBytes_(chunkBytes) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void sendRecv(int peer, const void* send, size_t sendBytes, void* recv, size_t recvBytes) override {
    if (mpi_.sendRecv(comm_, peer, send, static_cast<int64_t>(sendBytes), recv, static_cast<int64_t>(recvBytes),
                      chunkBytes_, err_, sizeof(err_)) != 0) {
      throw Error("MPI data plane (process set " + std::to_string(setId_) + "): Adasum exchange with set rank " +
                  std::to_string(peer) + ": " + err_);
    }
  }

 private:
  const HvdMpiPlugin& mpi_;
  const int64_t comm_;
  const int32_t setId_;
  const int rank_, size_;
  const int64_t chunkBytes_;
  char err_[1024] = {0};
};

}  // namespace

void MpiBackend::adasum(const Response& r, ProcessSet& set, const std::vector<Entry*>& entries) {
  MpiExchange peers(mpi_, comm_, setId_, set.myIndex, static_cast<int>(set.ranks.size()), adasumChunkBytes_);
  runAdasum(r, entries, peers, "mpi_adasum");
}

void MpiBackend::allgather(const Response& r, ProcessSet& set, const std::vector<Entry*>& entries) {
  const int n = static_cast<int>(set.ranks.size());
  const int me = set.myIndex;
  const AllgatherLayout layout(r, n);
  const std::vector<OwnedTensor*> outputs = engine::allocateAllgatherOutputs(r, entries, *host_.outputs, false);
  const std::vector<int64_t> bytesPerRank(layout.bytesPerRank.begin(), layout.bytesPerRank.end());
  const int64_t total = static_cast<int64_t>(layout.total);
  if (r.tensors.size() == 1) {
    static const uint8_t kNothing = 0;
    const void* in = entries[0] ? entries[0]->input : &kNothing;
    // A joined rank has no output: it receives into a scratch buffer of the full size.
    void* out = outputs[0] ? outputs[0]->view.data : host_.fusion.reserve(std::max<size_t>(layout.total, 1));
    started(r, total, "mpi_allgatherv");
    check(mpi_.allgatherv(comm_, in, out, bytesPerRank.data(), err_, sizeof(err_)), "allgather");
    ended(r, total, "mpi_allgatherv");
    return;
  }
  uint8_t* buf = bytesOf(host_.fusion.reserve(layout.total));
  notifyIf(EngineEventKind::kFusionCopyInStart, r, bytesPerRank[me], nullptr);
  engine::packAllgather(layout, r, me, entries, buf);
  notifyIf(EngineEventKind::kFusionCopyInEnd, r, bytesPerRank[me], nullptr);
  started(r, total, "mpi_allgatherv");
  check(mpi_.allgatherv(comm_, nullptr, buf, bytesPerRank.data(), err_, sizeof(err_)), "allgather");
  ended(r, total, "mpi_allgatherv");
  notifyIf(EngineEventKind::kFusionCopyOutStart, r, total, nullptr);
  engine::unpackAllgather(layout, r, outputs, buf);
  notifyIf(EngineEventKind::kFusionCopyOutEnd, r, total, nullptr);
}

void MpiBackend::broadcast(const Response& r, ProcessSet& set, const std::vector<Entry*>& entries) {
  const size_t bytes = engine::tensorBytes(r.tensors[0].data(), r.params.dtype);
  const int root = engine::setIndexOf(set.ranks, r.params.root);
  HVD_CHECK(root >= 0) << "broadcast root " << r.params.root << " is not in process set " << set.id;
  void* buf = entries[0] != nullptr ? entries[0]->input : host_.fusion.reserve(bytes);
  started(r, static_cast<int64_t>(bytes), "mpi_bcast");
  check(mpi_.broadcastBytes(comm_, buf, static_cast<int64_t>(bytes), root, err_, sizeof(err_)), "broadcast");
  ended(r, static_cast<int64_t>(bytes), "mpi_bcast");
}

void MpiBackend::alltoall(const Response& r, ProcessSet& set, const std::vector<Entry*>& entries) {
  const int n = static_cast<int>(set.ranks.size());
  const int me = set.myIndex;
  const engine::TensorInfo& t = r.tensors[0].data();
  const int64_t rowBytes = t.rowElements() * static_cast<int64_t>(dataTypeSize(r.params.dtype));
  std::vector<int64_t> sendBytes(static_cast<size_t>(n)), recvBytes(static_cast<size_t>(n));
  std::vector<int32_t> received(static_cast<size_t>(n));
  int64_t rows = 0, sent = 0;
  for (int p = 0; p < n; ++p) {
    sendBytes[p] = t.splits[static_cast<size_t>(me) * n + p] * rowBytes;
    received[p] = t.splits[static_cast<size_t>(p) * n + me];
    recvBytes[p] = received[p] * rowBytes;
    rows += received[p];
    sent += sendBytes[p];
  }
  std::vector<int64_t> shape = t.shape;
  shape[0] = rows;
  OwnedTensor out = engine::allocateTensor(*host_.outputs, r.params.dtype, std::move(shape));
  static const uint8_t kNothing = 0;
  const void* in = entries[0] ? entries[0]->input : &kNothing;
  started(r, sent, "mpi_alltoallv");
  check(mpi_.alltoallv(comm_, in, sendBytes.data(), out.view.data, recvBytes.data(), err_, sizeof(err_)), "alltoall");
  ended(r, sent, "mpi_alltoallv");
  if (Entry* e = entries[0]) {
    e->work->output(e->member) = std::move(out);
    e->work->setReceivedSplits(std::move(received));
  }
}

void MpiBackend::reducescatter(const Response& r, ProcessSet& set, const std::vector<Entry*>& entries) {
  const int n = static_cast<int>(set.ranks.size());
  const int me = set.myIndex;
  const DataType dtype = r.params.dtype;
  const size_t esize = dataTypeSize(dtype);
  const int dt = static_cast<int>(dtype), sum = static_cast<int>(ReduceOp::kSum);
  // Average was folded into postscale at enqueue; the collective always sums.
  checkScalable(dtype, r.params.prescale);
  checkScalable(dtype, r.params.postscale);
  const std::vector<size_t> blocks = engine::reducescatterCounts(r, n);
  const std::vector<int64_t> counts(blocks.begin(), blocks.end());
  size_t total = 0;
  for (const auto& t : r.tensors) total += static_cast<size_t>(t.numElements());
  const int64_t payload = static_cast<int64_t>(total * esize);
  if (r.tensors.size() == 1 && r.params.prescale == 1.0 && entries[0] != nullptr) {
    started(r, payload, "mpi_reduce_scatter");
    check(mpi_.reducescatter(comm_, entries[0]->input, entries[0]->output, counts.data(), dt, sum, err_, sizeof(err_)),
          "reducescatter");
    ended(r, payload, "mpi_reduce_scatter");
    scale(entries[0]->output, static_cast<size_t>(counts[me]), dtype, r.params.postscale);
    return;
  }
  // Through the fusion buffer (fused_layout.h); the result block follows the input region.
  uint8_t* buf = bytesOf(host_.fusion.reserve((total + blocks[me]) * esize));
  uint8_t* result = buf + total * esize;
  notifyIf(EngineEventKind::kFusionCopyInStart, r, payload, nullptr);
  engine::packReducescatter(r, n, entries, buf);
  scale(buf, total, dtype, r.params.prescale);
  notifyIf(EngineEventKind::kFusionCopyInEnd, r, payload, nullptr);
  started(r, payload, "mpi_reduce_scatter");
  check(mpi_.reducescatter(comm_, buf, result, counts.data(), dt, sum, err_, sizeof(err_)), "reducescatter");
  ended(r, payload, "mpi_reduce_scatter");
  scale(result, blocks[me], dtype, r.params.postscale);
  const int64_t outBytes = counts[me] * static_cast<int64_t>(esize);
  notifyIf(EngineEventKind::kFusionCopyOutStart, r, outBytes, nullptr);
  engine::unpackReducescatter(r, n, me, entries, result);
  notifyIf(EngineEventKind::kFusionCopyOutEnd, r, outBytes, nullptr);
}

}  // namespace hvd::backends
