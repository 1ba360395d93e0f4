// MemberBuffers: every member's buffer of one operation, mapped into this process, for the
// algorithms over the members' shared outputs (internal to collectives/): the in-place allreduce
// "shm_inplace" (each member reduces its slice straight inside everyone's output) and the
// allgather "shm_outputs" (each member writes its block straight into everyone's output). The
// buffers are shared buffers (transport/peer_memory.h); the transport's PeerMemory maps them.
//
// Protocol of map() (every member, same point of the collective order, one SharedSpace phase):
//  1. publish a small descriptor of this rank's buffer (its SharedBufferInfo, offset and bytes;
//     id 0 = not a shared buffer) in this rank's half of the set's SharedSpace, plus the peer
//     buffers it mapped in its last operation on this communicator; barrier (full fence: it also
//     publishes the buffers' contents). If any member has no shared buffer, or the sizes differ,
//     every member returns false here, before anything is mapped.
//  2. map every peer's buffer (PeerMemory caches the mappings), publish ok/failed; barrier; if any
//     member failed, every member returns false. Skipped in the steady state: when every member
//     already mapped every peer's current buffer in its last operation, all proceed at once.
// After a true return the caller works on buffer(j) for every member j, then ends with a barrier
// of its own (the space's phase stays reserved until then) and calls release().
//
// One instance per Communicator (Communicator::memberBuffers), which keeps what the members
// mapped last; it goes with the communicator. Every wait is a SharedSpace barrier with the
// communicator's deadline, which watches the peers: a dead peer gives PeerLost, never a hang.
// Thread running the communicator's collectives only; no allocation per call in the steady state.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "collectives/communicator.h"
#include "transport/peer_memory.h"

namespace hvd::collectives {

class MemberBuffers {
 public:
  // `mine`: this rank's buffer of `bytes` for the operation, or nullptr when it has none (then
  // every member returns false). `what` names the operation in warnings and errors. Throws
  // PeerLost/Timeout like the collectives, and Aborted when a buffer mapped before cannot be
  // mapped again (the peers are already working on the buffers).
  bool map(Communicator& comm, SharedSpace& space, PeerMemory& peers, uint64_t phase, void* mine, size_t bytes,
           const char* what);

  // Member j's buffer in this process (valid after a true map() until release()).
  uint8_t* buffer(int j) const { return buffers_[static_cast<size_t>(j)]; }
  uint8_t* const* buffers() const { return buffers_.data(); }

  // Drops this operation's hold on the peers' mappings (PeerMemory keeps them cached).
  void release();

  // Bytes of the SharedSpace half that map() needs for `n` members.
  static size_t controlBytes(int n);

 private:
  // A buffer a member mapped (or owns), by owner and id.
  struct Seen {
    int64_t owner;
    uint64_t id;
  };
  std::vector<uint8_t*> buffers_;
  std::vector<std::shared_ptr<void>> holds_;
  // The members' buffers of the last completed operation (all of them mapped then).
  std::vector<Seen> lastSeen_;
};

// Whether the shared-output algorithms can serve this communicator at all: several members, a
// usable SharedSpace with room for MemberBuffers' descriptors, and a transport that maps peers'
// buffers. Returns the space and the PeerMemory when so. Depends only on what every member sees
// alike. Collective the first time (it may create the SharedSpace).
bool sharedOutputsUsable(Communicator& comm, SharedSpace** space, PeerMemory** peers);

}  // namespace hvd::collectives
