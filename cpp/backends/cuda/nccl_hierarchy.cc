#include "backends/cuda/nccl_hierarchy.h"

#include <cstring>
#include <vector>

#include "backends/cuda/device_util.h"
#include "collectives/collectives.h"
#include "common/logging.h"

namespace hvd::cuda {
namespace {

// What each member contributes to the id exchange: the id of its host's local communicator if it
// is its host's first member, the id of its cross communicator if it is on the first host.
struct HierarchyIds {
  ncclUniqueId local;
  ncclUniqueId cross;
};

}  // namespace

bool hierarchyPossible(const Communicator::HostLayout& hosts, std::string* why) {
  if (hosts.count < 2) {
    *why = "the process set is on one host (the flat NCCL allreduce is the same algorithm there)";
  } else if (!hosts.uniform) {
    *why = "its hosts have different numbers of ranks (the hierarchical allreduce needs the same number on each)";
  } else if (hosts.maxLocalSize < 2) {
    *why = "it has one rank per host (the flat NCCL allreduce is the same algorithm there)";
  } else {
    return true;
  }
  return false;
}

NcclHierarchy makeNcclHierarchy(const CudaApi& api, int device, Communicator& setComm, bool withCross) {
  const Communicator::HostLayout& hosts = setComm.hosts();
  NcclHierarchy h;
  h.localSize = hosts.localSize();
  h.localRank = hosts.localRank;
  HierarchyIds mine;
  std::memset(&mine, 0, sizeof(mine));
  if (hosts.localRank == 0) HVD_NCCL_CHECK(api, device, nullptr, api.nccl->getUniqueId(&mine.local));
  if (withCross && hosts.host == 0) HVD_NCCL_CHECK(api, device, nullptr, api.nccl->getUniqueId(&mine.cross));
  std::vector<HierarchyIds> all(static_cast<size_t>(setComm.size()));
  collectives::allgatherv(setComm, &mine, all.data(), std::vector<size_t>(all.size(), sizeof(HierarchyIds)));
  const HierarchyIds& localRoot = all[static_cast<size_t>(hosts.members[hosts.host][0])];
  const HierarchyIds& crossRoot = all[static_cast<size_t>(hosts.members[0][hosts.localRank])];
  HVD_NCCL_CHECK(api, device, nullptr, api.nccl->commInitRank(&h.local, h.localSize, localRoot.local, h.localRank));
  if (!withCross) return h;
  const ncclResult_t status = api.nccl->commInitRank(&h.cross, hosts.count, crossRoot.cross, hosts.host);
  if (status != ncclSuccess) {
    api.nccl->commDestroy(h.local);
    checkNccl(api, status, "ncclCommInitRank (cross-host communicator)", device);
  }
  return h;
}

void destroyNcclHierarchy(const CudaApi& api, int device, NcclHierarchy& hierarchy) {
  for (ncclComm_t* comm : {&hierarchy.local, &hierarchy.cross}) {
    if (*comm == nullptr) continue;
    const ncclResult_t status = api.nccl->commDestroy(*comm);
    if (status != ncclSuccess) {
      HVD_LOG(Warning) << "ncclCommDestroy on GPU " << device << ": " << api.nccl->getErrorString(status);
    }
    *comm = nullptr;
  }
}

void hierarchicalAllreduce(const CudaApi& api, int device, const NcclHierarchy& h, void* buf, size_t count,
                           size_t elementBytes, ncclDataType_t type, ncclRedOp_t op, cudaStream_t stream) {
  const size_t shard = count / static_cast<size_t>(h.localSize);
  if (shard == 0) return;
  uint8_t* mine = static_cast<uint8_t*>(buf) + static_cast<size_t>(h.localRank) * shard * elementBytes;
  // In place, as NCCL allows: each step's output is the part of `buf` it reads from.
  HVD_NCCL_CHECK(api, device, h.local, api.nccl->reduceScatter(buf, mine, shard, type, op, h.local, stream));
  HVD_NCCL_CHECK(api, device, h.cross, api.nccl->allReduce(mine, mine, shard, type, op, h.cross, stream));
  HVD_NCCL_CHECK(api, device, h.local, api.nccl->allGather(mine, buf, shard, type, h.local, stream));
}

}  // namespace hvd::cuda
