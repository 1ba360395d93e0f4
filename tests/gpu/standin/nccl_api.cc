// The NCCL entry points of cuda_api.h's NcclApi over the stand-in's communicators (nccl_comm.h):
// arguments are checked as NCCL checks them, calls are queued on the CUDA stand-in's streams with
// their buffers declared to the ordering checker, and run when the stream reaches them.
#include <nccl.h>
#include <pthread.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <sstream>
#include <unordered_map>

#include "nccl_comm.h"
#include "nccl_reduce.h"
#include "standin.h"
#include "standin_hooks.h"

struct ncclComm {
  uint64_t id;
};

namespace standin {
namespace {

constexpr char kIdPrefix[] = "hvd-standin-nccl:";

struct Registry {
  std::mutex mu;
  std::unordered_map<ncclComm_t, std::shared_ptr<Comm>> comms;
  std::string lastError;
  uint64_t nextId = 1;
  std::vector<ncclComm_t> retired;  // handles are never freed; kept reachable here
};
Registry* g_registry = nullptr;
std::once_flag g_once;

Registry& registry() {
  std::call_once(g_once, [] {
    g_registry = new Registry();  // never destroyed: queued calls may outlive static destructors
    pthread_atfork([] { g_registry->mu.lock(); }, [] { g_registry->mu.unlock(); },
                   [] { g_registry = new Registry(); });  // a fork child has no communicator
  });
  return *g_registry;
}

struct Pending {
  ncclComm_t handle;
  std::shared_ptr<Comm> comm;
  cudaStream_t stream;
  NcclCall call;
  std::vector<Access> accesses;
};

thread_local int t_groupDepth = 0;
thread_local std::vector<Pending> t_group;
thread_local ncclResult_t t_groupError = ncclSuccess;

ncclResult_t failNccl(ncclResult_t result, const std::string& message) {
  report(message);
  ncclRecordError(message);
  return result;
}

std::shared_ptr<Comm> findComm(ncclComm_t handle, const char* call, ncclResult_t* error) {
  Registry& r = registry();
  {
    std::lock_guard<std::mutex> lock(r.mu);
    auto it = r.comms.find(handle);
    if (it != r.comms.end()) return it->second;
  }
  std::ostringstream msg;
  msg << call << ": communicator " << static_cast<const void*>(handle)
      << " is not a live communicator (destroyed, aborted, or never initialized)";
  *error = failNccl(ncclInvalidArgument, msg.str());
  return nullptr;
}

// A buffer of a collective: device memory of the communicator's device, inside its allocation.
ncclResult_t checkBuffer(const char* call, const char* role, const void* ptr, size_t bytes, int device) {
  if (bytes == 0) return ncclSuccess;
  MemInfo info = lookupMemory(ptr);
  std::ostringstream msg;
  msg << call << ": " << role << " " << ptr;
  if (info.kind != MemKind::kDevice) {
    msg << " is not device memory";
    return failNccl(ncclInvalidArgument, msg.str());
  }
  if (info.device != device) {
    msg << " is memory of device " << info.device << ", the communicator's device is " << device;
    return failNccl(ncclInvalidArgument, msg.str());
  }
  size_t offset = static_cast<size_t>(static_cast<const char*>(ptr) - info.base);
  if (offset + bytes > info.size) {
    msg << " +" << bytes << " bytes runs past the end of its " << info.size << "-byte allocation";
    return failNccl(ncclInvalidArgument, msg.str());
  }
  return ncclSuccess;
}

// Queues the calls of one communicator (one group, or one lone call) as one op of their stream.
ncclResult_t submit(const std::vector<Pending>& pending) {
  const auto& comm = pending.front().comm;
  cudaStream_t stream = pending.front().stream;
  std::vector<NcclCall> calls;
  std::vector<Access> accesses;
  std::string what;
  for (const Pending& p : pending) {
    if (p.stream != stream)
      return failNccl(ncclInvalidUsage, "ncclGroupEnd: the group's calls on one communicator use different streams (" +
                                            streamName(stream) + " and " + streamName(p.stream) +
                                            "); the stand-in needs one stream");
    calls.push_back(p.call);
    accesses.insert(accesses.end(), p.accesses.begin(), p.accesses.end());
    what += (what.empty() ? "" : " + ") + p.call.describe();
  }
  if (pending.size() > 1) what = "group {" + what + "}";
  cudaError_t cudaStatus = cudaSuccess;
  bool queued = comm->issue([&](uint64_t ticket) {
    cudaStatus =
        enqueue(stream, what, accesses, [comm, ticket, calls] { comm->execute(ticket, calls); }, comm->device());
    return cudaStatus == cudaSuccess;
  });
  if (queued) return ncclSuccess;
  return failNccl(ncclUnhandledCudaError, what + ": queuing on " + streamName(stream) + " failed with CUDA error " +
                                              std::to_string(cudaStatus));
}

ncclResult_t add(ncclComm_t handle, cudaStream_t stream, NcclCall call, const void* readPtr, size_t readBytes,
                 void* writePtr, size_t writeBytes) {
  const std::string what = call.describe();
  ncclResult_t error = ncclSuccess;
  auto comm = findComm(handle, what.c_str(), &error);
  if (!comm) return error;
  if (ncclResult_t async = comm->asyncError())
    return failNccl(async, what + ": the communicator is in error (" + ncclGetErrorString(async) + "); abort it");
  if (ncclTypeSize(call.dtype) == 0)
    return failNccl(ncclInvalidArgument, what + ": unknown ncclDataType_t " + std::to_string(call.dtype));
  if ((call.kind == NcclCall::kAllReduce || call.kind == NcclCall::kReduceScatter) &&
      (call.op < 0 || call.op >= ncclNumOps))
    return failNccl(ncclInvalidArgument, what + ": unknown ncclRedOp_t " + std::to_string(call.op));
  if ((call.kind == NcclCall::kBroadcast || call.kind == NcclCall::kSend || call.kind == NcclCall::kRecv) &&
      (call.peer < 0 || call.peer >= comm->nranks()))
    return failNccl(ncclInvalidArgument, what + ": rank " + std::to_string(call.peer) + " is not in [0, " +
                                             std::to_string(comm->nranks()) + ")");
  if (ncclResult_t r = checkBuffer(what.c_str(), "sendbuff", readPtr, readBytes, comm->device())) return r;
  if (ncclResult_t r = checkBuffer(what.c_str(), "recvbuff", writePtr, writeBytes, comm->device())) return r;
  Pending p{handle, comm, stream, call, {}};
  if (readBytes) p.accesses.push_back({readPtr, readBytes, false});
  if (writeBytes) p.accesses.push_back({writePtr, writeBytes, true});
  if (t_groupDepth == 0) return submit({p});
  t_group.push_back(std::move(p));
  return ncclSuccess;
}

// Inside a group a failed call fails the whole group at ncclGroupEnd, as NCCL does.
ncclResult_t noteGroupError(ncclResult_t result) {
  if (result != ncclSuccess && t_groupDepth > 0 && t_groupError == ncclSuccess) t_groupError = result;
  return result;
}

}  // namespace

void ncclRecordError(const std::string& message) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.lastError = message;
}

}  // namespace standin

using standin::NcclCall;

extern "C" {

HVD_STANDIN_EXPORT ncclResult_t ncclGetVersion(int* version) {
  if (version == nullptr) return standin::failNccl(ncclInvalidArgument, "ncclGetVersion: null output pointer");
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

HVD_STANDIN_EXPORT const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    case ncclTimeout: return "NCCL operation timed out";
    default: return "unknown result code";
  }
}

HVD_STANDIN_EXPORT const char* ncclGetLastError(ncclComm_t) {
  thread_local std::string copy;
  standin::Registry& r = standin::registry();
  std::lock_guard<std::mutex> lock(r.mu);
  copy = r.lastError;
  return copy.c_str();
}

HVD_STANDIN_EXPORT ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId) {
  if (uniqueId == nullptr) return standin::failNccl(ncclInvalidArgument, "ncclGetUniqueId: null output pointer");
  std::random_device random;
  char name[64];
  std::snprintf(name, sizeof(name), "/hvd-standin-%08x%08x%08x%08x", random(), random(), random(), random());
  std::memset(uniqueId->internal, 0, sizeof(uniqueId->internal));
  std::snprintf(uniqueId->internal, sizeof(uniqueId->internal), "%s%s", standin::kIdPrefix, name);
  return ncclSuccess;
}

HVD_STANDIN_EXPORT ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  using standin::failNccl;
  if (comm == nullptr) return failNccl(ncclInvalidArgument, "ncclCommInitRank: null output pointer");
  if (nranks < 1 || nranks > standin::kMaxRanks)
    return failNccl(ncclInvalidArgument, "ncclCommInitRank: nranks " + std::to_string(nranks) + " is not in [1, " +
                                             std::to_string(standin::kMaxRanks) + "]");
  if (rank < 0 || rank >= nranks)
    return failNccl(ncclInvalidArgument, "ncclCommInitRank: rank " + std::to_string(rank) + " is not in [0, " +
                                             std::to_string(nranks) + ")");
  std::string id(commId.internal, strnlen(commId.internal, sizeof(commId.internal)));
  if (id.rfind(standin::kIdPrefix, 0) != 0)
    return failNccl(ncclInvalidArgument, "ncclCommInitRank: the id was not made by the stand-in's ncclGetUniqueId");
  int device = standin::currentDevice();
  if (device < 0) return failNccl(ncclUnhandledCudaError, "ncclCommInitRank: the CUDA stand-in has no devices");
  std::shared_ptr<standin::Comm> joined;
  std::string error;
  ncclResult_t result =
      standin::Comm::join(id.substr(sizeof(standin::kIdPrefix) - 1), nranks, rank, device, &joined, &error);
  if (result != ncclSuccess) return failNccl(result, error);
  standin::Registry& r = standin::registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto* handle = new ncclComm{r.nextId++};  // never freed: a stale handle never names a new communicator
  r.comms[handle] = std::move(joined);
  *comm = handle;
  return ncclSuccess;
}

HVD_STANDIN_EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  ncclResult_t error = ncclSuccess;
  auto c = standin::findComm(comm, "ncclCommDestroy", &error);
  if (!c) return error;
  std::string message;
  if (ncclResult_t r = c->drain(&message)) return standin::failNccl(r, message);
  c->leave();
  standin::Registry& r = standin::registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.retired.push_back(comm);
  r.comms.erase(comm);  // the segment is unmapped when the last queued call releases it
  return ncclSuccess;
}

HVD_STANDIN_EXPORT ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  ncclResult_t error = ncclSuccess;
  auto c = standin::findComm(comm, "ncclCommAbort", &error);
  if (!c) return error;
  c->abort();
  standin::Registry& r = standin::registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.retired.push_back(comm);
  r.comms.erase(comm);
  return ncclSuccess;
}

HVD_STANDIN_EXPORT ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  if (asyncError == nullptr)
    return standin::failNccl(ncclInvalidArgument, "ncclCommGetAsyncError: null output pointer");
  ncclResult_t error = ncclSuccess;
  auto c = standin::findComm(comm, "ncclCommGetAsyncError", &error);
  if (!c) return error;
  *asyncError = c->asyncError();
  return ncclSuccess;
}

HVD_STANDIN_EXPORT ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                                              ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                              cudaStream_t stream) {
  NcclCall call{NcclCall::kAllReduce, sendbuff, recvbuff, count, datatype, op, 0};
  size_t bytes = count * standin::ncclTypeSize(datatype);
  return standin::noteGroupError(standin::add(comm, stream, call, sendbuff, bytes, recvbuff, bytes));
}

HVD_STANDIN_EXPORT ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                              ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  NcclCall call{NcclCall::kAllGather, sendbuff, recvbuff, sendcount, datatype, ncclSum, 0};
  size_t bytes = sendcount * standin::ncclTypeSize(datatype);
  ncclResult_t error = ncclSuccess;
  auto c = standin::findComm(comm, "ncclAllGather", &error);
  if (!c) return standin::noteGroupError(error);
  return standin::noteGroupError(
      standin::add(comm, stream, call, sendbuff, bytes, recvbuff, bytes * static_cast<size_t>(c->nranks())));
}

HVD_STANDIN_EXPORT ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                                              ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream) {
  NcclCall call{NcclCall::kBroadcast, sendbuff, recvbuff, count, datatype, ncclSum, root};
  size_t bytes = count * standin::ncclTypeSize(datatype);
  ncclResult_t error = ncclSuccess;
  auto c = standin::findComm(comm, "ncclBroadcast", &error);
  if (!c) return standin::noteGroupError(error);
  // Only the root's sendbuff is read.
  size_t readBytes = c->rank() == root ? bytes : 0;
  return standin::noteGroupError(standin::add(comm, stream, call, sendbuff, readBytes, recvbuff, bytes));
}

HVD_STANDIN_EXPORT ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                                  ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                                  cudaStream_t stream) {
  NcclCall call{NcclCall::kReduceScatter, sendbuff, recvbuff, recvcount, datatype, op, 0};
  size_t bytes = recvcount * standin::ncclTypeSize(datatype);
  ncclResult_t error = ncclSuccess;
  auto c = standin::findComm(comm, "ncclReduceScatter", &error);
  if (!c) return standin::noteGroupError(error);
  return standin::noteGroupError(
      standin::add(comm, stream, call, sendbuff, bytes * static_cast<size_t>(c->nranks()), recvbuff, bytes));
}

HVD_STANDIN_EXPORT ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
                                         ncclComm_t comm, cudaStream_t stream) {
  NcclCall call{NcclCall::kSend, sendbuff, nullptr, count, datatype, ncclSum, peer};
  size_t bytes = count * standin::ncclTypeSize(datatype);
  return standin::noteGroupError(standin::add(comm, stream, call, sendbuff, bytes, nullptr, 0));
}

HVD_STANDIN_EXPORT ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer,
                                         ncclComm_t comm, cudaStream_t stream) {
  NcclCall call{NcclCall::kRecv, nullptr, recvbuff, count, datatype, ncclSum, peer};
  size_t bytes = count * standin::ncclTypeSize(datatype);
  return standin::noteGroupError(standin::add(comm, stream, call, nullptr, 0, recvbuff, bytes));
}

HVD_STANDIN_EXPORT ncclResult_t ncclGroupStart() {
  ++standin::t_groupDepth;
  return ncclSuccess;
}

HVD_STANDIN_EXPORT ncclResult_t ncclGroupEnd() {
  using standin::t_group;
  if (standin::t_groupDepth == 0)
    return standin::failNccl(ncclInvalidUsage, "ncclGroupEnd without a matching ncclGroupStart");
  if (--standin::t_groupDepth > 0) return ncclSuccess;
  std::vector<standin::Pending> group = std::move(t_group);
  t_group.clear();
  ncclResult_t groupError = standin::t_groupError;
  standin::t_groupError = ncclSuccess;
  if (groupError != ncclSuccess)
    return standin::failNccl(groupError, "ncclGroupEnd: a call of the group failed; the group was not launched");
  // One queued op per communicator, in the order the communicators first appear.
  while (!group.empty()) {
    ncclComm_t handle = group.front().handle;
    std::vector<standin::Pending> mine;
    std::vector<standin::Pending> rest;
    for (auto& p : group) (p.handle == handle ? mine : rest).push_back(std::move(p));
    if (ncclResult_t r = standin::submit(mine)) return r;
    group = std::move(rest);
  }
  return ncclSuccess;
}

}  // extern "C"
