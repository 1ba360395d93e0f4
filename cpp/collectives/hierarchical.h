// Hierarchical collectives (internal to collectives/): for members spread over several hosts
// with several members on some host, shared memory inside each host (the host's SharedSpace)
// and point-to-point algorithms across hosts (over whatever the transport routes between hosts,
// TCP for the composite "shm+tcp"). Chosen automatically from Communicator::hosts(); the
// functions below are called by allreduce(), allgatherv() and broadcast() only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "collectives/communicator.h"

namespace hvd::collectives {

// Whether hierarchical algorithms can run: members on more than one host, some host with several
// members, and a usable SharedSpace on every host with several members. With `uniform`, also
// every host with the same number of members (needed by allreduce and allgather, whose cross-host
// stage pairs local rank i of every host). The same answer on every member.
// Collective the first time the placement qualifies (the hosts' shared spaces are created and
// all members agree, through a tiny allreduce, on the half-buffer size every host can use), so
// every member must call it at the same point; cached afterwards.
bool hierarchicalUsable(Communicator& comm, bool uniform);

// out holds this rank's block at offsets[me]; fills every other block. Uniform placement only.
void allgatherHierarchical(Communicator& comm, uint8_t* out, const std::vector<size_t>& bytes,
                           const std::vector<size_t>& offsets);
// root (a set rank) -> one leader per host over a point-to-point broadcast -> shared memory.
void broadcastHierarchical(Communicator& comm, uint8_t* buf, size_t bytes, int root);

// Building blocks shared with the flat algorithms (allgather.cc, broadcast.cc).
// Ring allgather: block j (bytes[j] at offsets[j] of out) travels around the communicator.
void allgatherRing(Communicator& comm, uint8_t* out, const std::vector<size_t>& bytes,
                   const std::vector<size_t>& offsets);
// The member at index rootMember of `space` publishes buf chunk by chunk through its buffer; the
// other members copy it out. Collective among the space's members; this rank's position is
// space.memberIndex(). One barrier per chunk.
void broadcastShared(Communicator& comm, SharedSpace& space, uint8_t* buf, size_t bytes, int rootMember);

}  // namespace hvd::collectives
