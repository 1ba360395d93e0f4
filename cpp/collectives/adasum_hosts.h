// The GPU Adasum (Horovod's hierarchical Adasum), in the host part both GPU data paths share:
// with L members of a process set on each of H hosts, a fused buffer of tensors is
//   1. summed among the members of each host and split into L equal shards (a reduce-scatter):
//      member i of a host holds shard i of its host's sum;
//   2. combined with Adasum across hosts, shard by shard: member i of every host runs Adasum
//      (adasum.h) with member i of the other hosts, the per-tensor dot products and norms summed
//      over the host's L members (the tensor's pieces in every shard), so each tensor gets the
//      coefficients of the whole tensor: adasumAcrossHosts() below;
//   3. allgathered among the members of each host,
// and divided by L: the result is Adasum over the hosts of each host's average (Adasum is
// invariant to a common scale, so dividing before or after step 2 is the same up to rounding).
// On one host that is the average of the members. Steps 1 and 3 are the data path's own (NCCL
// inside the host, or the host collectives); the data path calls the helpers below around them.
//
// Needs the same number of members on every host and a power-of-two number of hosts
// (gpuAdasumUnsupported says why not, in Horovod's words). Hosts are Communicator::hosts()'s
// (equal on every member), numbered by their lowest set rank: the Adasum tree over hosts is in
// that order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "collectives/communicator.h"
#include "horovod/types.h"

namespace hvd::collectives {

// Why GPU Adasum cannot run on `hosts` (empty when it can): not the same number of members on
// every host, or a number of hosts that is not a power of two. Names process set `processSet`.
std::string gpuAdasumUnsupported(const Communicator::HostLayout& hosts, int processSet);

// Elements per shard when `total` elements are split into `parts` equal shards (the last padded).
size_t adasumShardLength(size_t total, int parts);
// The element counts of the tensors `counts` (back to back) inside shard `index` of length
// `shard`, one entry per tensor (0 where a tensor has nothing there), then one entry for the
// shard's padding beyond the tensors: they sum to `shard`.
std::vector<size_t> adasumShardCounts(const std::vector<size_t>& counts, size_t shard, int index);

// Step 2 above, in place on `shard` (this member's shard of its host's buffer, the tensors'
// pieces `shardCounts`, from adasumShardCounts). Collective over every member of `comm`, which
// must run it at the same point; nothing to do on one host. Each step bounded by comm's deadline.
void adasumAcrossHosts(Communicator& comm, void* shard, const std::vector<size_t>& shardCounts, DataType dtype,
                       std::vector<uint8_t>& scratch);

}  // namespace hvd::collectives
