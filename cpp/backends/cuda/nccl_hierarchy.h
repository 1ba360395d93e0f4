// The NCCL backend's hierarchical allreduce (HOROVOD_HIERARCHICAL_ALLREDUCE=1): with L members of a
// process set on each of H hosts, a buffer of L equal shards is
//   1. reduce-scattered among the members of each host (ncclReduceScatter, local communicator):
//      member i of a host holds shard i reduced over its host;
//   2. allreduced among the members with the same local index, one per host (ncclAllReduce,
//      cross communicator): shard i reduced over the whole set;
//   3. allgathered among the members of each host (ncclAllGather, local communicator).
// Steps 1 and 3 stay on a host's fast links; only 1/L of the buffer crosses hosts per member, and
// every member's network link carries a share. Average divides by L in step 1 and by H in step 2,
// which is the set's average because every host has L members.
//
// It needs the same number of members on every host, at least two hosts and at least two members
// per host (otherwise the flat allreduce is the same algorithm); makeNcclHierarchy says why not.
#pragma once

#include <optional>
#include <string>

#include "backends/cuda/cuda_api.h"
#include "collectives/communicator.h"

namespace hvd::cuda {

struct NcclHierarchy {
  ncclComm_t local = nullptr;  // the set's members on this rank's host
  ncclComm_t cross = nullptr;  // the set's members with this rank's local index, one per host
  int localSize = 1;           // L
  int localRank = 0;           // this rank's index among its host's members
};

// Whether `set` (its members' hosts, equal on every member) can run the hierarchical allreduce;
// if not, `why` says so for people.
bool hierarchyPossible(const Communicator::HostLayout& hosts, std::string* why);

// Creates the two communicators (`withCross` false: the local one only, cross stays null; the GPU
// Adasum combines across hosts on the host): collective over every member of `setComm`'s set
// (they exchange the NCCL ids through it), each member on `device` (current). Call only when
// hierarchyPossible() (equal on every member). Throws Error naming the failing call.
NcclHierarchy makeNcclHierarchy(const CudaApi& api, int device, Communicator& setComm, bool withCross = true);

// Destroys the communicators (not after an abort: NCCL forbids using an aborted one).
void destroyNcclHierarchy(const CudaApi& api, int device, NcclHierarchy& hierarchy);

// Allreduces `count` elements (of `elementBytes` each) of `buf` in place, on `stream`, through the three steps above.
// `count` must be a multiple of hierarchy.localSize (the caller pads). Throws Error naming the
// failing NCCL call.
void hierarchicalAllreduce(const CudaApi& api, int device, const NcclHierarchy& hierarchy, void* buf, size_t count,
                           size_t elementBytes, ncclDataType_t type, ncclRedOp_t op, cudaStream_t stream);

}  // namespace hvd::cuda
